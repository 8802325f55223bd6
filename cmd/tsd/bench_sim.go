package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tsd-project/tsd/cmd/ts-fake/perfmodel"
	"github.com/tsd-project/tsd/profiles"
)

// A benchmark of ts-fake engines measures no GPU. When their profile
// gives them ts-fake's performance model (--fake-perf PRESET in the
// engine args), the figures are a simulation resting on what the preset's
// numbers came from, and the report says so wherever it prints them
// (table, JSON, PNG title), as the repo's rule for simulated figures asks.

// simulation is what a layout's engines are: real ones, or ts-fake with
// or without its performance model.
type simulation struct {
	Presets []string // the distinct presets its roles run under, by name
	Fake    int      // roles whose engine is ts-fake
	Roles   int      // roles in all
	Basis   string   // what the presets describe and rest on
}

// detectSimulation reads a plan's engine command lines and environment
// as ts-fake does (perfmodel.FromArgs: --fake-perf, else TS_FAKE_PERF).
func detectSimulation(plan *profiles.Plan) simulation {
	var s simulation
	var bases []string
	for _, r := range plan.Roles {
		s.Roles++
		if len(r.Argv) == 0 || !isFakeEngine(r.Argv[0]) {
			continue
		}
		s.Fake++
		getenv := func(k string) string {
			if v, ok := r.Env[k]; ok {
				return v
			}
			return os.Getenv(k)
		}
		p, ok, err := perfmodel.FromArgs(r.Argv, getenv)
		name, basis := p.Name, ""
		switch {
		case err != nil:
			name, _ = flagValue(r.Argv, fakePerfFlag)
			if name == "" {
				name = getenv("TS_FAKE_PERF")
			}
			basis = fmt.Sprintf("%s: unknown here (%v)", name, err)
		case !ok:
			continue
		default:
			basis = fmt.Sprintf("%s, %s: rests on %s", p.Name, p.Describes, p.RestsOn)
		}
		if !slices.Contains(s.Presets, name) {
			s.Presets = append(s.Presets, name)
			bases = append(bases, basis)
		}
	}
	s.Basis = strings.Join(bases, "; ")
	return s
}

// isFakeEngine: the engine command is ts-fake (by its file name).
func isFakeEngine(cmd string) bool {
	return strings.HasPrefix(filepath.Base(cmd), "ts-fake")
}

// fakePerfFlag is ts-fake's performance model flag (cmd/ts-fake).
const fakePerfFlag = "--fake-perf"

// flagValue finds --flag VALUE or --flag=VALUE in argv.
func flagValue(argv []string, flag string) (string, bool) {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1], true
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Simulated reports whether the figures come from ts-fake rather than
// GPUs.
func (s simulation) Simulated() bool { return s.Fake > 0 }

// Note is the words that go beside the figures: empty for real engines.
func (s simulation) Note() string {
	switch {
	case s.Fake == 0:
		return ""
	case len(s.Presets) == 0:
		return "simulated (ts-fake engines without a performance model: their latencies are ts-fake's fixed pacing, not a GPU's; give them --fake-perf PRESET)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "simulated (ts-fake performance model %s", s.Basis)
	if s.Fake < s.Roles {
		fmt.Fprintf(&b, "; %d of %d roles on ts-fake", s.Fake, s.Roles)
	}
	b.WriteString(")")
	return b.String()
}

// runNote is the note of a whole comparison: the layouts' notes, each
// once.
func runNote(sims []simulation) string {
	var notes []string
	for _, s := range sims {
		if n := s.Note(); n != "" && !slices.Contains(notes, n) {
			notes = append(notes, n)
		}
	}
	return strings.Join(notes, "; ")
}

package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

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
	Presets []string // the distinct --fake-perf values its roles run with
	Fake    int      // roles whose engine is ts-fake
	Roles   int      // roles in all
	Basis   string   // what the presets' numbers rest on, where known
}

// fakePerfFlag is ts-fake's performance model flag (cmd/ts-fake).
const fakePerfFlag = "--fake-perf"

// detectSimulation reads a plan's engine command lines.
func detectSimulation(plan *profiles.Plan) simulation {
	var s simulation
	for _, r := range plan.Roles {
		s.Roles++
		if len(r.Argv) == 0 {
			continue
		}
		if isFakeEngine(r.Argv[0]) {
			s.Fake++
		}
		if v, ok := flagValue(r.Argv, fakePerfFlag); ok && v != "" && !slices.Contains(s.Presets, v) {
			s.Presets = append(s.Presets, v)
		}
	}
	slices.Sort(s.Presets)
	if len(s.Presets) > 0 {
		s.Basis = presetBasis(s.Presets)
	}
	return s
}

// isFakeEngine: the engine command is ts-fake (by its file name).
func isFakeEngine(cmd string) bool {
	return strings.HasPrefix(filepath.Base(cmd), "ts-fake")
}

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
	fmt.Fprintf(&b, "simulated (ts-fake performance model %s", strings.Join(s.Presets, ", "))
	if s.Basis != "" {
		b.WriteString(": rests on " + s.Basis)
	}
	if s.Fake < s.Roles {
		fmt.Fprintf(&b, "; %d of %d roles on ts-fake", s.Fake, s.Roles)
	}
	b.WriteString(")")
	return b.String()
}

// Short is Note without the basis, for a plot's title.
func (s simulation) Short() string {
	if s.Fake == 0 {
		return ""
	}
	if len(s.Presets) == 0 {
		return "simulated: ts-fake without a performance model"
	}
	return "simulated: ts-fake performance model " + strings.Join(s.Presets, ", ")
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

// runShort is runNote's short form.
func runShort(sims []simulation) string {
	var notes []string
	for _, s := range sims {
		if n := s.Short(); n != "" && !slices.Contains(notes, n) {
			notes = append(notes, n)
		}
	}
	return strings.Join(notes, "; ")
}

// presetBasis says what the named presets' numbers rest on, from the
// performance model's own description of them; a preset it does not
// know (a FILE) is named as given.
func presetBasis(presets []string) string {
	var out []string
	for _, p := range presets {
		if b := describePreset(p); b != "" {
			out = append(out, b)
		}
	}
	return strings.Join(out, "; ")
}

// describePreset is where the performance model's presets describe
// their sources; it answers "" until one is known here.
var describePreset = func(preset string) string { return "" }

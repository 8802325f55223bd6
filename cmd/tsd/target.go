package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/supervisor"
)

// Which deployment a verb given no NAME or PROFILE means. A control verb
// (stop, restart, start, and every later verb that changes a deployment)
// acts only on the deployment of the current directory: the one whose
// control socket is in the directory's state folders (./.tsd/NAME/run,
// or an earlier tsd's shared ./.tsd/run), or the one whose profile lies
// in the directory itself. Anything else is refused with the candidates
// and the command to type: a bare `tsd stop` once stopped a deployment
// another terminal had started for other work, because it was the only
// one running, and, from /, /home or $HOME, one whose profile lay
// anywhere below. A read-only verb (status, logs, attach, bench) may
// still pick the only one running, and says which on stderr.

// candidate is one deployment a verb may mean: a running daemon, or a dead
// one that left processes.
type candidate struct {
	daemons.Entry
	Dead      bool
	Leftovers []supervisor.Leftover // live processes a dead daemon left
}

// bareChoice is pickBare's answer: the candidate (or, with socket set and
// no candidate, an unregistered daemon's socket in this directory), a
// note for stderr, or a refusal.
type bareChoice struct {
	cand   candidate
	socket string // an unregistered socket in ./.tsd
	note   string
	err    *exitError
}

// pickBare decides what a verb without NAME or PROFILE acts on. cmdline is
// the command as typed up to where the NAME goes ("tsd restart decode"),
// control says whether the verb changes the deployment, cwd is the
// current directory (absolute, symlinks resolved), localSockets the
// control sockets that exist in its state folders (localSockets()),
// cands every deployment of the registry (running and dead). Pure: the
// table test is in target_test.go.
func pickBare(cmdline string, control bool, cwd string, localSockets []string, cands []candidate) bareChoice {
	var here []candidate
	registered := map[string]bool{}
	for _, c := range cands {
		if slices.Contains(localSockets, c.Socket) || inDir(cwd, c.Profile) {
			here = append(here, c)
		}
		registered[c.Socket] = true
	}
	var unregistered []string
	for _, s := range localSockets {
		if !registered[s] {
			unregistered = append(unregistered, s)
		}
	}
	switch {
	case len(here) == 1:
		return bareChoice{cand: here[0]}
	case len(here) > 1:
		return bareChoice{err: &exitError{code: 2, msg: fmt.Sprintf(
			"tsd: %d deployments run from %s; name one:\n%s", len(here), cwd, suggest(cmdline, here))}}
	case len(unregistered) == 1:
		// A daemon here that the registry does not list (an older tsd, or
		// another registry).
		return bareChoice{socket: unregistered[0]}
	case len(unregistered) > 1:
		lines := make([]string, len(unregistered))
		for i, s := range unregistered {
			lines[i] = fmt.Sprintf("  %s --socket %s", cmdline, s)
		}
		return bareChoice{err: &exitError{code: 2, msg: fmt.Sprintf("tsd: %d unregistered deployments run from %s; name one by its socket:\n%s", len(unregistered), cwd, strings.Join(lines, "\n"))}}
	case len(cands) == 0:
		return bareChoice{err: &exitError{code: exitNotRunning, msg: "tsd: no tsd deployment is running (start one with tsd up PROFILE)"}}
	case control:
		return bareChoice{err: &exitError{code: 2, msg: fmt.Sprintf(
			"tsd: %s without a NAME acts only on the deployment of this directory, and none runs from %s (no control socket in ./.tsd, no running profile in it); name one:\n%s",
			strings.TrimPrefix(cmdline, "tsd "), cwd, suggest(cmdline, cands))}}
	}
	var live []candidate
	for _, c := range cands {
		if !c.Dead {
			live = append(live, c)
		}
	}
	switch {
	case len(live) == 1:
		return bareChoice{cand: live[0], note: fmt.Sprintf("tsd: %s (the only deployment running; profile %s)", live[0].Name, live[0].Profile)}
	case len(live) == 0 && len(cands) == 1:
		return bareChoice{cand: cands[0]} // a dead one: the verb says so
	}
	return bareChoice{err: &exitError{code: 2, msg: fmt.Sprintf("tsd: %d deployments are running; name one:\n%s", len(cands), suggest(cmdline, cands))}}
}

// inDir reports whether path lies in dir itself (not below it).
func inDir(dir, path string) bool {
	return dir != "" && path != "" && filepath.Dir(path) == filepath.Clean(dir)
}

// suggest is one line per candidate: the command to type, and what it is.
func suggest(cmdline string, cands []candidate) string {
	w := 0
	for _, c := range cands {
		w = max(w, len(cmdline)+1+len(c.Name))
	}
	var b strings.Builder
	for i, c := range cands {
		if i > 0 {
			b.WriteByte('\n')
		}
		what := c.Profile
		if c.Dead {
			what += fmt.Sprintf(" (dead: %s left)", processes(len(c.Leftovers)))
		}
		fmt.Fprintf(&b, "  %-*s   # %s", w, cmdline+" "+c.Name, what)
	}
	return b.String()
}

// processes is "1 process" or "3 processes".
func processes(n int) string {
	if n == 1 {
		return "1 process"
	}
	return fmt.Sprintf("%d processes", n)
}

// deployments reads the registry: every running deployment, and every dead
// one that left live processes (by pid and start time, from its group
// records). A dead one that left nothing is removed on the way (its
// records and its entry), as a stale entry always was.
func deployments() []candidate {
	reg, err := daemons.Open("")
	if err != nil {
		return nil
	}
	live, _ := reg.List()
	dead, _ := reg.Dead()
	out := make([]candidate, 0, len(live)+len(dead))
	for _, e := range live {
		out = append(out, candidate{Entry: e})
	}
	for _, e := range dead {
		ls := supervisor.Leftovers(e.Records)
		if len(ls) == 0 {
			supervisor.DropStaleRecords(e.Records)
			_ = reg.Remove(e.Name, e.PID)
			continue
		}
		out = append(out, candidate{Entry: e, Dead: true, Leftovers: ls})
	}
	return out
}

// currentDir is the working directory with symlinks resolved (registry
// entries hold resolved profile paths).
func currentDir() string {
	d, err := os.Getwd()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(d); err == nil {
		d = r
	}
	return d
}

// localSockets are the control sockets that exist in the current
// directory's state folders: ./.tsd/NAME/run/tsd.sock of each deployment,
// and the shared ./.tsd/run/tsd.sock of an earlier tsd; absolute.
func localSockets() []string {
	dir, err := filepath.Abs(profiles.StateRoot)
	if err != nil {
		return nil
	}
	var out []string
	if m, err := filepath.Glob(filepath.Join(dir, "*", "run", "tsd.sock")); err == nil {
		out = m // the legacy .tsd/run/tsd.sock is not two levels down
	}
	legacy := filepath.Join(dir, "run", "tsd.sock")
	if _, err := os.Stat(legacy); err == nil {
		out = append(out, legacy)
	}
	return out
}

// reapDead ends what a dead deployment left and removes its entry: `tsd
// stop NAME` of a deployment whose daemon was killed with its guardians.
func reapDead(c candidate) error {
	start := time.Now()
	reaped, err := supervisor.ReapLeftovers(c.Records, supervisor.ReapGrace, supervisor.ReapLimit)
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("tsd: %s is dead and its leftovers did not all stop: %v", c.Name, err)}
	}
	if reg, err := daemons.Open(""); err == nil {
		_ = reg.Remove(c.Name, c.PID)
	}
	parts := make([]string, len(reaped))
	for i, l := range reaped {
		parts[i] = l.String()
	}
	gone := "its daemon is gone"
	if c.PID > 0 {
		gone = fmt.Sprintf("its daemon, pid %d, is gone", c.PID)
	}
	if len(reaped) == 0 {
		fmt.Printf("%s was dead (%s) and had left nothing running\n", c.Name, gone)
		return nil
	}
	fmt.Printf("%s was dead (%s); stopped the %s it left in %s: %s\n",
		c.Name, gone, processes(len(reaped)), supervisor.HumanDuration(time.Since(start).Round(10*time.Millisecond)), strings.Join(parts, ", "))
	return nil
}

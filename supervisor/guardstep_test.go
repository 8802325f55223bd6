package supervisor

import (
	"fmt"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// guardStep's table: every (phase, input) pair that changes something is
// a row; TestGuardStepUnlistedAreNoOps proves every other pair does
// nothing.

const (
	gGrace = 30 * time.Second
	gWait  = 10 * time.Second
	gPgid  = 77
)

// gs is the guardian in phase p with its fixed facts; modifiers say the
// rest.
func gs(p guardPhase) guardState {
	s := guardState{Phase: p, Pgid: gPgid, Grace: gGrace, KillWait: gWait}
	switch p {
	case gpKilling:
		s.Armed = true
	case gpSweeping, gpDone:
		s.LeaderDone, s.Code = true, 3
	}
	return s
}

func (s guardState) led(code int) guardState { s.LeaderDone, s.Code = true, code; return s }
func (s guardState) armed() guardState       { s.Armed = true; return s }
func (s guardState) done(code int) guardState {
	s.Phase, s.Exit = gpDone, code
	return s
}

func gin(ev guardEvent) guardInput { return guardInput{Ev: ev} }
func (in guardInput) empty() guardInput {
	in.Empty = true
	return in
}
func (in guardInput) strays(p ...int) guardInput { in.Strays = p; return in }
func (in guardInput) exited(code int, sig syscall.Signal) guardInput {
	in.Code, in.Sig = code, sig
	return in
}

func says(l string) guardAct                         { return guardAct{Kind: gaSay, Line: l} }
func diags(l string) guardAct                        { return guardAct{Kind: gaDiag, Line: l} }
func sig(s syscall.Signal) guardAct                  { return guardAct{Kind: gaSignal, Sig: s} }
func ga(k guardActKind) guardAct                     { return guardAct{Kind: k} }
func gaFor(k guardActKind, d time.Duration) guardAct { return guardAct{Kind: k, Delay: d} }
func exitWith(code int) guardAct                     { return guardAct{Kind: gaExit, Code: code} }
func acts(a ...guardAct) []guardAct                  { return a }

var (
	termSent = []guardAct{sig(syscall.SIGTERM), gaFor(gaArmGrace, gGrace)}
	toSweep  = []guardAct{says("empty"), gaFor(gaArmStrays, gWait), ga(gaLook)}
)

func cat(parts ...[]guardAct) []guardAct {
	var out []guardAct
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

type guardRow struct {
	name string
	in   guardState
	ev   guardInput
	out  guardState
	acts []guardAct
}

var guardRows = []guardRow{
	// running
	{"launcher exits, ranks left: SIGTERM them", gs(gpRunning), gin(geExit).exited(1, 0),
		gs(gpStopping).led(1), cat(acts(says("exit 1 0"), ga(gaPoll), says("term engine exited")), termSent)},
	{"launcher exits alone: sweep at once", gs(gpRunning), gin(geExit).exited(137, syscall.SIGKILL).empty(),
		gs(gpSweeping).led(137), cat(acts(says("exit 137 9"), ga(gaPoll)), toSweep)},
	{"stop requested", gs(gpRunning), gin(geStop),
		gs(gpStopping), cat(acts(ga(gaPoll), says("term stop requested")), termSent)},
	{"stop requested, group already empty: wait for the reap", gs(gpRunning), gin(geStop).empty(),
		gs(gpStopping), acts(ga(gaPoll))},
	{"kill requested", gs(gpRunning), gin(geKill),
		gs(gpKilling), acts(ga(gaPoll), gaFor(gaArmHard, gWait), says("kill kill requested"),
			diags("SIGKILL to process group 77: kill requested"), sig(syscall.SIGKILL))},
	{"kill requested, group already empty", gs(gpRunning), gin(geKill).empty(),
		gs(gpKilling), acts(ga(gaPoll), gaFor(gaArmHard, gWait))},
	{"tsd is gone", gs(gpRunning), gin(geLifeline),
		gs(gpStopping), cat(acts(ga(gaPoll), says("term tsd is gone")), termSent)},
	{"tsd is gone, group already empty", gs(gpRunning), gin(geLifeline).empty(),
		gs(gpStopping), acts(ga(gaPoll))},

	// stopping: SIGTERM sent, grace running
	{"stopping: launcher exits, ranks left", gs(gpStopping), gin(geExit).exited(0, 0),
		gs(gpStopping).led(0), acts(says("exit 0 0"))},
	{"stopping: launcher exits last", gs(gpStopping), gin(geExit).exited(143, syscall.SIGTERM).empty(),
		gs(gpSweeping).led(143), cat(acts(says("exit 143 15")), toSweep)},
	{"stopping: stop again, group emptied, launcher reaped", gs(gpStopping).led(0), gin(geStop).empty(),
		gs(gpSweeping).led(0), toSweep},
	{"stopping: kill requested", gs(gpStopping), gin(geKill),
		gs(gpKilling), acts(ga(gaDisarmGrace), gaFor(gaArmHard, gWait), says("kill kill requested"),
			diags("SIGKILL to process group 77: kill requested"), sig(syscall.SIGKILL))},
	{"stopping: lifeline, group emptied, launcher reaped", gs(gpStopping).led(0), gin(geLifeline).empty(),
		gs(gpSweeping).led(0), toSweep},
	{"stopping: grace spent", gs(gpStopping), gin(geGrace),
		gs(gpKilling), acts(ga(gaDisarmGrace), gaFor(gaArmHard, gWait), says("kill still running 30s after SIGTERM"),
			diags("SIGKILL to process group 77: still running 30s after SIGTERM"), sig(syscall.SIGKILL))},
	{"stopping: grace spent as the group empties", gs(gpStopping), gin(geGrace).empty(),
		gs(gpKilling), acts(ga(gaDisarmGrace), gaFor(gaArmHard, gWait))},
	{"stopping: poll sees the group empty, launcher reaped", gs(gpStopping).led(0), gin(gePoll).empty(),
		gs(gpSweeping).led(0), toSweep},
	{"stopping: stray deadline is not armed yet, but an empty group still settles", gs(gpStopping).led(0), gin(geStrayDeadline).empty(),
		gs(gpSweeping).led(0), toSweep},
	{"stopping: hard timer (not armed) with the group empty, launcher reaped", gs(gpStopping).led(0), gin(geHard).empty(),
		gs(gpSweeping).led(0), toSweep},
	{"stopping: grace with the group empty, launcher reaped: settles after the (empty) kill", gs(gpStopping).led(0), gin(geGrace).empty(),
		gs(gpSweeping).armed().led(0), cat(acts(ga(gaDisarmGrace), gaFor(gaArmHard, gWait)), toSweep)},
	{"stopping: grace spent after the launcher's exit", gs(gpStopping).led(0), gin(geGrace),
		gs(gpKilling).led(0), acts(ga(gaDisarmGrace), gaFor(gaArmHard, gWait), says("kill still running 30s after SIGTERM"),
			diags("SIGKILL to process group 77: still running 30s after SIGTERM"), sig(syscall.SIGKILL))},
	{"stopping: kill requested as the group empties", gs(gpStopping), gin(geKill).empty(),
		gs(gpKilling), acts(ga(gaDisarmGrace), gaFor(gaArmHard, gWait))},
	{"stopping: kill requested after the launcher's exit", gs(gpStopping).led(0), gin(geKill),
		gs(gpKilling).led(0), acts(ga(gaDisarmGrace), gaFor(gaArmHard, gWait), says("kill kill requested"),
			diags("SIGKILL to process group 77: kill requested"), sig(syscall.SIGKILL))},
	{"stopping: kill requested, group empty, launcher reaped", gs(gpStopping).led(0), gin(geKill).empty(),
		gs(gpSweeping).armed().led(0), cat(acts(ga(gaDisarmGrace), gaFor(gaArmHard, gWait)), toSweep)},

	// killing: SIGKILL sent, hard timer running
	{"killing: launcher reaped, ranks left", gs(gpKilling), gin(geExit).exited(137, syscall.SIGKILL),
		gs(gpKilling).led(137), acts(says("exit 137 9"))},
	{"killing: launcher reaped last", gs(gpKilling), gin(geExit).exited(137, syscall.SIGKILL).empty(),
		gs(gpSweeping).armed().led(137), cat(acts(says("exit 137 9")), toSweep)},
	{"killing: kill again re-sends SIGKILL, not the timer", gs(gpKilling), gin(geKill),
		gs(gpKilling), acts(ga(gaDisarmGrace), says("kill kill requested"),
			diags("SIGKILL to process group 77: kill requested"), sig(syscall.SIGKILL))},
	{"killing: hard timer with members left", gs(gpKilling), guardInput{Ev: geHard, Left: []int{80, 81}},
		gs(gpKilling).done(125), acts(says("notempty 80,81"), diags("process group 77 not empty 10s after SIGKILL: [80 81]"), exitWith(125))},
	{"killing: poll sees the group empty, launcher reaped", gs(gpKilling).led(137), gin(gePoll).empty(),
		gs(gpSweeping).armed().led(137), toSweep},
	{"killing: stop with the group empty, launcher reaped", gs(gpKilling).led(137), gin(geStop).empty(),
		gs(gpSweeping).armed().led(137), toSweep},
	{"killing: lifeline with the group empty, launcher reaped", gs(gpKilling).led(137), gin(geLifeline).empty(),
		gs(gpSweeping).armed().led(137), toSweep},
	{"killing: grace (disarmed) with the group empty, launcher reaped", gs(gpKilling).led(137), gin(geGrace).empty(),
		gs(gpSweeping).armed().led(137), toSweep},
	{"killing: kill again as the group empties", gs(gpKilling), gin(geKill).empty(),
		gs(gpKilling), acts(ga(gaDisarmGrace))},
	{"killing: kill again after the launcher's exit", gs(gpKilling).led(137), gin(geKill),
		gs(gpKilling).led(137), acts(ga(gaDisarmGrace), says("kill kill requested"),
			diags("SIGKILL to process group 77: kill requested"), sig(syscall.SIGKILL))},
	{"killing: kill again, group empty, launcher reaped", gs(gpKilling).led(137), gin(geKill).empty(),
		gs(gpSweeping).armed().led(137), cat(acts(ga(gaDisarmGrace)), toSweep)},
	{"killing: hard timer after the launcher's exit, members left", gs(gpKilling).led(137), guardInput{Ev: geHard, Left: []int{80}},
		gs(gpKilling).led(137).done(125), acts(says("notempty 80"), diags("process group 77 not empty 10s after SIGKILL: [80]"), exitWith(125))},
	{"killing: hard timer as the group empties, launcher reaped: settles", gs(gpKilling).led(137), gin(geHard).empty(),
		gs(gpSweeping).armed().led(137), toSweep},
	{"killing: stray deadline (not armed) with the group empty, launcher reaped", gs(gpKilling).led(137), gin(geStrayDeadline).empty(),
		gs(gpSweeping).armed().led(137), toSweep},

	// sweeping: the group is empty, strays are killed
	{"sweeping: no strays: exit with the engine's code", gs(gpSweeping), gin(gePoll),
		gs(gpSweeping).done(3), acts(exitWith(3))},
	{"sweeping: strays are killed", gs(gpSweeping), gin(gePoll).strays(90, 91),
		gs(gpSweeping), acts(says("strays 90,91"), diags("SIGKILL to [90 91]: engine processes that left process group 77"),
			guardAct{Kind: gaKillStrays, Pids: []int{90, 91}})},
	{"sweeping: a stop request only looks again", gs(gpSweeping), gin(geStop),
		gs(gpSweeping).done(3), acts(exitWith(3))},
	{"sweeping: a kill request only looks again", gs(gpSweeping), gin(geKill).strays(90),
		gs(gpSweeping), acts(says("strays 90"), diags("SIGKILL to [90]: engine processes that left process group 77"),
			guardAct{Kind: gaKillStrays, Pids: []int{90}})},
	{"sweeping: the lifeline only looks again", gs(gpSweeping), gin(geLifeline),
		gs(gpSweeping).done(3), acts(exitWith(3))},
	{"sweeping: strays outlive the deadline", gs(gpSweeping), gin(geStrayDeadline).strays(90),
		gs(gpSweeping).done(3), acts(diags("processes [90] outlived SIGKILL"), exitWith(3))},
}

func TestGuardStep(t *testing.T) {
	t.Parallel()
	for _, r := range guardRows {
		out, got := guardStep(r.in, r.ev)
		if !reflect.DeepEqual(out, r.out) {
			t.Errorf("%s: state\n got %+v\nwant %+v", r.name, out, r.out)
		}
		if !reflect.DeepEqual(got, r.acts) {
			t.Errorf("%s: actions\n got %+v\nwant %+v", r.name, got, r.acts)
		}
	}
}

// TestGuardStepUnlistedAreNoOps: every (phase, input) pair without a row
// leaves the state alone and does nothing, in each phase's usual state
// (members left in the group, the launcher running until sweeping).
func TestGuardStepUnlistedAreNoOps(t *testing.T) {
	t.Parallel()
	key := func(s guardState, in guardInput) string { return fmt.Sprint(s.Phase, s.LeaderDone, in.Ev, in.Empty) }
	listed := map[string]bool{}
	for _, r := range guardRows {
		listed[key(r.in, r.ev)] = true
	}
	for p := gpRunning; p <= gpLast; p++ {
		for _, led := range []bool{false, true} {
			in := gs(p)
			in.LeaderDone = led
			switch {
			case p == gpRunning && led:
				continue // the launcher's exit always leaves running
			case (p == gpSweeping || p == gpDone) && !led:
				continue // only a reaped launcher's empty group gets there
			}
			for e := geExit; e <= geLast; e++ {
				for _, empty := range []bool{false, true} {
					ev := guardInput{Ev: e, Empty: empty}
					if listed[key(in, ev)] {
						continue
					}
					if p == gpSweeping && e != geExit && e != geHard && e != geGrace {
						continue // sweeping looks at its strays on every other input: rows above
					}
					out, got := guardStep(in, ev)
					if out != in || len(got) != 0 {
						t.Errorf("unlisted guardStep(%s led=%v, %s empty=%v) = %+v %v; add a row or make it a no-op", p, led, e, empty, out, got)
					}
				}
			}
		}
	}
}

// TestGuardStepIsPure: the same state and input give the same answer,
// and the input's slices are not kept or changed.
func TestGuardStepIsPure(t *testing.T) {
	t.Parallel()
	for _, r := range guardRows {
		a, aa := guardStep(r.in, r.ev)
		b, bb := guardStep(r.in, r.ev)
		if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(aa, bb) {
			t.Errorf("%s: two answers", r.name)
		}
	}
}

// TestGuardNeeds: the loop looks at the group exactly when a step may
// read it, and at the strays only while sweeping.
func TestGuardNeeds(t *testing.T) {
	t.Parallel()
	for p := gpRunning; p <= gpLast; p++ {
		for e := geExit; e <= geLast; e++ {
			st := gs(p)
			want := p == gpStopping || p == gpKilling || (p == gpRunning && (e == geExit || e == geStop || e == geKill || e == geLifeline))
			if got := st.needsGroup(e); got != want {
				t.Errorf("needsGroup(%s, %s) = %v, want %v", p, e, got, want)
			}
		}
		if got, want := gs(p).needsStrays(), p == gpSweeping; got != want {
			t.Errorf("needsStrays(%s) = %v, want %v", p, got, want)
		}
	}
}

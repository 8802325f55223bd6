package supervisor

import (
	"fmt"
	"syscall"
	"time"
)

// The guardian's decisions (docs/architecture.md §4.4): a pure
// guardStep(state, input) → (state, actions) over everything it reacts
// to, as the lifecycle's step is for a role. The loop in guardian.go
// only gathers inputs (the reaped leader, signals, the lifeline's EOF,
// timers, polls), looks at the process group when the state asks it to,
// and executes the actions: status lines, signals, timers, exit.

// guardPhase is where the guardian is in tearing the engine down.
type guardPhase uint8

const (
	// gpRunning: the engine runs and nobody asked it to stop.
	gpRunning guardPhase = iota
	// gpStopping: SIGTERM went to the group (or it was already empty);
	// the grace timer runs unless the group was empty.
	gpStopping
	// gpKilling: SIGKILL went to the group; the hard timer bounds the
	// wait for it to empty.
	gpKilling
	// gpSweeping: the group is empty and the leader reaped; descendants
	// that left the group are killed until none is left.
	gpSweeping
	// gpDone: the guardian exits with guardState.Exit.
	gpDone
	gpLast = gpDone
)

func (p guardPhase) String() string {
	return [...]string{"running", "stopping", "killing", "sweeping", "done"}[p]
}

// guardEvent is one kind of input.
type guardEvent uint8

const (
	// geExit: the engine's launcher (the group leader) was reaped.
	geExit guardEvent = iota
	// geStop: SIGTERM, SIGINT or SIGHUP (tsd asks for a graceful stop).
	geStop
	// geKill: SIGUSR1 (tsd asks for SIGKILL now).
	geKill
	// geLifeline: the lifeline read EOF: tsd is gone.
	geLifeline
	// geGrace: the grace after SIGTERM ran out.
	geGrace
	// geHard: the wait for an empty group after SIGKILL ran out.
	geHard
	// gePoll: a look at the group (or the strays) with nothing else new:
	// the stopping phases' poll ticks, and the look a step asks for.
	gePoll
	// geStrayDeadline: the strays outlived the sweep's deadline.
	geStrayDeadline
	geLast = geStrayDeadline
)

func (e guardEvent) String() string {
	return [...]string{"exit", "stop", "kill", "lifeline", "grace", "hard", "poll", "stray-deadline"}[e]
}

// guardInput is one input with the facts the loop observed when it
// took it: the group's live members once stopping (Empty, Left), the
// guardian's live children while sweeping (Strays).
type guardInput struct {
	Ev guardEvent
	// Code and Sig are the reaped leader's shell-style exit code and
	// signal (geExit).
	Code int
	Sig  syscall.Signal
	// Empty: no live process is in the engine's group.
	Empty bool
	// Left is the group's live members (geHard).
	Left []int
	// Strays are the guardian's live children while sweeping: engine
	// processes that left the group.
	Strays []int
}

// guardState is the guardian's state: the phase, the leader's end, and
// the fixed facts its messages need.
type guardState struct {
	Phase guardPhase
	// LeaderDone: the launcher was reaped; Code is its exit code.
	LeaderDone bool
	Code       int
	// Armed: the hard timer was armed (it is armed once, by the first
	// SIGKILL).
	Armed bool
	// Exit is the guardian's exit code once Phase is gpDone.
	Exit int

	// Fixed facts: the engine's process group and the two waits.
	Pgid            int
	Grace, KillWait time.Duration
}

// guardActKind is one thing the loop does for a step.
type guardActKind uint8

const (
	// gaSay writes Line to the status fd.
	gaSay guardActKind = iota
	// gaDiag writes Line into the role's log.
	gaDiag
	// gaSignal sends Sig to the whole process group.
	gaSignal
	// gaKillStrays sends SIGKILL to Pids.
	gaKillStrays
	// gaArmGrace and gaArmHard start those timers for Delay;
	// gaDisarmGrace stops the grace timer; gaArmStrays starts the
	// sweep's deadline.
	gaArmGrace
	gaDisarmGrace
	gaArmHard
	gaArmStrays
	// gaPoll starts the poll ticks (once stopping, the group is watched:
	// a rank that is not the guardian's child dies without telling it).
	gaPoll
	// gaLook asks for a gePoll input at once, with fresh facts.
	gaLook
	// gaExit ends the guardian with Code.
	gaExit
)

// guardAct is an action with every argument its execution needs.
type guardAct struct {
	Kind  guardActKind
	Line  string
	Sig   syscall.Signal
	Pids  []int
	Delay time.Duration
	Code  int
}

// needsGroup says whether the loop must look at the process group before
// stepping in (every input once stopping, and those that may stop it);
// needsStrays whether it must list the guardian's children instead.
func (s guardState) needsGroup(ev guardEvent) bool {
	switch s.Phase {
	case gpStopping, gpKilling:
		return true
	case gpRunning:
		return ev == geExit || ev == geStop || ev == geKill || ev == geLifeline
	}
	return false
}

func (s guardState) needsStrays() bool { return s.Phase == gpSweeping }

// guardStep is the guardian's decision for one input.
func guardStep(s guardState, in guardInput) (guardState, []guardAct) {
	g := stepper{s: s, in: in}
	switch s.Phase {
	case gpDone:
	case gpSweeping:
		g.sweep()
	default:
		g.stop()
	}
	return g.s, g.acts
}

// stepper holds one step's state, input and actions so far.
type stepper struct {
	s    guardState
	in   guardInput
	acts []guardAct
}

func (g *stepper) act(a guardAct) { g.acts = append(g.acts, a) }

func (g *stepper) say(format string, a ...any) {
	g.act(guardAct{Kind: gaSay, Line: fmt.Sprintf(format, a...)})
}

func (g *stepper) diag(format string, a ...any) {
	g.act(guardAct{Kind: gaDiag, Line: fmt.Sprintf(format, a...)})
}

func (g *stepper) exit(code int) {
	g.s.Phase, g.s.Exit = gpDone, code
	g.act(guardAct{Kind: gaExit, Code: code})
}

// stop is a step while the group may still have members: running,
// stopping or killing.
func (g *stepper) stop() {
	s, in := &g.s, g.in
	switch in.Ev {
	case geExit:
		if s.LeaderDone {
			return
		}
		s.LeaderDone, s.Code = true, in.Code
		g.say("exit %d %d", in.Code, int(in.Sig))
		// The launcher is gone; its ranks must not outlive it
		// (docs/protocol.md §10.5).
		g.term("engine exited")
	case geStop:
		g.term("stop requested")
	case geKill:
		g.kill("kill requested")
	case geLifeline:
		g.term("tsd is gone")
	case geGrace:
		if s.Phase != gpStopping {
			break // disarmed by a SIGKILL already sent
		}
		g.kill(fmt.Sprintf("still running %s after SIGTERM", HumanDuration(s.Grace)))
	case geHard:
		if s.Phase != gpKilling || in.Empty {
			break // the group emptied as the wait ran out: settle below
		}
		g.say("notempty %s", joinInts(in.Left))
		g.diag("process group %d not empty %s after SIGKILL: %v", s.Pgid, HumanDuration(s.KillWait), in.Left)
		g.exit(125)
		return
	}
	if s.Phase == gpRunning || !in.Empty || !s.LeaderDone {
		// Running, or waiting for the group to empty or for the leader
		// to be reaped (the next SIGCHLD or poll tick).
		return
	}
	g.say("empty")
	// Descendants that left the group (setsid, setpgid) are orphaned by
	// now and, since the guardian is their subreaper, its children: they
	// were part of the engine, so they go too. Their own children come
	// back to it in turn, hence the rounds.
	s.Phase = gpSweeping
	g.act(guardAct{Kind: gaArmStrays, Delay: s.KillWait})
	g.act(guardAct{Kind: gaLook})
}

// term sends SIGTERM to the group, unless it is stopping already or
// empty.
func (g *stepper) term(why string) {
	if g.s.Phase != gpRunning {
		return // a second stop request changes nothing
	}
	g.s.Phase = gpStopping
	g.act(guardAct{Kind: gaPoll})
	if g.in.Empty {
		return
	}
	g.say("term %s", why)
	g.act(guardAct{Kind: gaSignal, Sig: syscall.SIGTERM})
	g.act(guardAct{Kind: gaArmGrace, Delay: g.s.Grace})
}

// kill sends SIGKILL to the group unless it is empty; the first one arms
// the hard timer.
func (g *stepper) kill(why string) {
	if g.s.Phase == gpRunning {
		g.act(guardAct{Kind: gaPoll})
	} else {
		g.act(guardAct{Kind: gaDisarmGrace})
	}
	g.s.Phase = gpKilling
	if !g.s.Armed {
		g.s.Armed = true
		g.act(guardAct{Kind: gaArmHard, Delay: g.s.KillWait})
	}
	if g.in.Empty {
		return
	}
	g.say("kill %s", why)
	g.diag("SIGKILL to process group %d: %s", g.s.Pgid, why)
	g.act(guardAct{Kind: gaSignal, Sig: syscall.SIGKILL})
}

// sweep is a step once the group is empty: the strays the loop saw are
// killed until none is left, or the deadline passes.
func (g *stepper) sweep() {
	in := g.in
	switch in.Ev {
	case geExit, geHard, geGrace:
		return // the leader is reaped and both timers are done with
	case geStrayDeadline:
		g.diag("processes %v outlived SIGKILL", in.Strays)
		g.exit(g.s.Code)
		return
	}
	if len(in.Strays) == 0 {
		g.exit(g.s.Code)
		return
	}
	g.say("strays %s", joinInts(in.Strays))
	g.diag("SIGKILL to %v: engine processes that left process group %d", in.Strays, g.s.Pgid)
	g.act(guardAct{Kind: gaKillStrays, Pids: in.Strays})
}

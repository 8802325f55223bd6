package supervisor

import (
	"fmt"
	"sort"

	"github.com/tsd-project/tsd/snapshot"
)

// The lifecycle of one role instance (docs/architecture.md, "Lifecycle of
// a role instance") as data: a phase, what is pending once a requested
// stop ends, and a pure step function from (lifecycle, event) to the next
// lifecycle and the effects the actor carries out. Every decision about
// what a command or an event does lives in step; the actor only gathers
// facts for the event and executes effects.

// phase is where a role instance is in its lifecycle.
type phase int

const (
	phIdle      phase = iota // no process and nothing pending: planned or stopped
	phStarting               // process spawned, not every rank registered yet
	phRunning                // every rank registered; routed
	phDraining               // out of routing, waiting for in-flight requests to finish
	phStopping               // SIGTERM sent, waiting for the group to end
	phReleasing              // group verified empty, waiting for its GPU memory
	phBackoff                // ended on its own; waiting to start again
	phFailed                 // given up: budget spent, or a group that would not empty
	phStalled                // alive but not working (stopped tree, silent ranks); out of routing
)

func (p phase) String() string {
	switch p {
	case phIdle:
		return "idle"
	case phStarting:
		return "starting"
	case phRunning:
		return "running"
	case phDraining:
		return "draining"
	case phStopping:
		return "stopping"
	case phReleasing:
		return "releasing"
	case phBackoff:
		return "backoff"
	case phFailed:
		return "failed"
	case phStalled:
		return "stalled"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// State is the snapshot state a phase shows as. Starting shows as
// handshaking once ranks speak, and an idle role as planned or stopped;
// the actor refines those two from what it knows.
func (p phase) State() string {
	switch p {
	case phIdle:
		return snapshot.StateStopped
	case phStarting:
		return snapshot.StateStarting
	case phRunning:
		return snapshot.StateReady
	case phDraining:
		return snapshot.StateDraining
	case phStopping, phReleasing:
		return snapshot.StateStopping
	case phBackoff:
		return snapshot.StateBackoff
	case phFailed:
		return snapshot.StateFailed
	case phStalled:
		return snapshot.StateStalled
	}
	return snapshot.StatePlanned
}

// alive reports whether the phase has a process.
func (p phase) alive() bool {
	switch p {
	case phStarting, phRunning, phDraining, phStopping, phStalled:
		return true
	}
	return false
}

// after says what to do once the current process has ended on request.
type after int

const (
	afterNothing after = iota
	afterStart
	afterQuit
)

func (a after) String() string {
	return [...]string{"nothing", "start", "quit"}[a]
}

// lifecycle is the whole lifecycle state of one role instance.
type lifecycle struct {
	Phase phase
	Then  after // what a requested stop ends in
	Quit  bool  // tsd is shutting down: nothing starts again
}

type evKind int

const (
	evStart         evKind = iota // a person asked for a start
	evRestart                     // a person (or a rolling restart) asked for a restart
	evStop                        // a person asked for a stop
	evQuit                        // tsd shuts down
	evKill                        // tsd shuts down now (second Ctrl-C)
	evReady                       // every rank registered (or the launcher's ready line)
	evUnready                     // a rank dropped while ready
	evDrained                     // nothing left in flight, or the drain deadline passed
	evExited                      // the process (guardian and group) ended
	evReleased                    // the GPU release wait of a requested stop ended
	evDelayDone                   // the backoff delay is over
	evCrashReleased               // the GPU release wait before an automatic restart ended
	evStall                       // the role stopped working (stopped tree, silent ranks)
	evRecover                     // it works again
)

func (k evKind) String() string {
	return [...]string{"start", "restart", "stop", "quit", "kill", "ready", "unready", "drained", "exited",
		"released", "delay done", "crash released", "stall", "recover"}[k]
}

// event is one input of step with the facts it needs.
type event struct {
	Kind evKind
	// Now (start, restart, stop): skip the drain.
	Now bool
	// Waiting: evStart/evRestart/evDelayDone: a crash's GPU release wait
	// still runs; evCrashReleased: the backoff delay still runs.
	Waiting bool
	// evExited: the group could not be emptied.
	GroupLeft bool
	// evExited after a requested stop: a GPU release wait is to run.
	GPUWait bool
	// evExited on its own: the restart policy's answer, and whether the
	// restart may happen at once (no delay, no release wait).
	Action    Action
	Immediate bool
	// evStall: the role's stall_action is wait (else restart).
	Wait bool
	// evRecover: every rank is registered.
	Ready bool
}

// effect is one thing the actor does, in the order step lists them.
type effect int

const (
	fxSpawn           effect = iota // start the engine
	fxCountRestart                  // Restarts++
	fxResetBudget                   // a person stepped in: fresh backoff and budget
	fxCancelBackoff                 // stop the delay and any crash release wait
	fxCancelDelay                   // stop the delay only; the release wait goes on
	fxBackoff                       // start the delay and/or the crash release wait
	fxRoute                         // gateway: route the role
	fxUnroute                       // gateway: no new requests (in-flight ones go on)
	fxDrain                         // watch DrainCount until 0 or drain_timeout
	fxEndDrain                      // stop watching
	fxAbort                         // gateway: end what is still in flight
	fxTerm                          // SIGTERM the group through the guardian (and SIGCONT it)
	fxKill                          // SIGKILL the group now
	fxHoldGPUs                      // note what the role holds on its GPUs (a stop begins)
	fxDropGPUWait                   // forget that note: no release check
	fxWaitRelease                   // wait for the GPU memory of a stopped role
	fxCancelRelease                 // end that wait now
	fxStallOn                       // gateway: stalled (out of routing, requests aborted)
	fxStallOff                      // gateway: not stalled any more
	fxShowStopped                   // state stopped (reason from the actor)
	fxShowFailed                    // state failed (reason from the actor)
	fxShowCrashed                   // state crashed, before the policy's answer
	fxShowReleaseWait               // backoff, waiting for the GPU memory
)

func (e effect) String() string {
	return [...]string{"spawn", "count-restart", "reset-budget", "cancel-backoff", "cancel-delay", "backoff",
		"route", "unroute", "drain", "end-drain", "abort", "term", "kill", "hold-gpus", "drop-gpu-wait",
		"wait-release", "cancel-release", "stall-on", "stall-off", "show-stopped", "show-failed",
		"show-crashed", "show-release-wait"}[e]
}

// step is the lifecycle: a pure function of the current lifecycle and one
// event. The result's effects are executed in order.
func step(lc lifecycle, ev event) (lifecycle, []effect) {
	fx := func(next lifecycle, e ...effect) (lifecycle, []effect) { return next, e }
	to := func(p phase) lifecycle { n := lc; n.Phase = p; return n }
	p := lc.Phase
	if lc.Quit && (ev.Kind == evStart || ev.Kind == evDelayDone || ev.Kind == evCrashReleased) {
		return fx(lc) // a shutting-down role never starts again
	}
	switch ev.Kind {
	case evStart:
		switch p {
		case phIdle, phFailed:
			return fx(to(phStarting), fxResetBudget, fxSpawn)
		case phBackoff:
			if ev.Waiting {
				// The delay goes, the release wait stays: a start now
				// could OOM on memory a dying rank still holds.
				return fx(lc, fxResetBudget, fxCancelDelay, fxShowReleaseWait)
			}
			return fx(to(phStarting), fxResetBudget, fxCancelBackoff, fxSpawn)
		case phDraining, phStopping, phReleasing:
			if !lc.Quit {
				n := lc
				n.Then = afterStart
				return fx(n)
			}
		}
		return fx(lc)

	case evRestart:
		if lc.Quit {
			return fx(lc)
		}
		n := lc
		n.Then = afterStart
		switch p {
		case phIdle, phFailed:
			return fx(to(phStarting), fxResetBudget, fxCountRestart, fxSpawn)
		case phBackoff:
			if ev.Waiting {
				return fx(lc, fxResetBudget, fxCancelDelay, fxShowReleaseWait) // counted when the crash scheduled it
			}
			return fx(to(phStarting), fxResetBudget, fxCountRestart, fxCancelBackoff, fxSpawn)
		case phStarting, phRunning:
			if ev.Now {
				n.Phase = phStopping
				return fx(n, fxResetBudget, fxHoldGPUs, fxUnroute, fxAbort, fxTerm)
			}
			n.Phase = phDraining
			return fx(n, fxResetBudget, fxHoldGPUs, fxUnroute, fxDrain)
		case phStalled:
			// A stalled role has nothing to drain: its requests were ended.
			n.Phase = phStopping
			return fx(n, fxResetBudget, fxHoldGPUs, fxTerm)
		case phDraining:
			if ev.Now {
				n.Phase = phStopping
				return fx(n, fxResetBudget, fxEndDrain, fxAbort, fxTerm)
			}
			return fx(n, fxResetBudget)
		case phStopping, phReleasing:
			return fx(n, fxResetBudget)
		}
		return fx(lc)

	case evStop:
		n := lc
		if !lc.Quit {
			n.Then = afterNothing
		}
		switch p {
		case phIdle:
			return fx(n, fxShowStopped)
		case phBackoff:
			n.Phase = phIdle
			return fx(n, fxCancelBackoff, fxShowStopped)
		case phStarting, phRunning:
			if ev.Now {
				n.Phase = phStopping
				return fx(n, fxHoldGPUs, fxUnroute, fxAbort, fxTerm)
			}
			n.Phase = phDraining
			return fx(n, fxHoldGPUs, fxUnroute, fxDrain)
		case phStalled:
			n.Phase = phStopping
			return fx(n, fxHoldGPUs, fxTerm)
		case phDraining:
			if ev.Now {
				n.Phase = phStopping
				return fx(n, fxEndDrain, fxAbort, fxTerm)
			}
			return fx(n)
		}
		return fx(n)

	case evQuit:
		// The gateway has already drained and shut down HTTP: no drain here.
		n := lc
		n.Quit, n.Then = true, afterQuit
		switch p {
		case phIdle:
			return fx(n, fxShowStopped)
		case phBackoff:
			n.Phase = phIdle
			return fx(n, fxCancelBackoff, fxShowStopped)
		case phStarting, phRunning, phStalled:
			n.Phase = phStopping
			return fx(n, fxHoldGPUs, fxUnroute, fxTerm)
		case phDraining:
			n.Phase = phStopping
			return fx(n, fxEndDrain, fxAbort, fxTerm)
		}
		return fx(n)

	case evKill:
		n := lc
		n.Quit, n.Then = true, afterQuit
		switch p {
		case phIdle:
			return fx(n, fxShowStopped)
		case phBackoff:
			n.Phase = phIdle
			return fx(n, fxCancelBackoff, fxShowStopped)
		case phStarting, phRunning, phStalled, phStopping:
			n.Phase = phStopping
			return fx(n, fxDropGPUWait, fxKill)
		case phDraining:
			n.Phase = phStopping
			return fx(n, fxEndDrain, fxDropGPUWait, fxKill)
		case phReleasing:
			return fx(n, fxDropGPUWait, fxCancelRelease) // killing means now: unverified
		}
		return fx(n)

	case evReady:
		if p == phStarting {
			return fx(to(phRunning), fxRoute)
		}
		return fx(lc)

	case evUnready:
		if p == phRunning {
			return fx(to(phStarting))
		}
		return fx(lc)

	case evDrained:
		if p == phDraining {
			return fx(to(phStopping), fxEndDrain, fxAbort, fxTerm)
		}
		return fx(lc)

	case evExited:
		if ev.GroupLeft {
			// Starting again would put two engines on the same GPUs and ports.
			n := to(phFailed)
			n.Then = afterNothing
			return fx(n, fxEndDrain, fxShowFailed)
		}
		switch p {
		case phDraining, phStopping:
			if ev.GPUWait {
				return fx(to(phReleasing), fxEndDrain, fxWaitRelease)
			}
			return finishStop(lc, fxEndDrain)
		case phStarting, phRunning, phStalled:
			if lc.Quit {
				return fx(to(phIdle), fxShowStopped)
			}
			switch ev.Action {
			case ActionRestart:
				if ev.Immediate {
					return fx(to(phStarting), fxShowCrashed, fxCountRestart, fxSpawn)
				}
				return fx(to(phBackoff), fxShowCrashed, fxCountRestart, fxBackoff)
			case ActionStop:
				return fx(to(phIdle), fxShowCrashed, fxShowStopped)
			default:
				return fx(to(phFailed), fxShowCrashed, fxShowFailed)
			}
		}
		return fx(lc)

	case evReleased:
		if p == phReleasing {
			return finishStop(lc)
		}
		return fx(lc)

	case evDelayDone:
		if p != phBackoff {
			return fx(lc)
		}
		if ev.Waiting {
			return fx(lc, fxShowReleaseWait) // the delay is over but a rank may still hold the GPU
		}
		return fx(to(phStarting), fxSpawn)

	case evCrashReleased:
		if p != phBackoff || ev.Waiting {
			return fx(lc)
		}
		return fx(to(phStarting), fxSpawn)

	case evStall:
		switch p {
		case phStarting, phRunning:
			if ev.Wait {
				return fx(to(phStalled), fxStallOn)
			}
			n := to(phStopping)
			n.Then = afterStart
			return fx(n, fxStallOn, fxHoldGPUs, fxTerm)
		case phDraining:
			// The drain cannot finish: end it now; the pending restart or
			// stop goes on.
			return fx(to(phStopping), fxEndDrain, fxStallOn, fxTerm)
		}
		return fx(lc)

	case evRecover:
		if p == phStalled {
			if ev.Ready {
				return fx(to(phRunning), fxStallOff, fxRoute)
			}
			return fx(to(phStarting), fxStallOff)
		}
		return fx(lc, fxStallOff)
	}
	return fx(lc)
}

// finishStop ends a requested stop whose group is verified empty (and
// GPU memory checked): start again, or rest stopped.
func finishStop(lc lifecycle, pre ...effect) (lifecycle, []effect) {
	n := lc
	then := lc.Then
	n.Then = afterNothing
	if then == afterStart && !lc.Quit {
		n.Phase = phStarting
		return n, append(pre, fxCountRestart, fxSpawn)
	}
	n.Phase = phIdle
	return n, append(pre, fxShowStopped)
}

// stallFacts are what the stall verdict depends on.
type stallFacts struct {
	Proc     string       // why the process tree is stopped ("" = it runs)
	Ranks    map[int]bool // ranks the gateway reports silent with requests in flight
	Stalling bool         // the role is judged stalled now
	FromProc bool         // that judgement began with a stopped tree
}

type stallChange int

const (
	stallSame stallChange = iota
	stallBegins
	stallEnds
)

// stallVerdict is judgeStall's answer.
type stallVerdict struct {
	Change      stallChange
	Why         string // for stallBegins: the reason shown and sent to the gateway
	FromProc    bool   // for stallBegins: a stopped tree is the cause
	ForgetRanks bool   // drop the gateway's silent-rank reports
}

// judgeStall folds the two stall sources (docs/architecture.md: a rank is
// judged by its processes' state and by output progress) into one
// verdict. Once a stall that began with a stopped tree sees the tree run
// again, the gateway's reports of silence from that time (or caused by
// tsd's own verdict) are forgotten, so the role is re-admitted rather
// than left out forever.
func judgeStall(f stallFacts) stallVerdict {
	var v stallVerdict
	ranks := len(f.Ranks)
	if f.Stalling && f.FromProc && f.Proc == "" && ranks > 0 {
		v.ForgetRanks, ranks = true, 0
	}
	stalled := f.Proc != "" || ranks > 0
	switch {
	case stalled && !f.Stalling:
		v.Change, v.FromProc, v.Why = stallBegins, f.Proc != "", f.Proc
		if v.Why == "" {
			ids := make([]int, 0, len(f.Ranks))
			for id := range f.Ranks {
				ids = append(ids, id)
			}
			sort.Ints(ids)
			v.Why = fmt.Sprintf("rank(s) %v sent nothing for the stall timeout with requests in flight", ids)
		}
	case !stalled && f.Stalling:
		v.Change = stallEnds
	}
	return v
}

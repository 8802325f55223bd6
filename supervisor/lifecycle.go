package supervisor

import (
	"fmt"
	"sort"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The lifecycle of one role instance (docs/architecture.md §4) as data: a
// phase, the facts that refine it (what a requested stop ends in, whether
// a process runs, what the gateway is told, the reason shown) and a pure
// step function from (lifecycle, event) to the next lifecycle and the
// effects the actor carries out. Every effect carries what its execution
// needs; an effect that learns something (a spawn, a drain that finds
// nothing in flight, the restart policy's answer) returns it as an event,
// which the actor queues behind the step's other effects
// (docs/architecture.md §4.1). The state shown on screen (shown) and the
// gateway's view of the role (roleView) are functions of the lifecycle.

// phase is where a role instance is in its lifecycle.
type phase int

const (
	phPlanned   phase = iota // never started yet
	phIdle                   // no process and nothing pending: stopped
	phStarting               // starting; process spawned once Alive, not every rank registered yet
	phRunning                // every rank registered; routed
	phDraining               // out of routing, waiting for in-flight requests to finish
	phStopping               // SIGTERM sent, waiting for the group to end
	phReleasing              // group verified empty, waiting for its GPU memory
	phCrashed                // ended on its own; the restart policy is asked (never at rest)
	phBackoff                // waiting to start again: the delay, the GPU release, or both
	phFailed                 // given up: budget spent, or a group that would not empty
	phStalled                // alive but not working (stopped tree, silent ranks); out of routing
	phRemote                 // a role on another host, not all of its ranks dialled in
)

func (p phase) String() string {
	names := [...]string{"planned", "idle", "starting", "running", "draining", "stopping", "releasing",
		"crashed", "backoff", "failed", "stalled", "remote"}
	if p >= 0 && int(p) < len(names) {
		return names[p]
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// after says what to do once the current process has ended on request.
type after int

const (
	afterNothing after = iota
	afterStart
	afterQuit
	afterFail // tsd stopped it as failed (no progress): its end counts as a crash
)

func (a after) String() string {
	return [...]string{"nothing", "start", "quit", "fail"}[a]
}

// roleFacts are fixed for a role instance: they come from the plan.
type roleFacts struct {
	Remote    bool   // runs on another host: tsd follows its ranks, never its process
	Host      string // where a remote role runs
	Expect    int    // ranks that must register before it is ready; 0: the launcher's ready line decides
	StallWait bool   // health.stall_action is wait (else restart)
}

// lifecycle is the whole lifecycle state of one role instance.
type lifecycle struct {
	Phase    phase
	Then     after  // what a requested stop ends in
	Quit     bool   // tsd is shutting down: nothing starts again
	Why      string // the reason shown beside the state
	Restarts int

	// What the gateway is told (roleView).
	Alive  bool   // a process of it runs: from evSpawned to evExited (never for a remote role: tsd sees none)
	Routed bool   // new requests may go to it
	Stall  string // the stall verdict the gateway holds; "" when none

	Seen      bool // starting: a rank has spoken (shown as handshaking)
	Stalling  bool // judged stalled now
	StallProc bool // that judgement began with a stopped process tree
	Delaying  bool // backoff: the delay runs
	Holding   bool // backoff: a GPU release wait runs alongside

	Role roleFacts

	// Next is the plan the next start runs, with the facts it brings
	// (an apply's restart into a changed plan, docs/architecture.md
	// §4.3); nil: the current plan.
	Next     *profiles.RolePlan
	NextRole roleFacts
}

// newLifecycle is where a role instance begins.
func newLifecycle(f roleFacts) lifecycle {
	if f.Remote {
		// Nothing ties a remote engine's lane connections to a process
		// tsd owns: say so where the operator looks (SECURITY.md).
		return lifecycle{Phase: phRemote, Role: f,
			Why: "runs on " + f.Host + "; waiting for its ranks to dial in; its lane is unauthenticated: keep that network trusted"}
	}
	return lifecycle{Phase: phPlanned, Role: f}
}

// over reports whether the actor may end: tsd shuts down and nothing of
// the role is left to wait for.
func (lc lifecycle) over() bool {
	return lc.Quit && (lc.Role.Remote || (!lc.Alive && lc.Phase != phReleasing))
}

type evKind int

const (
	evStart       evKind = iota // a person asked for a start
	evRestart                   // a person (or a rolling restart) asked for a restart
	evStop                      // a person asked for a stop
	evQuit                      // tsd shuts down
	evKill                      // tsd shuts down now (second Ctrl-C)
	evSpawned                   // the engine's process runs
	evReadyLine                 // the launcher logged its ready line
	evRanks                     // the gateway reported a rank change
	evProcStall                 // the /proc scanner saw the tree stop or run again
	evNoProgress                // a starting run printed nothing for the no-progress deadline
	evDrained                   // nothing left in flight, or the drain deadline passed
	evTermTimeout               // the group outlived SIGTERM's grace (and the guardian's margin)
	evExited                    // the process (guardian and group) ended
	evDecided                   // the restart policy answered for a crash
	evReleased                  // a GPU release wait ended
	evDelayDone                 // the backoff delay is over
	evRename                    // an apply renames the instance (Name): same process, same addresses
	evUpdate                    // an apply changes how tsd supervises it (Plan, Facts): no restart
)

// evLast is the last event kind (tests walk them all).
const evLast = evUpdate

func (k evKind) String() string {
	return [...]string{"start", "restart", "stop", "quit", "kill", "spawned", "ready line", "ranks",
		"proc stall", "no progress", "drained", "term timeout", "exited", "decided", "released",
		"delay done", "rename", "update"}[k]
}

// event is one input of step with the facts it needs.
type event struct {
	Kind evKind
	Now  bool   // evRestart, evStop: skip the drain
	Why  string // evRestart, evStop, evQuit, evKill, evNoProgress, evTermTimeout, evDecided, evReleased: why

	// evExited: how the run ended, for how long it ran, what is left of
	// its group when it could not be emptied, whether a GPU hold was
	// taken when a stop began, and its last error-looking line.
	Exit    Exit
	Ran     time.Duration
	Left    string
	Held    bool
	ErrLine string

	// evDecided: the restart policy's answer, and whether a GPU hold of
	// the crashed run is to be waited for.
	Action  Action
	Delay   time.Duration
	Holding bool

	// evReleased: the memory was seen released.
	OK bool

	// evRanks, evProcStall, evReadyLine: ranks registered and seen (HELLO
	// or later), time since the process started, whether tsd is
	// shutting down, and the two stall sources: why the tree is stopped
	// ("" = it runs) and the ranks the gateway reports silent.
	Reg, Seen int
	Since     time.Duration
	Closing   bool
	Proc      string
	Silent    map[int]bool

	// evDrained: the drain deadline passed with requests left.
	TimedOut bool
	Limit    time.Duration

	// evRestart: the plan the restart runs and its facts (an apply's
	// changed instance; nil: the current plan); evUpdate: the plan to
	// take now. evRename: the new name.
	Plan  *profiles.RolePlan
	Facts roleFacts
	Name  string

	// Reply, on a command, is its sender's waiter: the actor answers it
	// from the states the command leads to (answer.go). step never
	// reads it.
	Reply *waiter
}

type fxKind int

const (
	fxSpawn         fxKind = iota // start the engine; → evSpawned, or evExited when it cannot start
	fxResetBudget                 // a person stepped in: fresh backoff and budget
	fxCancelBackoff               // stop the delay and any crash release wait
	fxCancelDelay                 // stop the delay only; the release wait goes on
	fxDelay                       // start the backoff delay (Delay); → evDelayDone later
	fxDrain                       // count what is in flight and watch it; → evDrained when nothing is
	fxEndDrain                    // stop watching
	fxAbort                       // gateway: end what is still in flight (Reason)
	fxTerm                        // SIGTERM the group through the guardian, and SIGCONT it (Reason: why)
	fxKill                        // SIGKILL the group now (Reason: why, logged when set)
	fxHoldGPUs                    // note what the role holds on its GPUs (a stop begins, or a run crashed)
	fxDropHold                    // forget that note: no release check
	fxWaitRelease                 // wait for the held GPU memory; → evReleased later
	fxCancelRelease               // end that wait now (its evReleased still comes)
	fxDecide                      // ask the restart policy (Exit, Ran; Reason: head of its reason); → evDecided
	fxForgetSilent                // drop the gateway's silent-rank reports
	fxNote                        // a line in the role's log (Reason)
	fxEvent                       // a line in the event list (Reason)
	fxShow                        // publish the state now, before the effects after it
	fxAdopt                       // take Plan as the instance's plan (before a spawn, or at once for an update)
	fxRename                      // take the name Name: the roster's map; the gateway's worker and the group record follow
)

func (k fxKind) String() string {
	return [...]string{"spawn", "reset-budget", "cancel-backoff", "cancel-delay", "delay", "drain",
		"end-drain", "abort", "term", "kill", "hold-gpus", "drop-hold", "wait-release", "cancel-release",
		"decide", "forget-silent", "note", "event", "show", "adopt", "rename"}[k]
}

// effect is one thing the actor does, in the order step lists them, with
// every argument its execution needs.
type effect struct {
	Kind   fxKind
	Reason string
	Delay  time.Duration
	Exit   Exit
	Ran    time.Duration
	Plan   *profiles.RolePlan // fxAdopt
	Name   string             // fxRename
}

func (e effect) String() string {
	s := e.Kind.String()
	if e.Reason != "" {
		s += fmt.Sprintf("(%q)", e.Reason)
	}
	if e.Delay != 0 {
		s += "(" + e.Delay.String() + ")"
	}
	if e.Name != "" {
		s += "(" + e.Name + ")"
	}
	if e.Plan != nil {
		s += "(plan " + e.Plan.Name + ")"
	}
	return s
}

// Reasons tsd shows for what it does itself.
const (
	whyRestart     = "restart requested"
	whyStop        = "stop requested"
	whyQuit        = "tsd shutting down"
	whyKill        = "SIGKILL requested"
	whyStopped     = "stopped by request"
	whyReleaseWait = "waiting for the GPU memory to be released"
	whyDialIn      = "waiting for its ranks to dial in"
)

func fx(k fxKind) effect                { return effect{Kind: k} }
func fxWhy(k fxKind, why string) effect { return effect{Kind: k, Reason: why} }

// step is the lifecycle: a pure function of the current lifecycle and one
// event. The result's effects are executed in order.
func step(lc lifecycle, ev event) (lifecycle, []effect) {
	if lc.Quit && (ev.Kind == evStart || ev.Kind == evRestart || ev.Kind == evDelayDone) {
		return lc, nil // a shutting-down role never starts again
	}
	switch ev.Kind {
	case evRename:
		// Only the name moves; the process and its state stay.
		return lc, []effect{{Kind: fxRename, Name: ev.Name}}
	case evUpdate:
		lc.Role.StallWait = ev.Facts.StallWait
		return lc, []effect{{Kind: fxAdopt, Plan: ev.Plan}}
	}
	if lc.Role.Remote {
		return stepRemote(lc, ev)
	}
	switch ev.Kind {
	case evStart:
		return onStart(lc)
	case evRestart:
		if ev.Plan != nil {
			// The restart runs the new plan: the next start takes it.
			lc.Next, lc.NextRole = ev.Plan, ev.Facts
		}
		return onRestart(lc, ev)
	case evStop:
		return onStop(lc, ev)
	case evQuit, evKill:
		return onQuit(lc, ev)
	case evSpawned:
		if lc.Phase == phStarting {
			lc.Alive = true
		}
	case evReadyLine:
		if lc.Phase == phStarting && lc.Alive && lc.Role.Expect == 0 {
			return ready(lc, ev)
		}
	case evRanks:
		return onRanks(lc, ev)
	case evProcStall:
		return onProcStall(lc, ev)
	case evNoProgress:
		return onNoProgress(lc, ev)
	case evDrained:
		return onDrained(lc, ev)
	case evTermTimeout:
		if lc.Phase == phStopping && lc.Alive {
			return lc, []effect{fxWhy(fxKill, ev.Why)}
		}
	case evExited:
		return onExited(lc, ev)
	case evDecided:
		return onDecided(lc, ev)
	case evReleased:
		return onReleased(lc, ev)
	case evDelayDone:
		return onDelayDone(lc)
	}
	return lc, nil
}

// onNoProgress: a starting run that printed nothing for the deadline is
// stopped as failed to start; its end counts as a crash.
func onNoProgress(lc lifecycle, ev event) (lifecycle, []effect) {
	if lc.Phase != phStarting || !lc.Alive {
		return lc, nil
	}
	lc.Phase, lc.Then, lc.Why, lc.Routed = phStopping, afterFail, ev.Why, false
	return lc, []effect{fxWhy(fxNote, ev.Why+"; stopping it"), fxWhy(fxTerm, ev.Why)}
}

// onDrained: the drain is over, finished or timed out: what is left ends,
// then the group is stopped.
func onDrained(lc lifecycle, ev event) (lifecycle, []effect) {
	if lc.Phase != phDraining {
		return lc, nil
	}
	abort := lc.Why
	if ev.TimedOut {
		abort += fmt.Sprintf("; drain_timeout %s passed", HumanDuration(ev.Limit))
	}
	lc.Phase = phStopping
	return lc, []effect{fx(fxEndDrain), fxWhy(fxAbort, abort), fxWhy(fxTerm, lc.Why)}
}

func onDelayDone(lc lifecycle) (lifecycle, []effect) {
	if lc.Phase != phBackoff || !lc.Delaying {
		return lc, nil
	}
	lc.Delaying = false
	if lc.Holding {
		lc.Why = whyReleaseWait // the delay is over but a rank may still hold the GPU
		return lc, nil
	}
	return spawn(lc, false)
}

func onProcStall(lc lifecycle, ev event) (lifecycle, []effect) {
	switch lc.Phase {
	case phStarting, phRunning, phDraining, phStalled:
		next, fxs, _ := judgeStep(lc, ev)
		return next, fxs
	}
	return lc, nil
}

// spawn moves to starting and starts the engine; count says whether this
// start is a restart.
func spawn(lc lifecycle, count bool, pre ...effect) (lifecycle, []effect) {
	if lc.Quit {
		return stopped(lc, pre...) // a shutting-down role never starts again
	}
	lc.Phase, lc.Why, lc.Seen = phStarting, "", false
	lc.Delaying, lc.Holding = false, false
	if count {
		lc.Restarts++
	}
	if lc.Next != nil {
		pre = append(pre, effect{Kind: fxAdopt, Plan: lc.Next})
		lc.Role, lc.Next, lc.NextRole = lc.NextRole, nil, roleFacts{}
	}
	return lc, append(pre, fx(fxSpawn))
}

// ready: every rank registered (or the launcher said so): route it.
func ready(lc lifecycle, ev event) (lifecycle, []effect) {
	lc.Phase, lc.Routed, lc.Why, lc.Seen = phRunning, true, "", false
	return lc, []effect{fx(fxShow), fxWhy(fxEvent, "ready after "+snapshot.FormatDuration(ev.Since))}
}

// stopped: the role rests with nothing running.
func stopped(lc lifecycle, pre ...effect) (lifecycle, []effect) {
	lc.Phase, lc.Why = phIdle, whyStopped
	if lc.Quit {
		lc.Why = whyQuit
	}
	lc.Delaying, lc.Holding = false, false
	return lc, pre
}

func onStart(lc lifecycle) (lifecycle, []effect) {
	switch lc.Phase {
	case phPlanned, phIdle, phFailed:
		return spawn(lc, false, fx(fxResetBudget))
	case phBackoff:
		if lc.Holding {
			// The delay goes, the release wait stays: a start now could
			// OOM on memory a dying rank still holds.
			lc.Delaying, lc.Why = false, whyReleaseWait
			return lc, []effect{fx(fxResetBudget), fx(fxCancelDelay)}
		}
		return spawn(lc, false, fx(fxResetBudget), fx(fxCancelBackoff))
	case phDraining, phStopping, phReleasing:
		lc.Then = afterStart
	}
	return lc, nil
}

// leave takes a starting or running role out of routing for a stop or a
// restart: drained, or at once with now.
func leave(lc lifecycle, why string, now bool, pre ...effect) (lifecycle, []effect) {
	lc.Why, lc.Routed = why, false
	pre = append(pre, fx(fxHoldGPUs))
	if now {
		lc.Phase = phStopping
		return lc, append(pre, fxWhy(fxAbort, why+" (--now)"), fxWhy(fxTerm, why))
	}
	lc.Phase = phDraining
	return lc, append(pre, fxWhy(fxDrain, why))
}

// hurry ends a drain at once (--now, shutdown).
func hurry(lc lifecycle, abort string, pre ...effect) (lifecycle, []effect) {
	lc.Phase = phStopping
	return lc, append(pre, fx(fxEndDrain), fxWhy(fxAbort, abort), fxWhy(fxTerm, lc.Why))
}

func onRestart(lc lifecycle, ev event) (lifecycle, []effect) {
	reset := fx(fxResetBudget)
	switch lc.Phase {
	case phPlanned, phIdle, phFailed:
		return spawn(lc, true, reset)
	case phBackoff:
		if lc.Holding {
			lc.Delaying, lc.Why = false, whyReleaseWait // counted when the crash scheduled it
			return lc, []effect{reset, fx(fxCancelDelay)}
		}
		return spawn(lc, true, reset, fx(fxCancelBackoff))
	case phStarting, phRunning:
		lc.Then = afterStart
		return leave(lc, ev.Why, ev.Now, reset)
	case phStalled:
		// A stalled role has nothing to drain: its requests were ended.
		lc.Phase, lc.Then, lc.Why, lc.Routed = phStopping, afterStart, ev.Why, false
		return lc, []effect{reset, fx(fxHoldGPUs), fxWhy(fxTerm, ev.Why)}
	case phDraining:
		lc.Then, lc.Why = afterStart, ev.Why
		if ev.Now {
			return hurry(lc, ev.Why+" (--now)", reset)
		}
		return lc, []effect{reset}
	case phStopping, phReleasing:
		lc.Then, lc.Why = afterStart, ev.Why
		return lc, []effect{reset}
	}
	return lc, nil // crashed is never at rest: the policy's answer comes first
}

func onStop(lc lifecycle, ev event) (lifecycle, []effect) {
	if lc.Quit {
		return lc, nil // the shutdown already stops it
	}
	lc.Then = afterNothing
	switch lc.Phase {
	case phPlanned:
		return stopped(lc)
	case phBackoff:
		return stopped(lc, fx(fxCancelBackoff))
	case phStarting, phRunning:
		return leave(lc, ev.Why, ev.Now)
	case phStalled:
		lc.Phase, lc.Why, lc.Routed = phStopping, ev.Why, false
		return lc, []effect{fx(fxHoldGPUs), fxWhy(fxTerm, ev.Why)}
	case phDraining:
		lc.Why = ev.Why
		if ev.Now {
			return hurry(lc, ev.Why+" (--now)")
		}
	case phStopping, phReleasing:
		lc.Why = ev.Why
	}
	return lc, nil
}

// onQuit: tsd shuts down (evQuit: the gateway has already drained and
// shut down HTTP, so there is no drain here) or kills everything now
// (evKill: unverified GPU memory).
func onQuit(lc lifecycle, ev event) (lifecycle, []effect) {
	kill := ev.Kind == evKill
	lc.Quit, lc.Then = true, afterQuit
	switch lc.Phase {
	case phPlanned, phIdle:
		next, out := stopped(lc)
		if !kill && ev.Why != "" {
			next.Why = ev.Why // e.g. removed by tsd apply, not the whole deployment
		}
		return next, out
	case phBackoff:
		return stopped(lc, fx(fxCancelBackoff))
	case phReleasing:
		if kill {
			return lc, []effect{fx(fxDropHold), fx(fxCancelRelease)} // killing means now: unverified
		}
		return lc, nil
	case phFailed, phCrashed:
		return lc, nil // nothing runs; a crash's answer then rests it (onDecided)
	}
	if !kill {
		switch lc.Phase {
		case phStarting, phRunning, phStalled:
			lc.Phase, lc.Why, lc.Routed = phStopping, ev.Why, false
			return lc, []effect{fx(fxHoldGPUs), fxWhy(fxTerm, ev.Why)}
		case phDraining:
			lc.Why = ev.Why
			return hurry(lc, ev.Why)
		}
		return lc, nil
	}
	lc.Why, lc.Routed = ev.Why, false
	var pre []effect
	if lc.Phase == phDraining {
		pre = append(pre, fx(fxEndDrain))
	}
	lc.Phase = phStopping
	return lc, append(pre, fx(fxDropHold), fx(fxKill))
}

func onRanks(lc lifecycle, ev event) (lifecycle, []effect) {
	if !lc.Alive || lc.Quit || ev.Closing {
		return lc, nil
	}
	switch lc.Phase {
	case phStarting, phRunning, phStalled:
	default:
		return lc, nil
	}
	if next, fxs, changed := judgeStep(lc, ev); changed {
		return next, fxs
	}
	exp := lc.Role.Expect
	switch {
	case lc.Phase == phStalled:
	case lc.Phase == phStarting && exp > 0 && ev.Reg >= exp:
		return ready(lc, ev)
	case lc.Phase == phRunning && ev.Reg < exp:
		lc.Phase, lc.Seen, lc.Why = phStarting, true, fmt.Sprintf("%d/%d ranks registered", ev.Reg, exp)
	case lc.Phase == phStarting && ev.Seen > 0 && !lc.Seen:
		lc.Seen = true
	}
	return lc, nil
}

// judgeStep folds the stall sources of ev into the lifecycle through
// judgeStall's verdict; changed reports whether a stall
// began or ended (the rank change that carried it is then fully handled).
func judgeStep(lc lifecycle, ev event) (lifecycle, []effect, bool) {
	v := judgeStall(stallFacts{Proc: ev.Proc, Ranks: ev.Silent, Stalling: lc.Stalling, FromProc: lc.StallProc})
	var out []effect
	if v.ForgetRanks {
		out = append(out, fx(fxForgetSilent))
	}
	switch v.Change {
	case stallBegins:
		lc.Stalling, lc.StallProc, lc.Stall = true, v.FromProc, v.Why
		if lc.Role.StallWait && (lc.Phase == phStarting || lc.Phase == phRunning) {
			lc.Phase, lc.Why = phStalled, v.Why
			return lc, append(out, fxWhy(fxNote, "stalled: "+v.Why+"; out of routing until it recovers (health.stall_action: wait)")), true
		}
		out = append(out, fxWhy(fxNote, "stalled: "+v.Why+"; restarting (health.stall_action: restart)"))
		why := "stalled: " + v.Why + "; restarting"
		if lc.Phase == phDraining {
			// The drain cannot finish: end it now; the pending restart or
			// stop goes on.
			lc.Phase, lc.Why = phStopping, why
			return lc, append(out, fx(fxEndDrain), fxWhy(fxTerm, why)), true
		}
		lc.Phase, lc.Then, lc.Why = phStopping, afterStart, why
		return lc, append(out, fx(fxHoldGPUs), fxWhy(fxTerm, why)), true
	case stallEnds:
		lc.Stalling, lc.StallProc = false, false
		out = append(out, fxWhy(fxNote, "recovered from the stall"))
		exp := lc.Role.Expect
		switch lc.Phase {
		case phStalled:
			lc.Stall = ""
			if exp == 0 || ev.Reg >= exp {
				lc.Phase, lc.Routed, lc.Why = phRunning, true, ""
				return lc, out, true
			}
			lc.Phase, lc.Seen, lc.Why = phStarting, true, fmt.Sprintf("recovered; %d/%d ranks registered", ev.Reg, exp)
		case phStarting, phRunning:
			lc.Stall = ""
		}
		// A role on its way down stays out of routing; its exit clears
		// the verdict.
		return lc, out, true
	}
	return lc, out, false
}

func onExited(lc lifecycle, ev event) (lifecycle, []effect) {
	prev := lc
	switch lc.Phase {
	case phStarting, phRunning, phStalled, phDraining, phStopping:
	default:
		return lc, nil // no process to end
	}
	lc.Alive, lc.Routed, lc.Stall, lc.Stalling, lc.StallProc, lc.Seen = false, false, "", false, false, false
	if ev.Left != "" {
		// Starting again would put two engines on the same GPUs and ports.
		lc.Phase, lc.Then, lc.Why = phFailed, afterNothing, ev.Left
		return lc, []effect{fx(fxEndDrain), fx(fxDropHold)}
	}
	head := ""
	switch {
	case prev.Phase == phStopping && prev.Then == afterFail && !lc.Quit:
		head = prev.Why + "; " // tsd stopped it as failed: the policy decides as for a crash
	case prev.Phase == phDraining || prev.Phase == phStopping:
		if ev.Held {
			lc.Phase = phReleasing
			return lc, []effect{fx(fxEndDrain), fx(fxShow), fx(fxWaitRelease)}
		}
		return finishStop(lc, fx(fxEndDrain))
	case lc.Quit:
		return stopped(lc)
	}
	lc.Phase, lc.Then = phCrashed, afterNothing
	lc.Why = head + ev.Exit.String() + " after " + HumanDuration(ev.Ran)
	// The hold comes first: the crashed state published next shows the
	// group gone, and telemetry then stops counting it as the role's.
	out := []effect{fx(fxHoldGPUs), fx(fxShow)}
	if ev.ErrLine != "" {
		out = append(out, fxWhy(fxEvent, "last error line: "+ev.ErrLine))
	}
	return lc, append(out, effect{Kind: fxDecide, Reason: head, Exit: ev.Exit, Ran: ev.Ran})
}

// finishStop ends a requested stop whose group is verified empty (and
// GPU memory checked): start again, or rest stopped; warn is why the
// memory check failed.
func finishStop(lc lifecycle, pre ...effect) (lifecycle, []effect) {
	then := lc.Then
	lc.Then = afterNothing
	if then == afterStart && !lc.Quit {
		return spawn(lc, true, pre...)
	}
	return stopped(lc, pre...)
}

func onDecided(lc lifecycle, ev event) (lifecycle, []effect) {
	if lc.Phase != phCrashed {
		return lc, nil
	}
	if lc.Quit {
		return stopped(lc, fx(fxDropHold))
	}
	switch ev.Action {
	case ActionRestart:
		lc.Restarts++
		if ev.Delay <= 0 && !ev.Holding {
			return spawn(lc, false)
		}
		lc.Phase, lc.Why, lc.Delaying, lc.Holding = phBackoff, ev.Why, ev.Delay > 0, ev.Holding
		var out []effect
		if ev.Delay > 0 {
			out = append(out, effect{Kind: fxDelay, Delay: ev.Delay})
		}
		if ev.Holding {
			out = append(out, fx(fxShow), fx(fxWaitRelease))
		}
		return lc, out
	case ActionStop:
		lc.Phase, lc.Why = phIdle, ev.Why
	default:
		lc.Phase, lc.Why = phFailed, ev.Why
	}
	return lc, []effect{fx(fxDropHold)}
}

func onReleased(lc lifecycle, ev event) (lifecycle, []effect) {
	switch {
	case lc.Phase == phReleasing:
		then, quit := lc.Then, lc.Quit
		next, out := finishStop(lc)
		if !ev.OK && (then != afterStart || quit) {
			next.Why += "; " + ev.Why
		}
		return next, out
	case lc.Phase == phBackoff && lc.Holding:
		lc.Holding = false
		if lc.Delaying {
			return lc, nil
		}
		return spawn(lc, false)
	}
	return lc, nil
}

// stepRemote is the lifecycle of a role tsd does not run: its state is
// its ranks' state, and commands other than shutdown only say so.
func stepRemote(lc lifecycle, ev event) (lifecycle, []effect) {
	switch ev.Kind {
	case evStart, evRestart, evStop:
		return lc, []effect{fxWhy(fxNote, ev.Kind.String()+": role runs on "+lc.Role.Host+"; tsd does not manage its process")}
	case evQuit, evKill:
		lc.Quit, lc.Then = true, afterQuit
	case evRanks:
		switch exp := lc.Role.Expect; {
		case exp > 0 && ev.Reg >= exp:
			lc.Phase, lc.Routed, lc.Why = phRunning, true, ""
		case lc.Phase == phRunning:
			lc.Phase, lc.Why = phRemote, whyDialIn
		}
	}
	return lc, nil
}

// shown is the state and reason a role shows: one function of its
// lifecycle.
func shown(lc lifecycle) (state, reason string) {
	states := [...]string{
		phPlanned:   snapshot.StatePlanned,
		phIdle:      snapshot.StateStopped,
		phStarting:  snapshot.StateStarting,
		phRunning:   snapshot.StateReady,
		phDraining:  snapshot.StateDraining,
		phStopping:  snapshot.StateStopping,
		phReleasing: snapshot.StateStopping,
		phCrashed:   snapshot.StateCrashed,
		phBackoff:   snapshot.StateBackoff,
		phFailed:    snapshot.StateFailed,
		phStalled:   snapshot.StateStalled,
		phRemote:    snapshot.StateRemote,
	}
	state = snapshot.StatePlanned
	if lc.Phase >= 0 && int(lc.Phase) < len(states) {
		state = states[lc.Phase]
	}
	if lc.Phase == phStarting && lc.Seen {
		state = snapshot.StateHandshaking
	}
	return state, lc.Why
}

// roleView is what the gateway is told of the role (docs/architecture.md
// §4.2): a stalled role is out of routing whatever Routed says. A remote
// role is never Alive here, since tsd sees none of its processes; the
// gateway counts remote workers alive from the start.
func roleView(name string, lc lifecycle) snapshot.RoleView {
	v := snapshot.RoleView{Alive: lc.Alive, Routed: lc.Routed && lc.Stall == "", Stalled: lc.Stall != ""}
	switch {
	case v.Stalled:
		v.Reason = "role " + name + " stalled: " + lc.Stall
	case !v.Routed:
		v.Reason = lc.Why
	}
	return v
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

package supervisor

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

type stepRow struct {
	name string
	in   lifecycle
	ev   event
	out  lifecycle
	fx   []effect
}

// at is a lifecycle in phase p and nothing else.
func at(p phase) lifecycle { return lifecycle{Phase: p} }

// lcOf is a lifecycle as a role in phase p has it: a process in the
// phases that have one, routed once running, a remote role's facts in
// the remote phase.
func lcOf(p phase) lifecycle {
	lc := at(p)
	switch p {
	case phStarting, phRunning, phDraining, phStopping, phStalled:
		lc.Alive = true
	case phRemote:
		lc.Role = remoteRole
	}
	lc.Routed = p == phRunning
	return lc
}

var remoteRole = roleFacts{Remote: true, Host: "node2", Expect: 1}

// Modifiers, so each row says only what matters to it.
func (lc lifecycle) then(a after) lifecycle     { lc.Then = a; return lc }
func (lc lifecycle) why(s string) lifecycle     { lc.Why = s; return lc }
func (lc lifecycle) restarts(n int) lifecycle   { lc.Restarts = n; return lc }
func (lc lifecycle) routed(b bool) lifecycle    { lc.Routed = b; return lc }
func (lc lifecycle) role(f roleFacts) lifecycle { lc.Role = f; return lc }
func (lc lifecycle) seen() lifecycle            { lc.Seen = true; return lc }
func (lc lifecycle) delaying() lifecycle        { lc.Delaying = true; return lc }
func (lc lifecycle) holding() lifecycle         { lc.Holding = true; return lc }
func (lc lifecycle) quitting() lifecycle        { lc.Quit, lc.Then = true, afterQuit; return lc }
func (lc lifecycle) stall(why string) lifecycle { lc.Stall, lc.Stalling = why, true; return lc }
func (lc lifecycle) stallProc(why string) lifecycle {
	lc.Stall, lc.Stalling, lc.StallProc = why, true, true
	return lc
}

func fxs(e ...effect) []effect { return e }

var (
	spawnFx   = fx(fxSpawn)
	resetFx   = fx(fxResetBudget)
	holdFx    = fx(fxHoldGPUs)
	endDrain  = fx(fxEndDrain)
	showFx    = fx(fxShow)
	waitFx    = fx(fxWaitRelease)
	dropFx    = fx(fxDropHold)
	cancelBO  = fx(fxCancelBackoff)
	two       = roleFacts{Expect: 2}
	twoWait   = roleFacts{Expect: 2, StallWait: true}
	stopped1  = "process 7 (ts-fake) stopped"
	silent0   = map[int]bool{0: true}
	crashExit = Exit{Code: 1}
)

const restartNow = whyRestart + " (--now)"
const stopNow = whyStop + " (--now)"

// stepRows is every transition of the lifecycle that changes something;
// TestStepUnlistedAreNoOps checks that every other (phase, event) pair
// leaves the lifecycle alone.
var stepRows = []stepRow{
	// start
	{"start planned", lcOf(phPlanned), event{Kind: evStart}, at(phStarting), fxs(resetFx, spawnFx)},
	{"start stopped", lcOf(phIdle).why(whyStopped), event{Kind: evStart}, at(phStarting), fxs(resetFx, spawnFx)},
	{"start failed", lcOf(phFailed).why("budget spent"), event{Kind: evStart}, at(phStarting), fxs(resetFx, spawnFx)},
	{"start in backoff", lcOf(phBackoff).delaying(), event{Kind: evStart}, at(phStarting), fxs(resetFx, cancelBO, spawnFx)},
	{"start in backoff keeps the GPU release wait", lcOf(phBackoff).delaying().holding().why("next try in 1s"), event{Kind: evStart},
		at(phBackoff).holding().why(whyReleaseWait), fxs(resetFx, fx(fxCancelDelay))},
	{"start while draining queues a start", lcOf(phDraining), event{Kind: evStart}, lcOf(phDraining).then(afterStart), nil},
	{"start while stopping queues a start", lcOf(phStopping), event{Kind: evStart}, lcOf(phStopping).then(afterStart), nil},
	{"start while releasing queues a start", lcOf(phReleasing), event{Kind: evStart}, lcOf(phReleasing).then(afterStart), nil},

	// restart
	{"restart planned", lcOf(phPlanned), event{Kind: evRestart, Why: whyRestart}, at(phStarting).restarts(1), fxs(resetFx, spawnFx)},
	{"restart stopped", lcOf(phIdle), event{Kind: evRestart, Why: whyRestart}, at(phStarting).restarts(1), fxs(resetFx, spawnFx)},
	{"restart failed", lcOf(phFailed), event{Kind: evRestart, Why: whyRestart}, at(phStarting).restarts(1), fxs(resetFx, spawnFx)},
	{"restart in backoff", lcOf(phBackoff).delaying(), event{Kind: evRestart, Why: whyRestart}, at(phStarting).restarts(1), fxs(resetFx, cancelBO, spawnFx)},
	{"restart in backoff keeps the GPU release wait", lcOf(phBackoff).delaying().holding(), event{Kind: evRestart, Why: whyRestart},
		at(phBackoff).holding().why(whyReleaseWait), fxs(resetFx, fx(fxCancelDelay))},
	{"restart running drains", lcOf(phRunning), event{Kind: evRestart, Why: whyRestart},
		lcOf(phDraining).then(afterStart).why(whyRestart), fxs(resetFx, holdFx, fxWhy(fxDrain, whyRestart))},
	{"restart starting drains", lcOf(phStarting), event{Kind: evRestart, Why: whyRestart},
		lcOf(phDraining).then(afterStart).why(whyRestart), fxs(resetFx, holdFx, fxWhy(fxDrain, whyRestart))},
	{"restart --now running", lcOf(phRunning), event{Kind: evRestart, Why: whyRestart, Now: true},
		lcOf(phStopping).then(afterStart).why(whyRestart), fxs(resetFx, holdFx, fxWhy(fxAbort, restartNow), fxWhy(fxTerm, whyRestart))},
	{"restart --now starting", lcOf(phStarting), event{Kind: evRestart, Why: whyRestart, Now: true},
		lcOf(phStopping).then(afterStart).why(whyRestart), fxs(resetFx, holdFx, fxWhy(fxAbort, restartNow), fxWhy(fxTerm, whyRestart))},
	{"restart stalled: nothing to drain", lcOf(phStalled).stall("x").routed(true), event{Kind: evRestart, Why: whyRestart},
		lcOf(phStopping).then(afterStart).why(whyRestart).stall("x"), fxs(resetFx, holdFx, fxWhy(fxTerm, whyRestart))},
	{"restart while draining", lcOf(phDraining).why(whyStop), event{Kind: evRestart, Why: whyRestart},
		lcOf(phDraining).then(afterStart).why(whyRestart), fxs(resetFx)},
	{"restart --now while draining ends the drain", lcOf(phDraining).why(whyStop), event{Kind: evRestart, Why: whyRestart, Now: true},
		lcOf(phStopping).then(afterStart).why(whyRestart), fxs(resetFx, endDrain, fxWhy(fxAbort, restartNow), fxWhy(fxTerm, whyRestart))},
	{"restart while stopping", lcOf(phStopping), event{Kind: evRestart, Why: whyRestart}, lcOf(phStopping).then(afterStart).why(whyRestart), fxs(resetFx)},
	{"restart while releasing", lcOf(phReleasing), event{Kind: evRestart, Why: whyRestart}, lcOf(phReleasing).then(afterStart).why(whyRestart), fxs(resetFx)},

	// stop
	{"stop planned", lcOf(phPlanned), event{Kind: evStop, Why: whyStop}, at(phIdle).why(whyStopped), nil},
	{"stop in backoff", lcOf(phBackoff).delaying().holding(), event{Kind: evStop, Why: whyStop}, at(phIdle).why(whyStopped), fxs(cancelBO)},
	{"stop running drains", lcOf(phRunning), event{Kind: evStop, Why: whyStop}, lcOf(phDraining).why(whyStop), fxs(holdFx, fxWhy(fxDrain, whyStop))},
	{"stop starting drains", lcOf(phStarting), event{Kind: evStop, Why: whyStop}, lcOf(phDraining).why(whyStop), fxs(holdFx, fxWhy(fxDrain, whyStop))},
	{"stop --now running", lcOf(phRunning), event{Kind: evStop, Why: whyStop, Now: true},
		lcOf(phStopping).why(whyStop), fxs(holdFx, fxWhy(fxAbort, stopNow), fxWhy(fxTerm, whyStop))},
	{"stop --now starting", lcOf(phStarting), event{Kind: evStop, Why: whyStop, Now: true},
		lcOf(phStopping).why(whyStop), fxs(holdFx, fxWhy(fxAbort, stopNow), fxWhy(fxTerm, whyStop))},
	{"stop stalled", lcOf(phStalled).stall("x"), event{Kind: evStop, Why: whyStop}, lcOf(phStopping).why(whyStop).stall("x"), fxs(holdFx, fxWhy(fxTerm, whyStop))},
	{"stop while draining a restart cancels the start", lcOf(phDraining).then(afterStart).why(whyRestart), event{Kind: evStop, Why: whyStop}, lcOf(phDraining).why(whyStop), nil},
	{"stop --now while draining", lcOf(phDraining), event{Kind: evStop, Why: whyStop, Now: true},
		lcOf(phStopping).why(whyStop), fxs(endDrain, fxWhy(fxAbort, stopNow), fxWhy(fxTerm, whyStop))},
	{"stop while stopping a restart cancels the start", lcOf(phStopping).then(afterStart), event{Kind: evStop, Why: whyStop}, lcOf(phStopping).why(whyStop), nil},
	{"stop while releasing a restart cancels the start", lcOf(phReleasing).then(afterStart), event{Kind: evStop, Why: whyStop}, lcOf(phReleasing).why(whyStop), nil},
	{"stop after a no-progress kill keeps it stopped", lcOf(phStopping).then(afterFail), event{Kind: evStop, Why: whyStop}, lcOf(phStopping).why(whyStop), nil},

	// quit: the gateway has shut down, nothing to drain
	{"quit planned", lcOf(phPlanned), event{Kind: evQuit, Why: whyQuit}, at(phIdle).quitting().why(whyQuit), nil},
	{"quit stopped", lcOf(phIdle).why(whyStopped), event{Kind: evQuit, Why: whyQuit}, at(phIdle).quitting().why(whyQuit), nil},
	{"quit backoff", lcOf(phBackoff).delaying(), event{Kind: evQuit, Why: whyQuit}, at(phIdle).quitting().why(whyQuit), fxs(cancelBO)},
	{"quit starting", lcOf(phStarting), event{Kind: evQuit, Why: whyQuit}, lcOf(phStopping).quitting().why(whyQuit), fxs(holdFx, fxWhy(fxTerm, whyQuit))},
	{"quit running", lcOf(phRunning), event{Kind: evQuit, Why: whyQuit}, lcOf(phStopping).quitting().why(whyQuit), fxs(holdFx, fxWhy(fxTerm, whyQuit))},
	{"quit stalled", lcOf(phStalled), event{Kind: evQuit, Why: whyQuit}, lcOf(phStopping).quitting().why(whyQuit), fxs(holdFx, fxWhy(fxTerm, whyQuit))},
	{"quit draining", lcOf(phDraining).why(whyRestart), event{Kind: evQuit, Why: whyQuit},
		lcOf(phStopping).quitting().why(whyQuit), fxs(endDrain, fxWhy(fxAbort, whyQuit), fxWhy(fxTerm, whyQuit))},
	{"quit stopping", lcOf(phStopping).then(afterStart).why(whyRestart), event{Kind: evQuit, Why: whyQuit}, lcOf(phStopping).quitting().why(whyRestart), nil},
	{"quit releasing", lcOf(phReleasing), event{Kind: evQuit, Why: whyQuit}, lcOf(phReleasing).quitting(), nil},
	{"quit failed", lcOf(phFailed), event{Kind: evQuit, Why: whyQuit}, lcOf(phFailed).quitting(), nil},
	{"quit crashed: its answer rests it", lcOf(phCrashed), event{Kind: evQuit, Why: whyQuit}, lcOf(phCrashed).quitting(), nil},

	// kill: now, unverified GPU memory
	{"kill planned", lcOf(phPlanned), event{Kind: evKill, Why: whyKill}, at(phIdle).quitting().why(whyQuit), nil},
	{"kill stopped", lcOf(phIdle), event{Kind: evKill, Why: whyKill}, at(phIdle).quitting().why(whyQuit), nil},
	{"kill backoff", lcOf(phBackoff).delaying(), event{Kind: evKill, Why: whyKill}, at(phIdle).quitting().why(whyQuit), fxs(cancelBO)},
	{"kill starting", lcOf(phStarting), event{Kind: evKill, Why: whyKill}, lcOf(phStopping).quitting().why(whyKill), fxs(dropFx, fx(fxKill))},
	{"kill running", lcOf(phRunning), event{Kind: evKill, Why: whyKill}, lcOf(phStopping).quitting().why(whyKill), fxs(dropFx, fx(fxKill))},
	{"kill stalled", lcOf(phStalled), event{Kind: evKill, Why: whyKill}, lcOf(phStopping).quitting().why(whyKill), fxs(dropFx, fx(fxKill))},
	{"kill stopping", lcOf(phStopping), event{Kind: evKill, Why: whyKill}, lcOf(phStopping).quitting().why(whyKill), fxs(dropFx, fx(fxKill))},
	{"kill draining", lcOf(phDraining), event{Kind: evKill, Why: whyKill}, lcOf(phStopping).quitting().why(whyKill), fxs(endDrain, dropFx, fx(fxKill))},
	{"kill releasing", lcOf(phReleasing), event{Kind: evKill, Why: whyKill}, lcOf(phReleasing).quitting(), fxs(dropFx, fx(fxCancelRelease))},
	{"kill failed", lcOf(phFailed), event{Kind: evKill, Why: whyKill}, lcOf(phFailed).quitting(), nil},
	{"kill crashed", lcOf(phCrashed), event{Kind: evKill, Why: whyKill}, lcOf(phCrashed).quitting(), nil},

	// the process
	{"spawned", at(phStarting), event{Kind: evSpawned}, lcOf(phStarting), nil},
	{"ready line, no ranks awaited", lcOf(phStarting), event{Kind: evReadyLine, Since: 2 * time.Second},
		lcOf(phRunning), fxs(showFx, fxWhy(fxEvent, "ready after 2s"))},
	{"no progress: stopped as failed", lcOf(phStarting).routed(true), event{Kind: evNoProgress, Why: "no progress for 1s"},
		lcOf(phStopping).then(afterFail).why("no progress for 1s"), fxs(fxWhy(fxNote, "no progress for 1s; stopping it"), fxWhy(fxTerm, "no progress for 1s"))},
	{"term timeout: SIGKILL", lcOf(phStopping), event{Kind: evTermTimeout, Why: "guardian did not finish"}, lcOf(phStopping), fxs(fxWhy(fxKill, "guardian did not finish"))},

	// ranks
	{"ranks registered: ready", lcOf(phStarting).role(two), event{Kind: evRanks, Reg: 2, Seen: 2, Since: time.Second},
		lcOf(phRunning).role(two), fxs(showFx, fxWhy(fxEvent, "ready after 1s"))},
	{"a rank speaks: handshaking", lcOf(phStarting).role(two), event{Kind: evRanks, Seen: 1}, lcOf(phStarting).role(two).seen(), nil},
	{"a rank drops: handshaking, still routed", lcOf(phRunning).role(two), event{Kind: evRanks, Reg: 1, Seen: 2},
		lcOf(phStarting).role(two).seen().routed(true).why("1/2 ranks registered"), nil},
	{"silent rank: restart", lcOf(phRunning).role(two), event{Kind: evRanks, Reg: 2, Silent: silent0},
		lcOf(phStopping).role(two).routed(true).then(afterStart).why("stalled: " + silentWhy + "; restarting").stall(silentWhy),
		fxs(fxWhy(fxNote, "stalled: "+silentWhy+"; restarting (health.stall_action: restart)"), holdFx, fxWhy(fxTerm, "stalled: "+silentWhy+"; restarting"))},
	{"silent rank, stall_action wait", lcOf(phStarting).role(twoWait), event{Kind: evRanks, Reg: 2, Silent: silent0},
		lcOf(phStalled).role(twoWait).why(silentWhy).stall(silentWhy),
		fxs(fxWhy(fxNote, "stalled: "+silentWhy+"; out of routing until it recovers (health.stall_action: wait)"))},
	{"silent rank speaks: ready again", lcOf(phStalled).role(twoWait).routed(true).why(silentWhy).stall(silentWhy), event{Kind: evRanks, Reg: 2},
		lcOf(phRunning).role(twoWait), fxs(fxWhy(fxNote, "recovered from the stall"))},
	{"silent rank speaks, ranks missing", lcOf(phStalled).role(twoWait).routed(true).why(silentWhy).stall(silentWhy), event{Kind: evRanks, Reg: 1},
		lcOf(phStarting).role(twoWait).routed(true).seen().why("recovered; 1/2 ranks registered"), fxs(fxWhy(fxNote, "recovered from the stall"))},

	// the process tree
	{"tree stops: restart", lcOf(phRunning), event{Kind: evProcStall, Proc: stopped1},
		lcOf(phStopping).routed(true).then(afterStart).why("stalled: " + stopped1 + "; restarting").stallProc(stopped1),
		fxs(fxWhy(fxNote, "stalled: "+stopped1+"; restarting (health.stall_action: restart)"), holdFx, fxWhy(fxTerm, "stalled: "+stopped1+"; restarting"))},
	{"tree stops while starting, wait", lcOf(phStarting).role(twoWait), event{Kind: evProcStall, Proc: stopped1},
		lcOf(phStalled).role(twoWait).why(stopped1).stallProc(stopped1),
		fxs(fxWhy(fxNote, "stalled: "+stopped1+"; out of routing until it recovers (health.stall_action: wait)"))},
	{"tree stops while draining ends the drain", lcOf(phDraining).then(afterStart).why(whyRestart), event{Kind: evProcStall, Proc: stopped1},
		lcOf(phStopping).then(afterStart).why("stalled: " + stopped1 + "; restarting").stallProc(stopped1),
		fxs(fxWhy(fxNote, "stalled: "+stopped1+"; restarting (health.stall_action: restart)"), endDrain, fxWhy(fxTerm, "stalled: "+stopped1+"; restarting"))},
	{"tree runs again; its silence forgotten", lcOf(phStalled).role(twoWait).routed(true).why(stopped1).stallProc(stopped1), event{Kind: evProcStall, Reg: 2, Silent: silent0},
		lcOf(phRunning).role(twoWait), fxs(fx(fxForgetSilent), fxWhy(fxNote, "recovered from the stall"))},

	// drain
	{"drained", lcOf(phDraining).then(afterStart).why(whyRestart), event{Kind: evDrained},
		lcOf(phStopping).then(afterStart).why(whyRestart), fxs(endDrain, fxWhy(fxAbort, whyRestart), fxWhy(fxTerm, whyRestart))},
	{"drain timed out", lcOf(phDraining).why(whyStop), event{Kind: evDrained, TimedOut: true, Limit: 300 * time.Millisecond},
		lcOf(phStopping).why(whyStop), fxs(endDrain, fxWhy(fxAbort, whyStop+"; drain_timeout 300ms passed"), fxWhy(fxTerm, whyStop))},

	// exit on request
	{"stopped group empty, no GPU check", lcOf(phStopping).why(whyStop), event{Kind: evExited}, at(phIdle).why(whyStopped), fxs(endDrain)},
	{"stopped for restart", lcOf(phStopping).then(afterStart).why(whyRestart), event{Kind: evExited}, at(phStarting).restarts(1), fxs(endDrain, spawnFx)},
	{"stopped for quit", lcOf(phStopping).quitting().why(whyQuit), event{Kind: evExited}, at(phIdle).quitting().then(afterNothing).why(whyQuit), fxs(endDrain)},
	{"stopped, GPU check", lcOf(phStopping).then(afterStart).why(whyRestart), event{Kind: evExited, Held: true},
		at(phReleasing).then(afterStart).why(whyRestart), fxs(endDrain, showFx, waitFx)},
	{"ended while draining", lcOf(phDraining).then(afterStart).why(whyRestart), event{Kind: evExited}, at(phStarting).restarts(1), fxs(endDrain, spawnFx)},
	{"group not emptied", lcOf(phStopping).then(afterStart), event{Kind: evExited, Left: "left 7"}, at(phFailed).why("left 7"), fxs(endDrain, dropFx)},
	{"group not emptied after a crash", lcOf(phRunning).stall("x"), event{Kind: evExited, Left: "left 7"}, at(phFailed).why("left 7"), fxs(endDrain, dropFx)},

	// exit on its own: the restart policy is asked
	{"crash", lcOf(phRunning), event{Kind: evExited, Exit: crashExit, Ran: 2 * time.Second},
		at(phCrashed).why("exit 1 after 2s"), fxs(holdFx, showFx, effect{Kind: fxDecide, Exit: crashExit, Ran: 2 * time.Second})},
	{"crash quotes the error line", lcOf(phStarting), event{Kind: evExited, Exit: crashExit, Ran: time.Second, ErrLine: "ValueError: bad"},
		at(phCrashed).why("exit 1 after 1s"), fxs(holdFx, showFx, fxWhy(fxEvent, "last error line: ValueError: bad"), effect{Kind: fxDecide, Exit: crashExit, Ran: time.Second})},
	{"stalled role dies", lcOf(phStalled).stall("x"), event{Kind: evExited, Exit: crashExit, Ran: time.Second},
		at(phCrashed).why("exit 1 after 1s"), fxs(holdFx, showFx, effect{Kind: fxDecide, Exit: crashExit, Ran: time.Second})},
	{"stopped as failed: a crash with its reason", lcOf(phStopping).then(afterFail).why("no progress for 1s"), event{Kind: evExited, Exit: Exit{Code: 143, Signal: 15}, Ran: time.Second},
		at(phCrashed).why("no progress for 1s; exit 143 (SIGTERM) after 1s"),
		fxs(holdFx, showFx, effect{Kind: fxDecide, Reason: "no progress for 1s; ", Exit: Exit{Code: 143, Signal: 15}, Ran: time.Second})},
	{"ended on its own while quitting", lcOf(phRunning).quitting(), event{Kind: evExited, Exit: crashExit}, at(phIdle).quitting().why(whyQuit), nil},

	// the restart policy's answer
	{"restart at once", lcOf(phCrashed).why("exit 1"), event{Kind: evDecided, Action: ActionRestart, Why: "restarting"}, at(phStarting).restarts(1), fxs(spawnFx)},
	{"back off", lcOf(phCrashed), event{Kind: evDecided, Action: ActionRestart, Delay: time.Second, Why: "next try in 1s"},
		at(phBackoff).restarts(1).delaying().why("next try in 1s"), fxs(effect{Kind: fxDelay, Delay: time.Second})},
	{"back off and wait for the GPU", lcOf(phCrashed), event{Kind: evDecided, Action: ActionRestart, Delay: time.Second, Holding: true, Why: "next try in 1s"},
		at(phBackoff).restarts(1).delaying().holding().why("next try in 1s"), fxs(effect{Kind: fxDelay, Delay: time.Second}, showFx, waitFx)},
	{"wait for the GPU alone", lcOf(phCrashed), event{Kind: evDecided, Action: ActionRestart, Holding: true, Why: "restarting"},
		at(phBackoff).restarts(1).holding().why("restarting"), fxs(showFx, waitFx)},
	{"clean exit, policy stops", lcOf(phCrashed), event{Kind: evDecided, Action: ActionStop, Why: "exit 0; policy on-failure"}, at(phIdle).why("exit 0; policy on-failure"), fxs(dropFx)},
	{"budget spent", lcOf(phCrashed), event{Kind: evDecided, Action: ActionGiveUp, Why: "budget spent"}, at(phFailed).why("budget spent"), fxs(dropFx)},
	{"answer while quitting", lcOf(phCrashed).quitting(), event{Kind: evDecided, Action: ActionRestart}, at(phIdle).quitting().why(whyQuit), fxs(dropFx)},

	// GPU release
	{"released, stop", lcOf(phReleasing).why(whyStop), event{Kind: evReleased, OK: true, Why: "released"}, at(phIdle).why(whyStopped), nil},
	{"not released, stop", lcOf(phReleasing).why(whyStop), event{Kind: evReleased, Why: "GPU memory not released"}, at(phIdle).why(whyStopped + "; GPU memory not released"), nil},
	{"released, restart", lcOf(phReleasing).then(afterStart), event{Kind: evReleased, OK: true}, at(phStarting).restarts(1), fxs(spawnFx)},
	{"released, quit", lcOf(phReleasing).quitting(), event{Kind: evReleased, Why: "cancelled"}, at(phIdle).quitting().then(afterNothing).why(whyQuit + "; cancelled"), nil},
	{"crash release done", lcOf(phBackoff).holding(), event{Kind: evReleased, OK: true}, at(phStarting), fxs(spawnFx)},
	{"crash release done, delay runs", lcOf(phBackoff).holding().delaying().why("next try in 1s"), event{Kind: evReleased, OK: true}, at(phBackoff).delaying().why("next try in 1s"), nil},

	// backoff
	{"delay done", lcOf(phBackoff).delaying(), event{Kind: evDelayDone}, at(phStarting), fxs(spawnFx)},
	{"delay done, GPU still held", lcOf(phBackoff).delaying().holding(), event{Kind: evDelayDone}, at(phBackoff).holding().why(whyReleaseWait), nil},

	// a remote role: its ranks are its state; commands only say so
	{"remote: ranks dialled in", lcOf(phRemote), event{Kind: evRanks, Reg: 1}, lcOf(phRemote).routed(true).why("").atPhase(phRunning), nil},
	{"remote: start", lcOf(phRemote), event{Kind: evStart}, lcOf(phRemote), fxs(fxWhy(fxNote, "start: role runs on node2; tsd does not manage its process"))},
	{"remote: restart", lcOf(phRemote), event{Kind: evRestart}, lcOf(phRemote), fxs(fxWhy(fxNote, "restart: role runs on node2; tsd does not manage its process"))},
	{"remote: stop", lcOf(phRemote), event{Kind: evStop}, lcOf(phRemote), fxs(fxWhy(fxNote, "stop: role runs on node2; tsd does not manage its process"))},
	{"remote: quit", lcOf(phRemote), event{Kind: evQuit}, lcOf(phRemote).quitting(), nil},
	{"remote: kill", lcOf(phRemote), event{Kind: evKill}, lcOf(phRemote).quitting(), nil},
}

var silentWhy = "rank(s) [0] sent nothing for the stall timeout with requests in flight"

func (lc lifecycle) atPhase(p phase) lifecycle { lc.Phase = p; return lc }

// remoteReady is a remote role whose ranks have dialled in.
func remoteReady() lifecycle { return lcOf(phRemote).routed(true).why("").atPhase(phRunning) }

// remoteRows are the transitions of a ready remote role.
var remoteRows = []stepRow{
	{"remote: a rank drops", remoteReady(), event{Kind: evRanks}, remoteReady().atPhase(phRemote).why(whyDialIn), nil},
	{"remote ready: start", remoteReady(), event{Kind: evStart}, remoteReady(), fxs(fxWhy(fxNote, "start: role runs on node2; tsd does not manage its process"))},
	{"remote ready: restart", remoteReady(), event{Kind: evRestart}, remoteReady(), fxs(fxWhy(fxNote, "restart: role runs on node2; tsd does not manage its process"))},
	{"remote ready: stop", remoteReady(), event{Kind: evStop}, remoteReady(), fxs(fxWhy(fxNote, "stop: role runs on node2; tsd does not manage its process"))},
	{"remote ready: quit", remoteReady(), event{Kind: evQuit}, remoteReady().quitting(), nil},
	{"remote ready: kill", remoteReady(), event{Kind: evKill}, remoteReady().quitting(), nil},
}

// Rows that pin what an event leaves alone although its phase is listed.
var sameRows = []stepRow{
	{"ranks while shutting down are ignored", lcOf(phRunning).role(two), event{Kind: evRanks, Closing: true}, lcOf(phRunning).role(two), nil},
	{"ranks of a role with no process are ignored", at(phStarting).role(two), event{Kind: evRanks, Reg: 2}, at(phStarting).role(two), nil},
	{"the ready line while ranks are awaited", lcOf(phStarting).role(two), event{Kind: evReadyLine}, lcOf(phStarting).role(two), nil},
	{"a silent rank still silent", lcOf(phStalled).role(twoWait).stall(silentWhy), event{Kind: evRanks, Reg: 2, Silent: silent0}, lcOf(phStalled).role(twoWait).stall(silentWhy), nil},
	{"a role on its way down stays stalled", lcOf(phStopping).stallProc(stopped1), event{Kind: evProcStall}, lcOf(phStopping).stallProc(stopped1), nil},
	{"gateway silence is not judged while draining", lcOf(phDraining).role(two), event{Kind: evRanks, Reg: 2, Silent: silent0}, lcOf(phDraining).role(two), nil},
}

func allRows() []stepRow {
	return append(append(append([]stepRow(nil), stepRows...), remoteRows...), sameRows...)
}

// Pins: each lifecycle transition (every row of stepRows), as a pure
// function: same input, same output.
func TestStep(t *testing.T) {
	t.Parallel()
	for _, r := range allRows() {
		t.Run(r.name, func(t *testing.T) {
			out, fx := step(r.in, r.ev)
			if out != r.out || !reflect.DeepEqual(nilIfEmpty(fx), nilIfEmpty(r.fx)) {
				t.Fatalf("step(%+v, %s)\n got %+v %v\nwant %+v %v", r.in, r.ev.Kind, out, fx, r.out, r.fx)
			}
			out2, fx2 := step(r.in, r.ev)
			if out2 != out || !reflect.DeepEqual(fx2, fx) {
				t.Fatalf("step is not pure")
			}
		})
	}
}

func nilIfEmpty(e []effect) []effect {
	if len(e) == 0 {
		return nil
	}
	return e
}

// Pins: every (phase, event) pair not in stepRows changes nothing, for a
// role tsd runs and for a remote one, so the table is the whole
// lifecycle.
func TestStepUnlistedAreNoOps(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, r := range append(append([]stepRow(nil), stepRows...), remoteRows...) {
		listed[fmt.Sprint(r.in.Role.Remote, r.in.Phase, r.ev.Kind)] = true
	}
	check := func(in lifecycle) {
		for k := evStart; k <= evLast; k++ {
			if k == evRename || k == evUpdate {
				continue // in every phase, as TestStepRenameAndUpdate pins
			}
			if listed[fmt.Sprint(in.Role.Remote, in.Phase, k)] {
				continue
			}
			out, fx := step(in, event{Kind: k, Why: "why"})
			if out != in || len(fx) != 0 {
				t.Errorf("unlisted step(%s remote=%v, %s) = %+v %v; add a row or make it a no-op", in.Phase, in.Role.Remote, k, out, fx)
			}
		}
	}
	for p := phPlanned; p <= phRemote; p++ {
		check(lcOf(p))
	}
	check(remoteReady())
}

// Pins: a shutting-down role never starts again, whatever arrives.
func TestStepQuitNeverSpawns(t *testing.T) {
	t.Parallel()
	for p := phPlanned; p <= phRemote; p++ {
		for k := evStart; k <= evLast; k++ {
			for _, then := range []after{afterNothing, afterStart, afterQuit, afterFail} {
				for _, facts := range []func(lifecycle) lifecycle{
					func(lc lifecycle) lifecycle { return lc },
					func(lc lifecycle) lifecycle { return lc.delaying() },
					func(lc lifecycle) lifecycle { return lc.holding() },
				} {
					in := facts(lcOf(p))
					in.Then, in.Quit = then, true
					out, fx := step(in, event{Kind: k, Action: ActionRestart, OK: true, Reg: 1})
					for _, e := range fx {
						if e.Kind == fxSpawn {
							t.Errorf("step(%+v, %s) spawns while quitting", in, k)
						}
					}
					if !out.Quit {
						t.Errorf("step(%+v, %s) forgot Quit", in, k)
					}
				}
			}
		}
	}
}

// Pins: the shown state is a function of the phase and its facts, and
// every name reads well.
func TestShown(t *testing.T) {
	t.Parallel()
	rows := []struct {
		lc            lifecycle
		state, reason string
	}{
		{lcOf(phPlanned), snapshot.StatePlanned, ""},
		{at(phIdle).why(whyStopped), snapshot.StateStopped, whyStopped},
		{lcOf(phStarting), snapshot.StateStarting, ""},
		{lcOf(phStarting).seen().why("1/2 ranks registered"), snapshot.StateHandshaking, "1/2 ranks registered"},
		{lcOf(phRunning), snapshot.StateReady, ""},
		{lcOf(phDraining).why(whyRestart), snapshot.StateDraining, whyRestart},
		{lcOf(phStopping).why(whyRestart), snapshot.StateStopping, whyRestart},
		{lcOf(phReleasing).why(whyRestart), snapshot.StateStopping, whyRestart},
		{at(phCrashed).why("exit 1 after 2s"), snapshot.StateCrashed, "exit 1 after 2s"},
		{at(phBackoff).why(whyReleaseWait), snapshot.StateBackoff, whyReleaseWait},
		{at(phFailed).why("budget spent"), snapshot.StateFailed, "budget spent"},
		{lcOf(phStalled).why("x stopped"), snapshot.StateStalled, "x stopped"},
		{newLifecycle(remoteRole), snapshot.StateRemote, "runs on node2; waiting for its ranks to dial in; its lane is unauthenticated: keep that network trusted"},
		{remoteReady(), snapshot.StateReady, ""},
	}
	for _, r := range rows {
		if st, why := shown(r.lc); st != r.state || why != r.reason {
			t.Errorf("shown(%+v) = %s %q, want %s %q", r.lc, st, why, r.state, r.reason)
		}
	}
	for p := phPlanned; p <= phRemote; p++ {
		if strings.HasPrefix(p.String(), "phase(") {
			t.Errorf("phase %d has no name", int(p))
		}
	}
	for k := fxSpawn; k <= fxShow; k++ {
		_ = k.String()
	}
	for k := evStart; k <= evDelayDone; k++ {
		_ = k.String()
	}
}

// Pins every row of the gateway's view of a role.
func TestRoleView(t *testing.T) {
	t.Parallel()
	rows := []struct {
		name string
		lc   lifecycle
		want snapshot.RoleView
	}{
		{"planned", lcOf(phPlanned), snapshot.RoleView{}},
		{"spawned, not ready", lcOf(phStarting), snapshot.RoleView{Alive: true}},
		{"ready", lcOf(phRunning), snapshot.RoleView{Alive: true, Routed: true}},
		{"a rank dropped: still routed", lcOf(phStarting).routed(true).seen(), snapshot.RoleView{Alive: true, Routed: true}},
		{"draining", lcOf(phDraining).why(whyRestart), snapshot.RoleView{Alive: true, Reason: whyRestart}},
		{"stalled: out of routing", lcOf(phStalled).routed(true).stall("x stopped"), snapshot.RoleView{Alive: true, Stalled: true, Reason: "role decode stalled: x stopped"}},
		{"stopped", at(phIdle).why(whyStopped), snapshot.RoleView{Reason: whyStopped}},
		{"a remote role waiting for its ranks", newLifecycle(remoteRole), snapshot.RoleView{Reason: "runs on node2; waiting for its ranks to dial in; its lane is unauthenticated: keep that network trusted"}},
		{"a remote role ready", remoteReady(), snapshot.RoleView{Routed: true}},
	}
	for _, r := range rows {
		if got := roleView("decode", r.lc); got != r.want {
			t.Errorf("%s: roleView = %+v, want %+v", r.name, got, r.want)
		}
	}
}

// Pins every row of the stall verdict.
func TestJudgeStall(t *testing.T) {
	t.Parallel()
	stopped := "process 7 (ts-fake) stopped"
	one := map[int]bool{1: true}
	two := map[int]bool{3: true, 0: true}
	rows := []struct {
		name string
		in   stallFacts
		want stallVerdict
	}{
		{"all well", stallFacts{}, stallVerdict{}},
		{"tree stops", stallFacts{Proc: stopped}, stallVerdict{Change: stallBegins, Why: stopped, FromProc: true}},
		{"ranks go silent", stallFacts{Ranks: two}, stallVerdict{Change: stallBegins, Why: "rank(s) [0 3] sent nothing for the stall timeout with requests in flight"}},
		{"both: the tree is the reason", stallFacts{Proc: stopped, Ranks: one}, stallVerdict{Change: stallBegins, Why: stopped, FromProc: true}},
		{"still stopped", stallFacts{Proc: stopped, Stalling: true, FromProc: true}, stallVerdict{}},
		{"tree runs again", stallFacts{Stalling: true, FromProc: true}, stallVerdict{Change: stallEnds}},
		{"tree runs again; silence from then forgotten", stallFacts{Ranks: one, Stalling: true, FromProc: true}, stallVerdict{Change: stallEnds, ForgetRanks: true}},
		{"silent ranks still silent", stallFacts{Ranks: one, Stalling: true}, stallVerdict{}},
		{"silent ranks speak again", stallFacts{Stalling: true}, stallVerdict{Change: stallEnds}},
		{"silent ranks, then the tree stops too", stallFacts{Proc: stopped, Ranks: one, Stalling: true}, stallVerdict{}},
	}
	for _, r := range rows {
		if got := judgeStall(r.in); got != r.want {
			t.Errorf("%s: judgeStall(%+v) = %+v, want %+v", r.name, r.in, got, r.want)
		}
	}
}

package supervisor

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

type stepRow struct {
	name string
	in   lifecycle
	ev   event
	out  lifecycle
	fx   []effect
}

func lcOf(p phase) lifecycle { return lifecycle{Phase: p} }

func lcThen(p phase, t after) lifecycle { return lifecycle{Phase: p, Then: t} }

func lcQuit(p phase) lifecycle { return lifecycle{Phase: p, Then: afterQuit, Quit: true} }

func fxs(e ...effect) []effect { return e }

// stepRows is every transition of the lifecycle that changes something;
// TestStepUnlistedAreNoOps checks that every other (phase, event) pair
// leaves the lifecycle alone.
var stepRows = []stepRow{
	// start
	{"start idle", lcOf(phIdle), event{Kind: evStart}, lcOf(phStarting), fxs(fxResetBudget, fxSpawn)},
	{"start failed", lcOf(phFailed), event{Kind: evStart}, lcOf(phStarting), fxs(fxResetBudget, fxSpawn)},
	{"start in backoff", lcOf(phBackoff), event{Kind: evStart}, lcOf(phStarting), fxs(fxResetBudget, fxCancelBackoff, fxSpawn)},
	{"start in backoff keeps the GPU release wait", lcOf(phBackoff), event{Kind: evStart, Waiting: true}, lcOf(phBackoff), fxs(fxResetBudget, fxCancelDelay, fxShowReleaseWait)},
	{"start while draining queues a start", lcOf(phDraining), event{Kind: evStart}, lcThen(phDraining, afterStart), nil},
	{"start while stopping queues a start", lcOf(phStopping), event{Kind: evStart}, lcThen(phStopping, afterStart), nil},
	{"start while releasing queues a start", lcOf(phReleasing), event{Kind: evStart}, lcThen(phReleasing, afterStart), nil},

	// restart
	{"restart idle", lcOf(phIdle), event{Kind: evRestart}, lcOf(phStarting), fxs(fxResetBudget, fxCountRestart, fxSpawn)},
	{"restart failed", lcOf(phFailed), event{Kind: evRestart}, lcOf(phStarting), fxs(fxResetBudget, fxCountRestart, fxSpawn)},
	{"restart in backoff", lcOf(phBackoff), event{Kind: evRestart}, lcOf(phStarting), fxs(fxResetBudget, fxCountRestart, fxCancelBackoff, fxSpawn)},
	{"restart in backoff keeps the GPU release wait", lcOf(phBackoff), event{Kind: evRestart, Waiting: true}, lcOf(phBackoff), fxs(fxResetBudget, fxCancelDelay, fxShowReleaseWait)},
	{"restart running drains", lcOf(phRunning), event{Kind: evRestart}, lcThen(phDraining, afterStart), fxs(fxResetBudget, fxHoldGPUs, fxUnroute, fxDrain)},
	{"restart starting drains", lcOf(phStarting), event{Kind: evRestart}, lcThen(phDraining, afterStart), fxs(fxResetBudget, fxHoldGPUs, fxUnroute, fxDrain)},
	{"restart --now running", lcOf(phRunning), event{Kind: evRestart, Now: true}, lcThen(phStopping, afterStart), fxs(fxResetBudget, fxHoldGPUs, fxUnroute, fxAbort, fxTerm)},
	{"restart --now starting", lcOf(phStarting), event{Kind: evRestart, Now: true}, lcThen(phStopping, afterStart), fxs(fxResetBudget, fxHoldGPUs, fxUnroute, fxAbort, fxTerm)},
	{"restart stalled: nothing to drain", lcOf(phStalled), event{Kind: evRestart}, lcThen(phStopping, afterStart), fxs(fxResetBudget, fxHoldGPUs, fxTerm)},
	{"restart while draining", lcOf(phDraining), event{Kind: evRestart}, lcThen(phDraining, afterStart), fxs(fxResetBudget)},
	{"restart --now while draining ends the drain", lcOf(phDraining), event{Kind: evRestart, Now: true}, lcThen(phStopping, afterStart), fxs(fxResetBudget, fxEndDrain, fxAbort, fxTerm)},
	{"restart while stopping", lcOf(phStopping), event{Kind: evRestart}, lcThen(phStopping, afterStart), fxs(fxResetBudget)},
	{"restart while releasing", lcOf(phReleasing), event{Kind: evRestart}, lcThen(phReleasing, afterStart), fxs(fxResetBudget)},

	// stop
	{"stop idle", lcOf(phIdle), event{Kind: evStop}, lcOf(phIdle), fxs(fxShowStopped)},
	{"stop in backoff", lcOf(phBackoff), event{Kind: evStop}, lcOf(phIdle), fxs(fxCancelBackoff, fxShowStopped)},
	{"stop running drains", lcOf(phRunning), event{Kind: evStop}, lcOf(phDraining), fxs(fxHoldGPUs, fxUnroute, fxDrain)},
	{"stop starting drains", lcOf(phStarting), event{Kind: evStop}, lcOf(phDraining), fxs(fxHoldGPUs, fxUnroute, fxDrain)},
	{"stop --now running", lcOf(phRunning), event{Kind: evStop, Now: true}, lcOf(phStopping), fxs(fxHoldGPUs, fxUnroute, fxAbort, fxTerm)},
	{"stop --now starting", lcOf(phStarting), event{Kind: evStop, Now: true}, lcOf(phStopping), fxs(fxHoldGPUs, fxUnroute, fxAbort, fxTerm)},
	{"stop stalled", lcOf(phStalled), event{Kind: evStop}, lcOf(phStopping), fxs(fxHoldGPUs, fxTerm)},
	{"stop while draining a restart cancels the start", lcThen(phDraining, afterStart), event{Kind: evStop}, lcOf(phDraining), nil},
	{"stop --now while draining", lcOf(phDraining), event{Kind: evStop, Now: true}, lcOf(phStopping), fxs(fxEndDrain, fxAbort, fxTerm)},
	{"stop while stopping a restart cancels the start", lcThen(phStopping, afterStart), event{Kind: evStop}, lcOf(phStopping), nil},
	{"stop while releasing a restart cancels the start", lcThen(phReleasing, afterStart), event{Kind: evStop}, lcOf(phReleasing), nil},

	// quit: the gateway has shut down, nothing to drain
	{"quit idle", lcOf(phIdle), event{Kind: evQuit}, lcQuit(phIdle), fxs(fxShowStopped)},
	{"quit backoff", lcOf(phBackoff), event{Kind: evQuit}, lcQuit(phIdle), fxs(fxCancelBackoff, fxShowStopped)},
	{"quit starting", lcOf(phStarting), event{Kind: evQuit}, lcQuit(phStopping), fxs(fxHoldGPUs, fxUnroute, fxTerm)},
	{"quit running", lcOf(phRunning), event{Kind: evQuit}, lcQuit(phStopping), fxs(fxHoldGPUs, fxUnroute, fxTerm)},
	{"quit stalled", lcOf(phStalled), event{Kind: evQuit}, lcQuit(phStopping), fxs(fxHoldGPUs, fxUnroute, fxTerm)},
	{"quit draining", lcOf(phDraining), event{Kind: evQuit}, lcQuit(phStopping), fxs(fxEndDrain, fxAbort, fxTerm)},
	{"quit stopping", lcThen(phStopping, afterStart), event{Kind: evQuit}, lcQuit(phStopping), nil},
	{"quit releasing", lcOf(phReleasing), event{Kind: evQuit}, lcQuit(phReleasing), nil},
	{"quit failed", lcOf(phFailed), event{Kind: evQuit}, lcQuit(phFailed), nil},

	// kill: now, unverified GPU memory
	{"kill idle", lcOf(phIdle), event{Kind: evKill}, lcQuit(phIdle), fxs(fxShowStopped)},
	{"kill backoff", lcOf(phBackoff), event{Kind: evKill}, lcQuit(phIdle), fxs(fxCancelBackoff, fxShowStopped)},
	{"kill starting", lcOf(phStarting), event{Kind: evKill}, lcQuit(phStopping), fxs(fxDropGPUWait, fxKill)},
	{"kill running", lcOf(phRunning), event{Kind: evKill}, lcQuit(phStopping), fxs(fxDropGPUWait, fxKill)},
	{"kill stalled", lcOf(phStalled), event{Kind: evKill}, lcQuit(phStopping), fxs(fxDropGPUWait, fxKill)},
	{"kill stopping", lcOf(phStopping), event{Kind: evKill}, lcQuit(phStopping), fxs(fxDropGPUWait, fxKill)},
	{"kill draining", lcOf(phDraining), event{Kind: evKill}, lcQuit(phStopping), fxs(fxEndDrain, fxDropGPUWait, fxKill)},
	{"kill releasing", lcOf(phReleasing), event{Kind: evKill}, lcQuit(phReleasing), fxs(fxDropGPUWait, fxCancelRelease)},
	{"kill failed", lcOf(phFailed), event{Kind: evKill}, lcQuit(phFailed), nil},

	// ranks
	{"ready", lcOf(phStarting), event{Kind: evReady}, lcOf(phRunning), fxs(fxRoute)},
	{"unready", lcOf(phRunning), event{Kind: evUnready}, lcOf(phStarting), nil},

	// drain
	{"drained", lcThen(phDraining, afterStart), event{Kind: evDrained}, lcThen(phStopping, afterStart), fxs(fxEndDrain, fxAbort, fxTerm)},

	// exit on request
	{"stopped group empty, no GPU check", lcOf(phStopping), event{Kind: evExited}, lcOf(phIdle), fxs(fxEndDrain, fxShowStopped)},
	{"stopped for restart", lcThen(phStopping, afterStart), event{Kind: evExited}, lcOf(phStarting), fxs(fxEndDrain, fxCountRestart, fxSpawn)},
	{"stopped for quit", lcQuit(phStopping), event{Kind: evExited}, lcOf(phIdle).withQuit(), fxs(fxEndDrain, fxShowStopped)},
	{"stopped, GPU check", lcThen(phStopping, afterStart), event{Kind: evExited, GPUWait: true}, lcThen(phReleasing, afterStart), fxs(fxEndDrain, fxWaitRelease)},
	{"ended while draining", lcThen(phDraining, afterStart), event{Kind: evExited}, lcOf(phStarting), fxs(fxEndDrain, fxCountRestart, fxSpawn)},
	{"released, restart", lcThen(phReleasing, afterStart), event{Kind: evReleased}, lcOf(phStarting), fxs(fxCountRestart, fxSpawn)},
	{"released, stop", lcOf(phReleasing), event{Kind: evReleased}, lcOf(phIdle), fxs(fxShowStopped)},
	{"released, quit", lcQuit(phReleasing), event{Kind: evReleased}, lcOf(phIdle).withQuit(), fxs(fxShowStopped)},
	{"group not emptied", lcThen(phStopping, afterStart), event{Kind: evExited, GroupLeft: true}, lcOf(phFailed), fxs(fxEndDrain, fxShowFailed)},
	{"group not emptied after a crash", lcOf(phRunning), event{Kind: evExited, GroupLeft: true}, lcOf(phFailed), fxs(fxEndDrain, fxShowFailed)},

	// exit on its own: the restart policy answered
	{"crash, restart at once", lcOf(phRunning), event{Kind: evExited, Action: ActionRestart, Immediate: true}, lcOf(phStarting), fxs(fxShowCrashed, fxCountRestart, fxSpawn)},
	{"crash, back off", lcOf(phRunning), event{Kind: evExited, Action: ActionRestart}, lcOf(phBackoff), fxs(fxShowCrashed, fxCountRestart, fxBackoff)},
	{"crash while starting, back off", lcOf(phStarting), event{Kind: evExited, Action: ActionRestart}, lcOf(phBackoff), fxs(fxShowCrashed, fxCountRestart, fxBackoff)},
	{"stalled role dies, back off", lcOf(phStalled), event{Kind: evExited, Action: ActionRestart}, lcOf(phBackoff), fxs(fxShowCrashed, fxCountRestart, fxBackoff)},
	{"clean exit, policy stops", lcOf(phRunning), event{Kind: evExited, Action: ActionStop}, lcOf(phIdle), fxs(fxShowCrashed, fxShowStopped)},
	{"crash, budget spent", lcOf(phRunning), event{Kind: evExited, Action: ActionGiveUp}, lcOf(phFailed), fxs(fxShowCrashed, fxShowFailed)},
	{"ended on its own while quitting", lcQuit(phRunning), event{Kind: evExited, Action: ActionRestart}, lcQuit(phIdle), fxs(fxShowStopped)},

	// backoff
	{"delay done", lcOf(phBackoff), event{Kind: evDelayDone}, lcOf(phStarting), fxs(fxSpawn)},
	{"delay done, GPU still held", lcOf(phBackoff), event{Kind: evDelayDone, Waiting: true}, lcOf(phBackoff), fxs(fxShowReleaseWait)},
	{"crash release done", lcOf(phBackoff), event{Kind: evCrashReleased}, lcOf(phStarting), fxs(fxSpawn)},

	// stall
	{"stall, wait", lcOf(phRunning), event{Kind: evStall, Wait: true}, lcOf(phStalled), fxs(fxStallOn)},
	{"stall while starting, wait", lcOf(phStarting), event{Kind: evStall, Wait: true}, lcOf(phStalled), fxs(fxStallOn)},
	{"stall, restart", lcOf(phRunning), event{Kind: evStall}, lcThen(phStopping, afterStart), fxs(fxStallOn, fxHoldGPUs, fxTerm)},
	{"stall while starting, restart", lcOf(phStarting), event{Kind: evStall}, lcThen(phStopping, afterStart), fxs(fxStallOn, fxHoldGPUs, fxTerm)},
	{"stall while draining ends the drain", lcOf(phDraining), event{Kind: evStall}, lcOf(phStopping), fxs(fxEndDrain, fxStallOn, fxTerm)},
	{"stall while draining keeps the restart", lcThen(phDraining, afterStart), event{Kind: evStall, Wait: true}, lcThen(phStopping, afterStart), fxs(fxEndDrain, fxStallOn, fxTerm)},
	{"recover, ranks registered", lcOf(phStalled), event{Kind: evRecover, Ready: true}, lcOf(phRunning), fxs(fxStallOff, fxRoute)},
	{"recover, ranks not all registered", lcOf(phStalled), event{Kind: evRecover}, lcOf(phStarting), fxs(fxStallOff)},
}

func (lc lifecycle) withQuit() lifecycle { lc.Quit = true; return lc }

// Pins: each lifecycle transition (every row of stepRows), as a pure
// function: same input, same output.
func TestStep(t *testing.T) {
	t.Parallel()
	for _, r := range stepRows {
		t.Run(r.name, func(t *testing.T) {
			out, fx := step(r.in, r.ev)
			if out != r.out || !reflect.DeepEqual(nilIfEmpty(fx), nilIfEmpty(r.fx)) {
				t.Fatalf("step(%+v, %s) = %+v %v\nwant %+v %v", r.in, r.ev.Kind, out, fx, r.out, r.fx)
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

// Pins: every (phase, event) pair not in stepRows changes nothing (a
// recover outside stalled only clears a verdict a stopping role may
// still carry), so the table is the whole lifecycle.
func TestStepUnlistedAreNoOps(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, r := range stepRows {
		listed[fmt.Sprint(r.in.Phase, r.ev.Kind)] = true
	}
	for p := phIdle; p <= phStalled; p++ {
		for k := evStart; k <= evRecover; k++ {
			if listed[fmt.Sprint(p, k)] {
				continue
			}
			in := lcOf(p)
			out, fx := step(in, event{Kind: k})
			want := []effect(nil)
			if k == evRecover {
				want = []effect{fxStallOff}
			}
			if out != in || !reflect.DeepEqual(nilIfEmpty(fx), want) {
				t.Errorf("unlisted step(%s, %s) = %+v %v; add a row or make it a no-op", p, k, out, fx)
			}
		}
	}
}

// Pins: a shutting-down role never starts again, whatever arrives.
func TestStepQuitNeverSpawns(t *testing.T) {
	t.Parallel()
	for p := phIdle; p <= phStalled; p++ {
		for k := evStart; k <= evRecover; k++ {
			for _, then := range []after{afterNothing, afterStart, afterQuit} {
				in := lifecycle{Phase: p, Then: then, Quit: true}
				out, fx := step(in, event{Kind: k, Action: ActionRestart, Immediate: true})
				for _, e := range fx {
					if e == fxSpawn {
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

// Pins: every phase shows as a snapshot state, and names read well.
func TestPhaseNames(t *testing.T) {
	t.Parallel()
	for p := phIdle; p <= phStalled; p++ {
		if p.State() == "" || strings.HasPrefix(p.String(), "phase(") {
			t.Errorf("phase %d: state %q name %q", int(p), p.State(), p)
		}
	}
	for e := fxSpawn; e <= fxShowReleaseWait; e++ {
		_ = e.String()
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

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// answerRow is one case of answerFor: the waiter's goal and what the
// actor knows when it shows a state, and the answer (ok false: none yet).
type answerRow struct {
	name string
	goal goal
	f    answerFacts
	want outKind
	ok   bool
}

var answerRows = []answerRow{
	{"a rename or update is answered at once", goalTaken, answerFacts{State: snapshot.StateReady}, outTaken, true},

	{"a stop: stopped", goalGone, answerFacts{State: snapshot.StateStopped}, outStopped, true},
	{"a stop: failed with nothing left running", goalGone, answerFacts{State: snapshot.StateFailed}, outFailed, true},
	{"a stop: a remote role has no process here", goalGone, answerFacts{State: snapshot.StateReady, Remote: true}, outGone, true},

	{"a start: ready after the start", goalReady, answerFacts{State: snapshot.StateReady, Started: true}, outReady, true},
	{"a start: rests stopped", goalReady, answerFacts{State: snapshot.StateStopped}, outStopped, true},
	{"a start: rests stopped after the start", goalReady, answerFacts{State: snapshot.StateStopped, Started: true}, outStopped, true},
	{"a start: failed", goalReady, answerFacts{State: snapshot.StateFailed, Started: true}, outFailed, true},
	{"a start: failed before any start (the crash before it ran out of budget)", goalReady, answerFacts{State: snapshot.StateFailed}, outFailed, true},

	{"a rolling restart: ready after the start", goalBack, answerFacts{State: snapshot.StateReady, Started: true, Running: true}, outReady, true},
	{"a rolling restart: crashed after the start", goalBack, answerFacts{State: snapshot.StateCrashed, Started: true}, outCrashed, true},
	{"a rolling restart: backs off after the start", goalBack, answerFacts{State: snapshot.StateBackoff, Started: true}, outCrashed, true},
	{"a rolling restart: failed", goalBack, answerFacts{State: snapshot.StateFailed, Started: true}, outFailed, true},
	{"a rolling restart: stopped", goalBack, answerFacts{State: snapshot.StateStopped}, outStopped, true},
}

// TestAnswerFor pins which state ends which wait, row by row.
func TestAnswerFor(t *testing.T) {
	t.Parallel()
	for _, r := range answerRows {
		got, ok := answerFor(r.goal, r.f)
		if ok != r.ok || (ok && got != r.want) {
			t.Errorf("%s: answerFor(%d, %+v) = %d %v, want %d %v", r.name, r.goal, r.f, got, ok, r.want, r.ok)
		}
	}
}

// TestAnswerForUnlistedWait proves every other (goal, state, started,
// running, remote) combination keeps the waiter waiting: a ready state
// before the command's start (the old run's), a crash the policy answers
// for an apply, a stop still stopping, a failed role whose group is
// still there.
func TestAnswerForUnlistedWait(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	key := func(g goal, f answerFacts) string { return fmt.Sprint(g, f) }
	for _, r := range answerRows {
		listed[key(r.goal, r.f)] = true
	}
	states := []string{snapshot.StatePlanned, snapshot.StateStarting, snapshot.StateHandshaking, snapshot.StateReady,
		snapshot.StateStalled, snapshot.StateDraining, snapshot.StateStopping, snapshot.StateStopped,
		snapshot.StateCrashed, snapshot.StateBackoff, snapshot.StateFailed, snapshot.StateRemote}
	for _, g := range []goal{goalGone, goalReady, goalBack} {
		for _, st := range states {
			for _, started := range []bool{false, true} {
				for _, running := range []bool{false, true} {
					for _, remote := range []bool{false, true} {
						f := answerFacts{State: st, Started: started, Running: running, Remote: remote}
						if listed[key(g, f)] {
							continue
						}
						got, ok := answerFor(g, f)
						switch {
						case g == goalGone && remote:
							// gone whatever the state: tsd runs nothing of it
						case g == goalGone && (st == snapshot.StateStopped || st == snapshot.StateFailed && !running):
						case g != goalGone && (st == snapshot.StateStopped || st == snapshot.StateFailed):
						case g != goalGone && started && st == snapshot.StateReady:
						case g == goalBack && started && (st == snapshot.StateCrashed || st == snapshot.StateBackoff):
						default:
							if ok {
								t.Errorf("answerFor(%d, %+v) = %d: this state must keep the waiter waiting", g, f, got)
							}
							continue
						}
						if !ok {
							t.Errorf("answerFor(%d, %+v) waits, but a listed row's rule answers it", g, f)
						}
					}
				}
			}
		}
	}
}

// TestAnswersCountFromTheCommand: a waiter counts only the starts after
// its command, each waiter is answered once, and the actor's end answers
// what is left.
func TestAnswersCountFromTheCommand(t *testing.T) {
	t.Parallel()
	var as answers
	as.spawns = 3 // the runs before the command
	ready := newWaiter(goalReady)
	as.add(ready)
	if got := as.settle(answerFacts{State: snapshot.StateReady}, outcome{}); len(got) != 0 {
		t.Fatalf("the old run's ready answered %+v", got)
	}
	as.spawns++
	gone := newWaiter(goalGone)
	as.add(gone)
	got := as.settle(answerFacts{State: snapshot.StateReady}, outcome{PID: 7})
	if len(got) != 1 || got[0].w != ready || got[0].o.Kind != outReady || got[0].o.PID != 7 {
		t.Fatalf("after the start: %+v", got)
	}
	got[0].deliver()
	if o, err := await(context.Background(), ready); err != nil || o.Kind != outReady {
		t.Fatalf("await: %+v %v", o, err)
	}
	as.end(outcome{Name: "decode"})
	if _, err := await(context.Background(), gone); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("a waiter the actor's end answers: %v", err)
	}
	if len(as.waits) != 0 {
		t.Fatalf("waiters left: %d", len(as.waits))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := await(ctx, newWaiter(goalReady)); !errors.Is(err, context.Canceled) {
		t.Fatalf("await with an ended ctx: %v", err)
	}
}

package supervisor

import (
	"context"
	"fmt"
	"strings"

	"github.com/tsd-project/tsd/snapshot"
)

// A command that carries its outcome back (docs/architecture.md §4.3):
// an apply's steps, a rolling restart and tsd scale send their command
// with a waiter, and the instance's actor answers it once, on the
// waiter's channel, when the command's end is known: ready, stopped,
// failed with the reason, renamed... The caller never reads a snapshot
// back to learn what happened. Which states end which wait is one pure
// function (answerFor), table-tested row by row.

// goal is what a command's sender waits for.
type goal int

const (
	// goalTaken: the command was handled (a rename, an update).
	goalTaken goal = iota
	// goalGone: no process of the instance is left (a stop): it rests
	// stopped or failed.
	goalGone
	// goalReady: the instance is ready after a start the command caused
	// (a start, an apply's restart); resting stopped or failed ends the
	// wait too, while a crash the restart policy answers is waited out.
	goalReady
	// goalBack: goalReady, and a crash or a backoff after that start
	// also ends it (a rolling restart goes no further).
	goalBack
)

// outKind is how a command ended.
type outKind int

const (
	outReady   outKind = iota // ready after a start the command caused
	outStopped                // rests stopped: no process
	outFailed                 // failed (Reason says why): no process
	outCrashed                // crashed or backs off after the start (goalBack)
	outTaken                  // handled: renamed, or the new plan taken
	outGone                   // its process is gone (goalGone of an instance tsd does not run)
	outEnded                  // the actor ended first (tsd stops, or the instance was removed)
)

// outcome is an actor's answer to one command.
type outcome struct {
	Kind   outKind
	Name   string // the instance's name when it answered
	State  string // the state shown when it answered
	Reason string
	PID    int // its engine's pid, 0 when none runs
}

// waiter is one command's pending answer, kept by the actor until
// answerFor says the command's end is known.
type waiter struct {
	goal goal
	// spawns is the actor's count of starts when the command came: a
	// ready state counts only after a newer start.
	spawns int
	out    chan outcome // buffered 1: the actor never waits on a sender
}

func newWaiter(g goal) *waiter { return &waiter{goal: g, out: make(chan outcome, 1)} }

// answerFacts are what the actor knows when it shows a state.
type answerFacts struct {
	State   string // shown(lc)
	Started bool   // a start came after the command
	Running bool   // a process of the instance runs
	Remote  bool   // tsd does not run it
}

// answerFor says whether a waiter for g is answered now, and how.
func answerFor(g goal, f answerFacts) (outKind, bool) {
	switch g {
	case goalTaken:
		return outTaken, true
	case goalGone:
		switch {
		case f.Remote:
			return outGone, true // nothing of it runs here to stop
		case f.State == snapshot.StateStopped:
			return outStopped, true
		case f.State == snapshot.StateFailed && !f.Running:
			return outFailed, true
		}
	case goalReady, goalBack:
		switch {
		case f.Started && f.State == snapshot.StateReady:
			return outReady, true
		case f.State == snapshot.StateStopped:
			return outStopped, true
		case f.State == snapshot.StateFailed:
			return outFailed, true
		case g == goalBack && f.Started && (f.State == snapshot.StateCrashed || f.State == snapshot.StateBackoff):
			return outCrashed, true
		}
	}
	return 0, false
}

// ask sends the instance named name (its name now) a command that
// carries its outcome back: the instance, and the waiter its actor
// answers.
func ask(r *roster, name string, ev event, g goal) (member, *waiter, error) {
	m, ok := r.find(name)
	if !ok {
		return m, nil, fmt.Errorf("%w %q (have %s)", ErrUnknownRole, name, strings.Join(r.list(), ", "))
	}
	w := newWaiter(g)
	ev.Reply = w
	if !m.a.send(ev) {
		return m, nil, ErrNotRunning
	}
	return m, w, nil
}

// await waits for a command's answer: the outcome, ErrNotRunning when
// its actor ended first, or ctx's error.
func await(ctx context.Context, w *waiter) (outcome, error) {
	select {
	case o := <-w.out:
		if o.Kind == outEnded {
			return o, ErrNotRunning
		}
		return o, nil
	case <-ctx.Done():
		return outcome{}, ctx.Err()
	}
}

// answers are the actor's waiters and its count of starts.
type answers struct {
	waits  []*waiter
	spawns int
}

// add takes a command's waiter; it is answered from the state the
// command leads to.
func (as *answers) add(w *waiter) {
	w.spawns = as.spawns
	as.waits = append(as.waits, w)
}

// answered is an outcome on its way to its waiter: the publisher hands
// it over once the snapshot with the state it answers from is out.
type answered struct {
	w *waiter
	o outcome
}

// deliver hands the outcome to its waiter (never blocks: the channel
// holds one answer and gets one).
func (a answered) deliver() { a.w.out <- a.o }

// settle takes every waiter whose end f shows, with its outcome.
func (as *answers) settle(f answerFacts, o outcome) []answered {
	var out []answered
	keep := as.waits[:0]
	for _, w := range as.waits {
		f.Started = as.spawns > w.spawns
		if k, ok := answerFor(w.goal, f); ok {
			o.Kind = k
			out = append(out, answered{w: w, o: o})
			continue
		}
		keep = append(keep, w)
	}
	clear(as.waits[len(keep):])
	as.waits = keep
	return out
}

// end answers every waiter left: the actor is over.
func (as *answers) end(o outcome) {
	o.Kind = outEnded
	for _, w := range as.waits {
		w.out <- o
	}
	as.waits = nil
}

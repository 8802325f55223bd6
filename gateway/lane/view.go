package lane

import (
	"fmt"

	"github.com/tsd-project/tsd/snapshot"
)

// The supervisor's view of a role (docs/architecture.md §4.2) is one
// value on its worker: SetView stores it, and everything that asks
// whether the role is routed, held stalled by the supervisor, alive or
// ended reads it (Routed, Alive, Ended, the ranks' shown state). It is
// written by the rank book's goroutine (ranks.go), so a rank's state
// moves with it, and read without a lock on the routing path.
//
// The lane's own facts stay beside it, not in it: a rank's stall judged
// from its missing output (rank.stalled, lifted by the rank's next
// message), a rank's handshake state, a worker declared dead by its
// silence or its ENGINE_CORE_DEAD. The view says what the supervisor
// knows; the lane says what the sockets saw.

// ViewChange is what a new view changed for the worker.
type ViewChange struct {
	// StallBegins: the supervisor's stall verdict is new; the worker's
	// requests were ended with its reason (Aborted of them) and its ranks
	// show stalled.
	StallBegins bool
	// StallEnds: the verdict was lifted, and the lane's own stall
	// verdicts on its ranks with it: registered ranks are routed again.
	StallEnds bool
	// Ended: the role's process is known ended now and was not before
	// (Ended); what it held for requests still running elsewhere (an
	// encode's embeddings, a rendezvous' registrations) is gone.
	Ended bool
	// Routing: whether the worker takes new requests, or which of its
	// ranks do, may have changed; waiters for a routable worker look again.
	Routing bool
	Aborted int // requests a stall that began ended
}

// defaultStallReason is the reason a stalled view that gives none carries.
const defaultStallReason = "judged stalled by the supervisor"

// liveness is whether a role counts alive (a rendezvous the gateway hosts
// for it answers /health) and whether its process is known ended, from
// the supervisor's view v (nil: none yet). tsd cannot watch a remote
// engine's process, so a remote role is alive from the start and never
// ended; a local one is alive only while the view says so, and ended only
// once a view says it is not: a gateway that never hears a view (tsd
// gateway alone) ends nothing.
func liveness(v *snapshot.RoleView, remote bool) (alive, ended bool) {
	switch {
	case remote:
		return true, false
	case v == nil:
		return false, false
	}
	return v.Alive, !v.Alive
}

// routable is whether a worker with view v takes new requests: until the
// supervisor's first view a worker is routed (the lane alone, tests, tsd
// gateway), after it whatever the view says.
func routable(v *snapshot.RoleView) bool { return v == nil || v.Routable() }

// heldStalled is whether the supervisor holds the role stalled.
func heldStalled(v *snapshot.RoleView) bool { return v != nil && v.Stalled }

// stepView is what going from view prev (nil: none yet) to next changes.
func stepView(prev *snapshot.RoleView, next snapshot.RoleView, remote bool) ViewChange {
	_, wasEnded := liveness(prev, remote)
	_, ended := liveness(&next, remote)
	was := heldStalled(prev)
	c := ViewChange{
		StallBegins: next.Stalled && !was,
		StallEnds:   !next.Stalled && was,
		Ended:       ended && !wasEnded,
	}
	c.Routing = c.StallBegins || c.StallEnds || routable(prev) != next.Routable()
	return c
}

// SetView takes the supervisor's whole view of the role. A stall verdict
// that begins shows the ranks stalled and ends the worker's requests with
// the view's reason; one that is lifted lifts the lane's own stall
// verdicts too, so registered ranks are routed again. Routed false keeps
// new requests away and leaves the ones in flight alone (the drain;
// Abort ends them). The same view again changes nothing.
func (w *Worker) SetView(v snapshot.RoleView) ViewChange {
	if v.Stalled && v.Reason == "" {
		v.Reason = defaultStallReason
	}
	var c ViewChange
	var aborts []pendingAbort
	if !w.ranks.do(func() { c, aborts = w.ranks.setView(v) }) {
		// The worker has closed: nothing of its ranks is left to show.
		c = stepView(w.view.Load(), v, w.plan.Remote)
		w.view.Store(&v)
	}
	w.send.pending(aborts) // lifted: the rank is presumed able to act on them
	if c.Routing {
		w.lane.changed.notify()
	}
	if c.StallBegins {
		c.Aborted = w.Abort(fmt.Errorf("%w: %s", ErrRankStalled, v.Reason))
	}
	return c
}

// View is the supervisor's last view of the role; before its first, the
// lane's default: routed, alive when remote.
func (w *Worker) View() snapshot.RoleView {
	if v := w.view.Load(); v != nil {
		return *v
	}
	return snapshot.RoleView{Alive: w.plan.Remote, Routed: true}
}

// Routed reports whether the worker takes new requests (its view is
// routable).
func (w *Worker) Routed() bool { return routable(w.view.Load()) }

// Alive reports whether the role counts alive: a rendezvous the gateway
// hosts for it answers /health only then.
func (w *Worker) Alive() bool {
	alive, _ := liveness(w.view.Load(), w.plan.Remote)
	return alive
}

// Ended reports whether the role's process is known ended: an encode's
// embeddings are gone with it until a view says it is alive again.
func (w *Worker) Ended() bool {
	_, ended := liveness(w.view.Load(), w.plan.Remote)
	return ended
}

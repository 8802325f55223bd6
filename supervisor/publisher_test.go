package supervisor

import (
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// TestPublisherSnapshotThenStream: a subscriber gets the current snapshot
// at once, a slow one only ever holds the newest, and every channel closes
// when the publisher stops.
func TestPublisherSnapshotThenStream(t *testing.T) {
	s := &Supervisor{now: time.Now, plan: &runningPlan{}, stop: newStopper(0)}
	s.plan.v.Store(&profiles.Plan{Name: "p"})
	a := &actor{id: 1}
	s.roster = newRosterOwner(nil, nil)
	s.roster.set(newRoster([]member{{id: 1, name: "decode", a: a, initial: snapshot.RoleStatus{Name: "decode", State: snapshot.StatePlanned}}}, nil))
	p := newPublisher(s)
	s.pub = p
	cur, ch, cancel := p.subscribe()
	defer cancel()
	if cur.Seq != 1 || cur.Roles[0].State != snapshot.StatePlanned {
		t.Fatalf("current %+v", cur)
	}
	for i := 0; i < 100; i++ {
		p.roles[1] = snapshot.RoleStatus{Name: "decode", State: snapshot.StatePlanned, Restarts: i}
		p.publish(p.build())
	}
	got := <-ch
	if got.Roles[0].Restarts != 99 {
		t.Fatalf("slow subscriber got Restarts=%d, want the newest (99)", got.Roles[0].Restarts)
	}
	select {
	case extra := <-ch:
		t.Fatalf("stale snapshot queued: %+v", extra.Seq)
	default:
	}
	late, _, cancel2 := p.subscribe()
	defer cancel2()
	if late.Seq != got.Seq {
		t.Fatalf("late subscriber current seq %d, want %d", late.Seq, got.Seq)
	}
	// A published snapshot is never changed by later ones.
	p.roles[1] = snapshot.RoleStatus{Name: "decode", State: snapshot.StateReady}
	p.publish(p.build())
	if got.Roles[0].State != snapshot.StatePlanned {
		t.Fatal("published snapshot mutated")
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { p.loop(stop); close(done) }()
	close(stop)
	<-done
	for range ch { // drains the last snapshot, then ends
	}
	if _, ch3, _ := p.subscribe(); ch3 != nil {
		if _, ok := <-ch3; ok {
			t.Fatal("subscription after stop is open")
		}
	}
}

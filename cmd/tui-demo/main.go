// Command demo runs the dashboard on a simulated deployment, without
// engines: `go run ./cmd/tui-demo -roles 16 -ranks 4 -rate 2000`.
// Restart, stop and start move the simulated role through its states.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui"
	"github.com/tsd-project/tsd/tui/tuitest"
)

type sim struct {
	*tuitest.Fake
	mu    sync.Mutex
	snap  snapshot.Snapshot
	queue map[string][]step // pending state changes per role
}

type step struct {
	at    time.Time
	state string
}

func (s *sim) plan(role string, steps ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var q []step
	for i, st := range steps {
		q = append(q, step{at: now.Add(time.Duration(i) * 700 * time.Millisecond), state: st})
	}
	s.queue[role] = q
}

func (s *sim) Restart(role string) error {
	_ = s.Fake.Restart(role)
	s.plan(role, snapshot.StateStopping, snapshot.StateStarting, snapshot.StateHandshaking, "ready+")
	return nil
}

func (s *sim) RestartAll() error {
	for _, r := range s.Fake.Snapshot().Roles {
		_ = s.Restart(r.Name)
	}
	return nil
}

func (s *sim) Stop(role string) error {
	_ = s.Fake.Stop(role)
	s.plan(role, snapshot.StateStopping, snapshot.StateStopped)
	return nil
}

// RestartNow and StopNow move the role as Restart and Stop do (the
// simulation has no requests to drain).
func (s *sim) RestartNow(role string, _ bool) error { return s.Restart(role) }
func (s *sim) StopNow(role string, _ bool) error    { return s.Stop(role) }

func (s *sim) Start(role string) error {
	_ = s.Fake.Start(role)
	s.plan(role, snapshot.StateStarting, snapshot.StateHandshaking, snapshot.StateReady)
	return nil
}

func (s *sim) tick(now time.Time, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.snap
	snap.Seq++
	snap.Time = now
	roles := append([]snapshot.RoleStatus(nil), snap.Roles...)
	for i := range roles {
		r := &roles[i]
		q := s.queue[r.Name]
		for len(q) > 0 && !q[0].at.After(now) {
			st := q[0].state
			if st == "ready+" {
				st = snapshot.StateReady
				r.Restarts++
				r.Reason = "manual restart"
			}
			if st == snapshot.StateStarting {
				r.StartedAt = now
			}
			r.State = st
			snap.Events = append(snap.Events, snapshot.Event{Time: now, Role: r.Name, Message: st})
			q = q[1:]
		}
		s.queue[r.Name] = q
	}
	if len(snap.Events) > 20 {
		snap.Events = snap.Events[len(snap.Events)-20:]
	}
	snap.Roles = roles
	gpus := append([]snapshot.GPUStatus(nil), snap.GPUs...)
	for i := range gpus {
		gpus[i].UtilPct = (gpus[i].UtilPct + 7*(i+1) + n) % 100
	}
	snap.GPUs = gpus
	s.snap = snap
	s.Fake.Publish(snap)
}

func main() {
	roles := flag.Int("roles", 6, "role instances")
	ranks := flag.Int("ranks", 2, "ranks per role")
	gpus := flag.Int("gpus", 4, "simulated GPUs (0: none)")
	rate := flag.Int("rate", 200, "log lines per second, all roles together")
	flag.Parse()

	now := time.Now()
	// Replicas grouped under their roles and the gateway's per-role traffic, as a
	// daemon of this round reports them.
	snap := tuitest.WithTraffic(tuitest.Grouped(tuitest.Deployment(*roles, *ranks, *gpus, now)))
	s := &sim{Fake: tuitest.NewFake(snap), snap: snap, queue: map[string][]step{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.tick(now, n)
			}
		}
	}()
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		per := max(*rate/50, 1)
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				var batch []snapshot.LogLine
				for i := 0; i < per; i++ {
					r := snap.Roles[(n*per+i)%len(snap.Roles)].Name
					l := tuitest.LogLines(r, 1+(n*per+i)%50, now)
					batch = append(batch, l[len(l)-1])
				}
				s.AppendLogs(batch...)
			}
		}
	}()
	if err := tui.Run(ctx, s, tui.Options{SaveDir: os.TempDir()}); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

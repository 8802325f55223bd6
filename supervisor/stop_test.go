package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// A whole stop waits the longest drain_timeout of the local roles (a
// remote role's is not ours to wait for), the default when none is set.
func TestPlanDrain(t *testing.T) {
	role := func(local bool, d time.Duration) profiles.RolePlan {
		return profiles.RolePlan{Local: local, Restart: profiles.RestartPlan{DrainTimeout: profiles.Duration(d)}}
	}
	for _, tc := range []struct {
		what  string
		roles []profiles.RolePlan
		want  time.Duration
	}{
		{"the profile's", []profiles.RolePlan{role(true, 30*time.Second), role(true, 30*time.Second)}, 30 * time.Second},
		{"a role's own longer one", []profiles.RolePlan{role(true, 30*time.Second), role(true, 2*time.Minute)}, 2 * time.Minute},
		{"a remote role's is not waited for", []profiles.RolePlan{role(true, 5*time.Second), role(false, time.Hour)}, 5 * time.Second},
		{"none set", []profiles.RolePlan{role(true, 0)}, profiles.DefaultDrainTimeout},
		{"no roles", nil, profiles.DefaultDrainTimeout},
	} {
		if got := PlanDrain(&profiles.Plan{Roles: tc.roles}); got != tc.want {
			t.Errorf("%s: PlanDrain = %s, want %s", tc.what, got, tc.want)
		}
	}
}

// The control socket's stop of everything reads its drain from the
// query: now=1 none, timeout=D that long, else the plan's.
func TestStopQuery(t *testing.T) {
	for _, tc := range []struct {
		now, timeout string
		d            time.Duration
		set, err     bool
	}{
		{"", "", 0, false, false},
		{"1", "", 0, true, false},
		{"1", "5m", 0, true, false},
		{"", "90s", 90 * time.Second, true, false},
		{"", "0s", 0, true, false},
		{"", "-1s", 0, false, true},
		{"", "soon", 0, false, true},
	} {
		d, set, err := stopQuery(tc.now, tc.timeout)
		if d != tc.d || set != tc.set || (err != nil) != tc.err {
			t.Errorf("stopQuery(%q, %q) = %s, %v, %v; want %s, %v, error %v", tc.now, tc.timeout, d, set, err, tc.d, tc.set, tc.err)
		}
	}
}

// What the stop says of its drain, and the stream line tsd stop reads it
// from.
func TestDrainSummary(t *testing.T) {
	for _, tc := range []struct {
		r     snapshot.DrainResult
		limit time.Duration
		want  string
	}{
		{snapshot.DrainResult{}, 30 * time.Second, "drained: no request was in flight"},
		{snapshot.DrainResult{InFlight: 3, Finished: 3}, 30 * time.Second, "drained: 3 requests finished, none cut"},
		{snapshot.DrainResult{InFlight: 2, Finished: 1, Cut: 1}, 30 * time.Second, "drain of 30s ended: 1 request finished, 1 cut (ended with error code shutdown)"},
		{snapshot.DrainResult{InFlight: 2, Cut: 2}, 0, "drain skipped (--now): 0 requests finished, 2 cut"},
	} {
		if got := DrainSummary(tc.r, tc.limit); got != tc.want {
			t.Errorf("DrainSummary(%+v, %s) = %q, want %q", tc.r, tc.limit, got, tc.want)
		}
	}
	r, limit, ok := StopLine(`drained {"drain":{"in_flight":4,"finished":3,"cut":1},"limit_ms":45000}`)
	if !ok || r != (snapshot.DrainResult{InFlight: 4, Finished: 3, Cut: 1}) || limit != 45*time.Second {
		t.Fatalf("StopLine: %+v %s %v", r, limit, ok)
	}
	if _, _, ok := StopLine("stopping demo"); ok {
		t.Fatal("StopLine took another line")
	}
}

// Run's teardown drains the gateway for the plan's drain_timeout, or for
// what ShutdownDrain asked (0: none), before any engine stops, and
// Snapshot.Stopping ends with what the drain did.
func TestWholeStopDrains(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		what  string
		stop  func(*Supervisor)
		limit string
	}{
		{"the profile's drain_timeout", func(s *Supervisor) { s.Shutdown() }, "drain 7s"},
		{"tsd stop --timeout 3s", func(s *Supervisor) { s.ShutdownDrain(3 * time.Second) }, "drain 3s"},
		{"tsd stop --now", func(s *Supervisor) { s.ShutdownDrain(0) }, "drain 0s"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			gw := newStubGW()
			gw.drained = snapshot.DrainResult{InFlight: 2, Finished: 1, Cut: 1}
			r := shRole("decode", profiles.KindDecode, `sleep 1000 & sleep 1000 & wait`)
			r.Restart.DrainTimeout = profiles.Duration(7 * time.Second)
			f := newFixture(t, gw, nil, r)
			f.wait("decode", "ready", state(snapshot.StateReady))
			tc.stop(f.sup)
			select {
			case err := <-f.runErr:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(waitLimit):
				t.Fatal("Run did not return after the stop")
			}
			f.runErr <- nil // for the fixture's cleanup
			calls := gw.Calls()
			d, sd, dead := indexOf(calls, tc.limit), indexOf(calls, "shutdown"), indexOf(calls, "alive decode false")
			if d < 0 || sd < d || dead < sd {
				t.Fatalf("want %q, then the unbind, then the engine's end: %v", tc.limit, calls)
			}
			st := f.sup.Snapshot().Stopping
			if st == nil || st.Phase != snapshot.StopStopping || st.Drain != gw.drained {
				t.Fatalf("Snapshot.Stopping = %+v", st)
			}
			var said bool
			for _, e := range f.sup.Snapshot().Events {
				said = said || strings.Contains(e.Message, "1 request finished, 1 cut") || strings.Contains(e.Message, "drain skipped (--now)")
			}
			if !said {
				t.Fatalf("no event says what the drain did: %+v", f.sup.Snapshot().Events)
			}
		})
	}
}

// A role in backoff has no process and so no uptime: its StartedAt is
// cleared with its PID when the run ends (the dashboard's UPTIME and tsd
// status's UP read it), never the dead process's age.
func TestBackoffHasNoStartedAt(t *testing.T) {
	t.Parallel()
	r := shRole("decode", profiles.KindDecode, `exit 3`)
	r.Restart.Backoff = profiles.Duration(time.Minute)
	r.Restart.MaxBackoff = profiles.Duration(time.Minute)
	f := newFixture(t, nil, nil, r)
	st := f.wait("decode", "backoff", state(snapshot.StateBackoff))
	if !st.StartedAt.IsZero() || st.PID != 0 {
		t.Fatalf("in backoff: started_at %v, pid %d; want neither", st.StartedAt, st.PID)
	}
}

package supervisor

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

const twoRanks = `sleep 1000 & sleep 1000 & wait`

func hasCall(calls []string, prefix string) bool {
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

// A restart takes the role out of routing at once but lets its in-flight
// requests finish: the process lives (state draining, count and deadline
// shown) until the gateway counts none, and nothing is aborted.
func TestRestartDrainsBeforeStopping(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	dec := shRole("decode", profiles.KindDecode, twoRanks)
	dec.Restart.DrainTimeout = profiles.Duration(time.Hour)
	f := newFixture(t, gw, nil, dec)
	r1 := f.wait("decode", "ready", state(snapshot.StateReady))
	gw.setDrain("decode", 2)
	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	d := f.wait("decode", "draining", state(snapshot.StateDraining))
	if d.DrainInFlight != 2 || d.DrainDeadline.IsZero() || d.Routed || d.PID != r1.PID {
		t.Fatalf("draining status %+v", d)
	}
	if !hasCall(gw.Calls(), "routed decode false") || hasCall(gw.Calls(), "alive decode false") {
		t.Fatalf("drain must unroute first and keep the process: %v", gw.Calls())
	}
	gw.setDrain("decode", 1)
	f.wait("decode", "count follows the gateway", func(r snapshot.RoleStatus) bool { return r.DrainInFlight == 1 })
	gw.setDrain("decode", 0)
	r2 := f.wait("decode", "ready again", func(r snapshot.RoleStatus) bool {
		return r.State == snapshot.StateReady && r.PID != r1.PID
	})
	assertGroupGone(t, r1.PID)
	if r2.Restarts != 1 || r2.DrainInFlight != 0 || !r2.DrainDeadline.IsZero() {
		t.Fatalf("after the drained restart %+v", r2)
	}
	for _, c := range gw.Calls() {
		if strings.HasPrefix(c, "abort decode ") && c != "abort decode 0" {
			t.Fatalf("a drained restart aborted requests: %v", gw.Calls())
		}
	}
}

// A drain that does not finish within restart.drain_timeout ends what is
// left (AbortRole, before the process is stopped) and stops anyway.
func TestDrainTimeoutAbortsTheRest(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	dec := shRole("decode", profiles.KindDecode, twoRanks)
	dec.Restart.DrainTimeout = profiles.Duration(300 * time.Millisecond)
	f := newFixture(t, gw, nil, dec)
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	gw.setDrain("decode", 3)
	if err := f.sup.Stop("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "draining", state(snapshot.StateDraining))
	f.wait("decode", "stopped", state(snapshot.StateStopped))
	assertGroupGone(t, r.PID)
	calls := gw.Calls()
	ab, dead := indexOf(calls, "abort decode 3"), -1
	for i, c := range calls {
		if c == "alive decode false" {
			dead = i
		}
	}
	if ab < 0 || dead < ab {
		t.Fatalf("the rest must be aborted before the process goes: %v", calls)
	}
	if log := logText(t, f.sup, "decode"); !strings.Contains(log, "drain_timeout 300ms passed with 3 request(s) in flight") {
		t.Fatalf("log lacks the drain timeout:\n%s", log)
	}
}

// --now skips the drain: in-flight requests end at once.
func TestStopNowSkipsDrain(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	dec := shRole("decode", profiles.KindDecode, twoRanks)
	dec.Restart.DrainTimeout = profiles.Duration(time.Hour)
	f := newFixture(t, gw, nil, dec)
	r1 := f.wait("decode", "ready", state(snapshot.StateReady))
	gw.setDrain("decode", 2)
	if err := f.sup.RestartNow("decode", true); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "restarted", func(r snapshot.RoleStatus) bool { return r.State == snapshot.StateReady && r.PID != r1.PID })
	if indexOf(gw.Calls(), "abort decode 2") < 0 {
		t.Fatalf("--now did not abort the in-flight requests: %v", gw.Calls())
	}
	for _, e := range f.sup.Snapshot().Events {
		if strings.Contains(e.Message, "→ draining") {
			t.Fatalf("--now drained: %v", e)
		}
	}
}

// A draining role whose tree gets stopped cannot finish its drain: it is
// stopped (and restarted, as asked) at once, not after drain_timeout.
func TestStallDuringDrainStopsAtOnce(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	dec := shRole("decode", profiles.KindDecode, twoRanks)
	dec.Restart.DrainTimeout = profiles.Duration(time.Hour)
	f := newFixture(t, gw, func(o *Options) { o.StallScan = 50 * time.Millisecond }, dec)
	r1 := f.wait("decode", "ready", state(snapshot.StateReady))
	gw.setDrain("decode", 1)
	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "draining", state(snapshot.StateDraining))
	stopOneRank(t, r1.PID)
	f.wait("decode", "restarted", func(r snapshot.RoleStatus) bool { return r.State == snapshot.StateReady && r.PID != r1.PID })
	assertGroupGone(t, r1.PID)
}

// stopOneRank SIGSTOPs one non-leader member of the group and returns it.
func stopOneRank(t *testing.T, pgid int) int {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		for _, pid := range groupMembers(pgid) {
			if pid != pgid {
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond) // the shell forks its children after we learn its pid
	}
	t.Fatalf("group %d has no rank to stop", pgid)
	return 0
}

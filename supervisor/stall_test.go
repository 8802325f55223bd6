package supervisor

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

func stallFixture(t *testing.T, gw *stubGW, action string) (*fixture, snapshot.RoleStatus) {
	t.Helper()
	dec := shRole("decode", profiles.KindDecode, twoRanks)
	dec.StallAction = action
	f := newFixture(t, gw, func(o *Options) { o.StallScan = 50 * time.Millisecond }, dec)
	return f, f.wait("decode", "ready", state(snapshot.StateReady))
}

// SIGSTOP of one rank (a stopped rank once showed "ready" for 294 s and
// took half the traffic):
// with stall_action wait the role leaves routing as stalled, with the
// stopped pid in its reason; SIGCONT re-admits it, same process.
func TestStoppedRankStallsThenRecovers(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	f, r1 := stallFixture(t, gw, profiles.StallWait)
	pid := stopOneRank(t, r1.PID)
	s := f.wait("decode", "stalled", state(snapshot.StateStalled))
	if s.Routed || !strings.Contains(s.Reason, "stopped (state T") || s.PID != r1.PID {
		t.Fatalf("stalled status %+v", s)
	}
	if !hasCall(gw.Calls(), "stalled decode true") {
		t.Fatalf("gateway not told: %v", gw.Calls())
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r2 := f.wait("decode", "ready again", state(snapshot.StateReady))
	if r2.PID != r1.PID || !r2.Routed || r2.Restarts != 0 {
		t.Fatalf("after SIGCONT %+v", r2)
	}
	if !hasCall(gw.Calls(), "stalled decode false") {
		t.Fatalf("gateway not told of the recovery: %v", gw.Calls())
	}
}

// With stall_action restart (the default) a stopped rank gets the role
// restarted: a new process, ready again, the stopped tree gone.
func TestStoppedRankRestarts(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	f, r1 := stallFixture(t, gw, profiles.StallRestart)
	stopOneRank(t, r1.PID)
	r2 := f.wait("decode", "restarted", func(r snapshot.RoleStatus) bool {
		return r.State == snapshot.StateReady && r.PID != r1.PID
	})
	assertGroupGone(t, r1.PID)
	if r2.Restarts != 1 {
		t.Fatalf("after the stall restart %+v", r2)
	}
	calls := gw.Calls()
	on := indexOf(calls, "stalled decode true")
	if on < 0 {
		t.Fatalf("gateway not told: %v", calls)
	}
	if log := logText(t, f.sup, "decode"); !strings.Contains(log, "stalled: process ") || !strings.Contains(log, "restarting (health.stall_action: restart)") {
		t.Fatalf("log lacks the stall story:\n%s", log)
	}
}

// The gateway's verdict (a rank silent with requests in flight) stalls
// the role too; the rank registering again re-admits it.
func TestGatewayStalledRankWaitsAndRecovers(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	f, r1 := stallFixture(t, gw, profiles.StallWait)
	gw.ch <- snapshot.RankEvent{Role: "decode", Rank: snapshot.RankStatus{Identity: 0, State: snapshot.RankStalled}}
	s := f.wait("decode", "stalled", state(snapshot.StateStalled))
	if !strings.Contains(s.Reason, "rank(s) [0] sent nothing") {
		t.Fatalf("reason %q", s.Reason)
	}
	gw.ch <- snapshot.RankEvent{Role: "decode", Rank: snapshot.RankStatus{Identity: 0, State: snapshot.RankRegistered}}
	r2 := f.wait("decode", "ready again", state(snapshot.StateReady))
	if r2.PID != r1.PID || !r2.Routed {
		t.Fatalf("after recovery %+v", r2)
	}
}

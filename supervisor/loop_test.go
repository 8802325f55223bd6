package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// A restart with nothing in flight goes from ready straight to stopping:
// the drain that finds nothing returns its answer as an event, which the
// actor runs before it publishes, so "draining" is never shown; and the
// gateway hears the role leave routing before the drain counts.
func TestRestartWithNothingInFlightSkipsDraining(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	f := newFixture(t, gw, nil, shRole("decode", profiles.KindDecode, twoRanks))
	r1 := f.wait("decode", "ready", state(snapshot.StateReady))
	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "ready again", func(r snapshot.RoleStatus) bool { return r.State == snapshot.StateReady && r.PID != r1.PID })
	var msgs []string
	for _, e := range f.sup.Snapshot().Events {
		if e.Role == "decode" {
			msgs = append(msgs, e.Message)
		}
	}
	joined := strings.Join(msgs, "\n")
	if strings.Contains(joined, "→ draining") || !strings.Contains(joined, "ready → stopping: restart requested") {
		t.Fatalf("events:\n%s", joined)
	}
	calls := gw.Calls()
	if off, abort := indexOf(calls, "routed decode false"), indexOf(calls, "abort decode 0"); off < 0 || abort < off {
		t.Fatalf("unroute must come before the drain's end: %v", calls)
	}
}

// The event log and the runs table exist before the supervisor (cmd/tsd
// builds them first and hands them to the gateway too): a line added to
// the log reaches the Snapshot's events, and the table names the role's
// current process while it runs and none once it stopped.
func TestEventLogAndRunsAreShared(t *testing.T) {
	t.Parallel()
	events, runs := NewEventLog(), NewRuns()
	events.Gateway("stall", "decode", "decode rank 0 sent nothing")
	f := newFixture(t, nil, func(o *Options) { o.Events, o.Runs = events, runs }, shRole("decode", profiles.KindDecode, readyScript))
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	if got := runs.PIDs("decode"); len(got) != 1 || got[0] != r.PID {
		t.Fatalf("runs.PIDs = %v, want [%d]", got, r.PID)
	}
	if got := f.sup.RolePIDs("decode"); len(got) != 1 || got[0] != r.PID {
		t.Fatalf("RolePIDs = %v, want [%d]", got, r.PID)
	}
	cur, ch, cancel := f.sup.Subscribe()
	deadline := time.After(waitLimit)
	for !hasEvent(cur, "decode", "stall: decode rank 0 sent nothing") {
		select {
		case s, ok := <-ch:
			if !ok {
				t.Fatal("snapshots ended")
			}
			cur = s
		case <-deadline:
			t.Fatalf("the logged line never reached the snapshot: %+v", cur.Events)
		}
	}
	cancel()
	if err := f.sup.Stop("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "stopped", state(snapshot.StateStopped))
	if got := runs.PIDs("decode"); got != nil {
		t.Fatalf("runs.PIDs after stop = %v", got)
	}
}

func hasEvent(s snapshot.Snapshot, role, msg string) bool {
	for _, e := range s.Events {
		if e.Role == role && e.Message == msg {
			return true
		}
	}
	return false
}

// A role's row carries what its plan says of it (kind, group, GPUs,
// worker) from the first snapshot on: status, /metrics' role families,
// the dashboard's KIND and GPUS columns and a group's verbs all read them.
func TestRoleStatusCarriesThePlan(t *testing.T) {
	t.Parallel()
	rp := shRole("decode-0", profiles.KindDecode, readyScript)
	rp.Group, rp.GPUs, rp.Worker = "decode", []string{"2", "3"}, "ipc:///nowhere/decode-0"
	f := newFixture(t, nil, nil, rp)
	r := f.wait("decode-0", "ready", state(snapshot.StateReady))
	if r.Kind != profiles.KindDecode || r.Group != "decode" || len(r.GPUs) != 2 || r.GPUs[0] != "2" || r.GPUs[1] != "3" ||
		r.Worker != rp.Worker {
		t.Fatalf("role row %+v, want kind %q group %q GPUs [2 3] worker %q", r, profiles.KindDecode, "decode", rp.Worker)
	}
}

package planner

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/snapshot"
)

// Pins: the tsd_planner_* series read the daemon's status: targets,
// observed p90s, pressure, replicas now and proposed, decisions by
// reason, moves by outcome; no status, no series.
func TestCollector(t *testing.T) {
	var st *snapshot.PlannerStatus
	c := NewCollector(func() *snapshot.PlannerStatus { return st })
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("no planner: %d series", n)
	}
	st = &snapshot.PlannerStatus{Mode: "act", TTFT: time.Second, ITL: 50 * time.Millisecond, Moves: 2, Failed: 1,
		Decisions: map[string]uint64{CodeHold: 7, CodeMove: 2},
		Groups:    []snapshot.PlannerGroup{{Group: "prefill", Kind: "prefill", Replicas: 1, Proposed: 2, TTFT: 820 * time.Millisecond, Pressure: 0.82, Predicted: 0.9}}}
	want := `
# HELP tsd_planner_decisions_total Decisions since start, by reason (hold, move, add, no_donor, cooldown, at_max, no_targets).
# TYPE tsd_planner_decisions_total counter
tsd_planner_decisions_total{reason="hold"} 7
tsd_planner_decisions_total{reason="move"} 2
# HELP tsd_planner_proposed_replicas Replicas the last decision proposes for the entry.
# TYPE tsd_planner_proposed_replicas gauge
tsd_planner_proposed_replicas{entry="prefill",kind="prefill"} 2
# HELP tsd_planner_observed_seconds p90 over the last interval, by profile entry and target (0: no samples).
# TYPE tsd_planner_observed_seconds gauge
tsd_planner_observed_seconds{entry="prefill",target="itl_p90"} 0
tsd_planner_observed_seconds{entry="prefill",target="ttft_p90"} 0.82
# HELP tsd_planner_target_seconds The SLO planner's targets (slo.ttft_p90, slo.itl_p90).
# TYPE tsd_planner_target_seconds gauge
tsd_planner_target_seconds{target="itl_p90"} 0.05
tsd_planner_target_seconds{target="ttft_p90"} 1
# HELP tsd_planner_moves_total Layout changes the planner carried out (done) or that failed and were rolled back (failed).
# TYPE tsd_planner_moves_total counter
tsd_planner_moves_total{outcome="done"} 2
tsd_planner_moves_total{outcome="failed"} 1
# HELP tsd_planner_act 1 in act mode (proposals carried out), 0 in advise mode.
# TYPE tsd_planner_act gauge
tsd_planner_act 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "tsd_planner_decisions_total", "tsd_planner_proposed_replicas",
		"tsd_planner_observed_seconds", "tsd_planner_target_seconds", "tsd_planner_moves_total", "tsd_planner_act"); err != nil {
		t.Fatal(err)
	}
}

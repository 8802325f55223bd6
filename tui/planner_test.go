package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// plannerDeployment is a deployment whose planner proposes moving a
// decode GPU to the prefill, waiting for a drain.
func plannerDeployment() snapshot.Snapshot {
	s := tuitest.Deployment(4, 1, 4, t0)
	ms := time.Millisecond
	s.Planner = &snapshot.PlannerStatus{Mode: "act", TTFT: 500 * ms, ITL: 50 * ms, Interval: 30 * time.Second, Cooldown: 2 * time.Minute,
		GPUs: []string{"0", "1", "2", "3"}, Last: t0.Add(-4 * time.Second), Next: t0.Add(26 * time.Second), Code: "move",
		Reason:   "prefill TTFT p90 820 ms > 500 ms for 3 intervals; decode ITL p90 18 ms with headroom (54% of 50 ms with 2 replicas): move GPU 3 from decode-2 to prefill-1",
		Proposal: "move GPU 3 from decode-2 to prefill-1", Waiting: "decode-0 draining", Moves: 1,
		Groups: []snapshot.PlannerGroup{
			{Group: "prefill", Kind: "prefill", Replicas: 1, Proposed: 2, Min: 1, TTFT: 820 * ms, TTFTN: 240, Pressure: 1.64, Predicted: 1.7, Judged: "ttft",
				Streak: 3, ReqPerSec: 8, PromptPerReq: 5800, CachedShare: 0.12, InFlight: 6.5, QueuedPrompt: 41000,
				PressureSeries: []float64{0.3, 0.3, 0.4, 0.9, 1.3, 1.5, 1.64}},
			{Group: "decode", Kind: "decode", Replicas: 3, Proposed: 2, Min: 1, TTFT: 820 * ms, TTFTN: 240, ITL: 18 * ms, ITLN: 9000, Pressure: 0.36,
				Predicted: 0.36, Judged: "itl", CooldownUntil: t0.Add(70 * time.Second), ReqPerSec: 8, InFlight: 40, OutputTokPerS: 1200,
				PressureSeries: []float64{0.8, 0.8, 0.7, 0.5, 0.4, 0.36, 0.36}},
		},
		Recent: []snapshot.PlannerChange{{Time: t0.Add(-10 * time.Minute), Code: "move", Outcome: "done",
			Reason: "decode ITL p90 70 ms > 50 ms for 2 intervals; prefill TTFT p90 40 ms with headroom (8% of 500 ms with 1 replica): move GPU 3 from prefill-1 to decode-2"}},
	}
	return s
}

// The planner page (P): targets against measured with each entry's
// trend, the proposal and why, what it waits for, the past changes.
func TestGoldenPlanner(t *testing.T) {
	for _, sz := range sizes {
		m, _ := newTestModel(t, sz.w, sz.h, plannerDeployment())
		press(m, "P")
		s := plain(m)
		checkFrame(t, s, sz.w, sz.h)
		golden(t, fmt.Sprintf("planner_%dx%d", sz.w, sz.h), s)
	}
}

// Pins: the page says what it shows, or why there is nothing; :planner
// opens it too, and it scrolls inside tiny windows.
func TestPlannerPage(t *testing.T) {
	m, _ := newTestModel(t, 120, 40, tuitest.Deployment(4, 1, 4, t0))
	press(m, "P")
	if s := plain(m); !strings.Contains(s, "no SLO planner: this deployment's profile has no slo: key") || !strings.Contains(s, "[planner]") {
		t.Fatalf("no planner:\n%s", s)
	}
	m, _ = newTestModel(t, 160, 40, plannerDeployment())
	press(m, ":")
	typeText(m, "planner")
	press(m, "enter")
	s := plain(m)
	for _, want := range []string{"TTFT p90 ≤ 500ms", "→ 2", "164% TTFT", "1m10s", "proposal: move GPU 3 from decode-2 to prefill-1",
		"waits for: decode-0 draining", "done decode ITL p90 70 ms"} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %q:\n%s", want, s)
		}
	}
	for _, sz := range []struct{ w, h int }{{1, 1}, {20, 5}, {40, 10}} {
		m, _ := newTestModel(t, sz.w, sz.h, plannerDeployment())
		press(m, "P")
		checkFrame(t, m.render(), sz.w, sz.h)
		press(m, "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j", "j")
		checkFrame(t, m.render(), sz.w, sz.h)
	}
}

package main

// The SLO planner end to end (docs/architecture.md §4.5): `tsd up
// --headless` on ts-fake engines under the performance model, a prefill
// loaded with long prompts past its TTFT target while the decodes have
// room; in act mode the planner moves a decode's GPU to a second prefill
// with no request failing, in advise mode it proposes the same and
// changes nothing.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// plannerE2EProfile: one prefill, two decodes on ts-fake under the
// shipped performance preset (a 6,000-token prompt's prefill takes 136
// ms of its GPU), with a TTFT target three prompts in a queue miss.
func plannerE2EProfile(port int, mode string) string {
	return fmt.Sprintf(`name: fake-planner
model: ./model
engine:
  command: [%s, serve]
  args: [--fake-perf, llama-3.1-8b-bf16-h200]
  env: {TS_FAKE_STARTUP: 200ms}
gateway:
  port: %d
roles:
  - name: prefill
    kind: prefill
    gpus: [0]
  - name: decode
    kind: decode
    replicas: 2
    gpus: [[1], [2]]
restart:
  backoff: 200ms
  max_backoff: 2s
  budget: 100 in 10m
  stop_grace: 5s
slo:
  ttft_p90: 150ms
  itl_p90: 50ms
  mode: %s
  interval: 2s
  breach: 2
  cooldown: 1h
`, fakeBin, port, mode)
}

func startPlannerE2E(t *testing.T, mode string) (*deployment, string) {
	t.Helper()
	dir := fakeProfileDir(t, "e2epl")
	port := freePort(t)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(plannerE2EProfile(port, mode)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	for _, r := range []string{"prefill", "decode-0", "decode-1"} {
		d.waitLine(0, r, "→ ready")
	}
	return d, fmt.Sprintf("http://127.0.0.1:%d", port)
}

// waitPlanner asks tsd status --json until the planner satisfies cond,
// for up to limit.
func (d *deployment) waitPlanner(limit time.Duration, what string, cond func(*snapshot.PlannerStatus) bool) snapshot.Snapshot {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s := d.status()
		if s.Planner != nil && cond(s.Planner) {
			return s
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("planner never reached %s; last %+v\noutput:\n%s", what, s.Planner, d.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestE2EPlannerAct: the prefill misses its TTFT target under long
// prompts, the decodes have room: the planner moves decode-1's GPU to
// prefill-1 through tsd scale's steps while three clients stream
// throughout, none of which fails; the move is in the events, tsd status
// --json, tsd plan --running and /metrics.
func TestE2EPlannerAct(t *testing.T) {
	d, base := startPlannerE2E(t, "act")
	before := pidsOf(d.status())
	load := startLoadPrompt(base, 3, 16, 6000, 60*time.Second)
	d.waitPlanner(90*time.Second, "a move carried out", func(p *snapshot.PlannerStatus) bool { return p.Moves >= 1 })
	s := d.waitStatus(func(s snapshot.Snapshot) bool {
		return strings.Join(roleNames(s), ",") == "prefill-0,prefill-1,decode" && allReady(s)
	})
	tl := tallyOf(load.stop())
	if tl.n[outOK] != tl.sent || tl.sent < 10 {
		t.Fatalf("requests through the move: %s", tl)
	}
	now := pidsOf(s)
	if now["prefill-0"] != before["prefill"] || now["decode"] != before["decode-0"] {
		t.Fatalf("pids %v → %v: the replicas that stay keep their processes", before, now)
	}
	if r := roleStatus(t, s, "prefill-1"); strings.Join(r.GPUs, ",") != "2" {
		t.Fatalf("prefill-1 on GPUs %v, want decode-1's GPU 2", r.GPUs)
	}
	out := d.output()
	for _, want := range []string{"planner: prefill TTFT p90", "for 2 intervals", "move GPU 2 from decode-1 to prefill-1", "planner: done: move GPU 2 from decode-1 to prefill-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("tsd's output lacks %q", want)
		}
	}
	s = d.waitPlanner(30*time.Second, "a decision on the new layout", func(p *snapshot.PlannerStatus) bool {
		return len(p.Groups) == 2 && p.Groups[0].Replicas == 2 && p.Groups[1].Replicas == 1
	})
	p := s.Planner
	if p.Mode != "act" || p.Failed != 0 || len(p.Recent) == 0 || p.Recent[0].Outcome != "done" {
		t.Errorf("planner status %+v", p)
	}
	if plan, err := d.ctl("plan", "--running"); err != nil || !strings.Contains(plan, "slo planner (act)") || !strings.Contains(plan, "prefill-1") {
		t.Errorf("tsd plan --running: %v\n%s", err, plan)
	}
	m := metricsText(t, base)
	for _, want := range []string{`tsd_planner_moves_total{outcome="done"} 1`, `tsd_planner_replicas{entry="prefill",kind="prefill"} 2`, `tsd_planner_target_seconds{target="ttft_p90"} 0.15`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	d.ctl("stop")
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

// TestE2EPlannerAdvise: the same load in advise mode: the planner
// proposes the move and shows it, and no role changes (same processes,
// no apply); tsd planner pause and resume answer.
func TestE2EPlannerAdvise(t *testing.T) {
	d, base := startPlannerE2E(t, "advise")
	before := pidsOf(d.status())
	load := startLoadPrompt(base, 3, 16, 6000, 60*time.Second)
	d.waitPlanner(90*time.Second, "a proposal", func(p *snapshot.PlannerStatus) bool { return p.Decisions["move"] >= 3 })
	tl := tallyOf(load.stop())
	s := d.status()
	if got := pidsOf(s); fmt.Sprint(got) != fmt.Sprint(before) || s.Apply != nil {
		t.Fatalf("advise mode changed the deployment: pids %v → %v, apply %+v", before, got, s.Apply)
	}
	if tl.n[outOK] != tl.sent {
		t.Fatalf("requests: %s", tl)
	}
	p := s.Planner
	if p.Moves != 0 || !strings.HasPrefix(p.Waiting, "advise mode") && p.Proposal != "" {
		t.Errorf("planner %+v", p)
	}
	if !strings.Contains(d.output(), "move GPU 2 from decode-1 to prefill-1 (advise: not carried out)") {
		t.Errorf("no advise event in tsd's output")
	}
	if out, err := d.ctl("planner", "pause"); err != nil || !strings.Contains(out, "the planner is paused") {
		t.Errorf("tsd planner pause: %v\n%s", err, out)
	}
	if s := d.status(); s.Planner == nil || !s.Planner.Paused {
		t.Errorf("paused planner: %+v", s.Planner)
	}
	if out, err := d.ctl("planner", "resume"); err != nil || !strings.Contains(out, "the planner resumed") {
		t.Errorf("tsd planner resume: %v\n%s", err, out)
	}
	if out, err := d.ctl("status"); err != nil || !strings.Contains(out, "planner (advise)") {
		t.Errorf("tsd status: %v\n%s", err, out)
	}
	d.ctl("stop")
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

func allReady(s snapshot.Snapshot) bool {
	for _, r := range s.Roles {
		if r.State != snapshot.StateReady {
			return false
		}
	}
	return len(s.Roles) > 0
}

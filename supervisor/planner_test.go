package supervisor

import (
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/planner"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// plannerGW is the live stub gateway with a scripted traffic account.
type plannerGW struct {
	*liveGW
	omu sync.Mutex
	// ttft and itl are what every entry's p90 reads now.
	ttft, itl time.Duration
	reads     int
}

func (g *plannerGW) Observe(window time.Duration, groups map[string][]string) snapshot.TrafficWindow {
	g.omu.Lock()
	defer g.omu.Unlock()
	g.reads++
	tw := snapshot.TrafficWindow{Window: window}
	for name, insts := range groups {
		tw.Groups = append(tw.Groups, snapshot.RoleWindow{Role: name, TTFTp90: g.ttft, TTFTN: 100, ITLp90: g.itl, ITLN: 1000})
		for _, in := range insts {
			tw.Roles = append(tw.Roles, snapshot.RoleWindow{Role: in, Requests: uint64(100 * g.reads), PromptIn: uint64(30000 * g.reads)})
		}
	}
	return tw
}

func (g *plannerGW) set(ttft, itl time.Duration) {
	g.omu.Lock()
	g.ttft, g.itl = ttft, itl
	g.omu.Unlock()
}

// plannerProfile: one prefill (GPU 0), two decodes (GPUs 1, 2); the
// engine fails as a prefill on GPU 2 when the profile says so.
func plannerProfile(mode string, failPrefillOn2 bool) string {
	src := strings.Replace(applyProfile, "    kind: decode\n    gpus: [1]\n", "    kind: decode\n    replicas: 2\n    gpus: [[1], [2]]\n", 1)
	if failPrefillOn2 {
		src = strings.Replace(src, `case "$*" in *--fail*)`, `case "$CUDA_VISIBLE_DEVICES $*" in "2 "*"mode prefill"*|*--fail*)`, 1)
	}
	return src + "slo:\n  ttft_p90: 500ms\n  itl_p90: 50ms\n  mode: " + mode + "\n  interval: 1s\n  breach: 1\n  cooldown: 1h\n"
}

func newPlannerFixture(t *testing.T, src string) (*applyFixture, *plannerGW) {
	t.Helper()
	var pg *plannerGW
	f := newApplyFixtureWith(t, true, src, func(l *liveGW) Gateway {
		pg = &plannerGW{liveGW: l, ttft: 100 * time.Millisecond, itl: 10 * time.Millisecond}
		return pg
	})
	return f, pg
}

// waitPlanner waits until the snapshot's planner satisfies pred.
func (f *applyFixture) waitPlanner(what string, pred func(*snapshot.PlannerStatus) bool) *snapshot.PlannerStatus {
	f.t.Helper()
	cur, ch, cancel := f.sup.Subscribe()
	defer cancel()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		if p := cur.Planner; p != nil && pred(p) {
			return p
		}
		select {
		case s, ok := <-ch:
			if !ok {
				f.t.Fatalf("snapshots ended before %s", what)
			}
			cur = s
		case <-deadline.C:
			f.t.Fatalf("timed out waiting for %s; planner %+v\nevents: %v", what, cur.Planner, cur.Events)
		}
	}
}

func events(s snapshot.Snapshot) string {
	var b strings.Builder
	for _, e := range s.Events {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}

// TestPlannerActMovesAGPU: in act mode, prefill over its TTFT target
// with the decodes well within theirs moves decode-1's GPU to a second
// prefill through tsd scale's steps (decode-1 stopped and unbound before
// prefill-1 starts on GPU 2); prefill's process and decode-0's are kept;
// the decision is an event, in the snapshot and counted; the cooldown
// then holds the layout.
func TestPlannerActMovesAGPU(t *testing.T) {
	t.Parallel()
	f, pg := newPlannerFixture(t, plannerProfile(profiles.SLOAct, false))
	f.allReady("prefill", "decode-0", "decode-1")
	before := f.pids()
	pg.set(900*time.Millisecond, 10*time.Millisecond)
	p := f.waitPlanner("a move carried out", func(p *snapshot.PlannerStatus) bool { return p.Moves == 1 })
	f.allReady("prefill-0", "prefill-1", "decode")
	if got := f.names(); !reflect.DeepEqual(got, []string{"prefill-0", "prefill-1", "decode"}) {
		t.Fatalf("roles after the move: %v", got)
	}
	now := f.pids()
	if now["prefill-0"] != before["prefill"] || now["decode"] != before["decode-0"] {
		t.Fatalf("pids %v → %v: the entries' other replicas keep their processes", before, now)
	}
	if r, _ := f.sup.Plan().Role("prefill-1"); r == nil || strings.Join(r.GPUs, ",") != "2" {
		t.Fatalf("prefill-1 in the running plan: %+v", r)
	}
	calls := f.gw.Calls()
	if rm, add := indexOf(calls, "remove decode-1"), indexOf(calls, "add prefill-1"); rm < 0 || add < rm {
		t.Fatalf("gateway calls %v: decode-1's worker goes before prefill-1's is bound", calls)
	}
	text := events(f.sup.Snapshot())
	for _, want := range []string{
		"planner: prefill TTFT p90 900 ms > 500 ms for 1 interval; decode ITL p90 10 ms with headroom (40% of 50 ms with 1 replica): move GPU 2 from decode-1 to prefill-1",
		"planner: carrying out move GPU 2 from decode-1 to prefill-1 (as tsd scale decode=1 prefill=2)",
		"planner: done: move GPU 2 from decode-1 to prefill-1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("events lack %q:\n%s", want, text)
		}
	}
	// Decisions count intervals: one that ends while the move is under way
	// (a loaded machine slows the move, not the interval) counts "move"
	// again; the change itself is the last in Recent.
	if len(p.Recent) == 0 || p.Recent[len(p.Recent)-1].Outcome != "done" || p.Decisions[planner.CodeMove] < 1 {
		t.Errorf("planner status: recent %+v, decisions %v", p.Recent, p.Decisions)
	}
	// The next intervals see the new layout: the cooldown holds it.
	p = f.waitPlanner("the cooldown", func(p *snapshot.PlannerStatus) bool { return p.Code == planner.CodeCooldown })
	if f.sup.Snapshot().ProfileRevision == "" || p.Moves != 1 {
		t.Fatalf("after the move: %+v", p)
	}
	for _, g := range p.Groups {
		if g.CooldownUntil.IsZero() {
			t.Errorf("%s has no cooldown after the move", g.Group)
		}
	}
}

// TestPlannerAdviseChangesNothing: advise mode decides and shows the
// same move, and no role is touched.
func TestPlannerAdviseChangesNothing(t *testing.T) {
	t.Parallel()
	f, pg := newPlannerFixture(t, plannerProfile(profiles.SLOAdvise, false))
	f.allReady("prefill", "decode-0", "decode-1")
	before := f.pids()
	calls := len(f.gw.Calls())
	pg.set(900*time.Millisecond, 10*time.Millisecond)
	p := f.waitPlanner("a proposal", func(p *snapshot.PlannerStatus) bool { return p.Code == planner.CodeMove })
	if p.Proposal != "move GPU 2 from decode-1 to prefill-1" || !strings.HasPrefix(p.Waiting, "advise mode") {
		t.Fatalf("proposal %q waiting %q", p.Proposal, p.Waiting)
	}
	// Two more intervals: still proposed, never carried out.
	seen := p.Decisions[planner.CodeMove]
	p = f.waitPlanner("two more intervals", func(p *snapshot.PlannerStatus) bool { return p.Decisions[planner.CodeMove] >= seen+2 })
	if now := f.pids(); !reflect.DeepEqual(now, before) || len(f.gw.Calls()) != calls || p.Moves != 0 || f.sup.Snapshot().Apply != nil {
		t.Fatalf("advise mode changed something: pids %v → %v, calls %v, %+v", before, now, f.gw.Calls()[calls:], p)
	}
	if n := strings.Count(events(f.sup.Snapshot()), "(advise: not carried out)"); n != 1 {
		t.Errorf("the same proposal is an event once, not every interval: %d", n)
	}
	if len(p.Groups) != 2 || p.Groups[0].Proposed != 2 || p.Groups[1].Proposed != 1 || p.Groups[0].Replicas != 1 {
		t.Errorf("groups %+v", p.Groups)
	}
}

// TestPlannerPauseResume: paused, a proposal waits and nothing moves;
// resumed, it is carried out.
func TestPlannerPauseResume(t *testing.T) {
	t.Parallel()
	f, pg := newPlannerFixture(t, plannerProfile(profiles.SLOAct, false))
	f.allReady("prefill", "decode-0", "decode-1")
	if a, err := f.sup.PlannerPause(); err != nil || !strings.Contains(a, "paused") {
		t.Fatalf("pause: %q %v", a, err)
	}
	if a, _ := f.sup.PlannerPause(); a != "the planner is already paused" {
		t.Fatalf("second pause: %q", a)
	}
	pg.set(900*time.Millisecond, 10*time.Millisecond)
	p := f.waitPlanner("a paused proposal", func(p *snapshot.PlannerStatus) bool { return p.Code == planner.CodeMove })
	if !p.Paused || !strings.HasPrefix(p.Waiting, "paused") || p.Moves != 0 {
		t.Fatalf("paused: %+v", p)
	}
	if a, err := f.sup.PlannerResume(); err != nil || a != "the planner resumed" {
		t.Fatalf("resume: %q %v", a, err)
	}
	f.waitPlanner("the move", func(p *snapshot.PlannerStatus) bool { return p.Moves == 1 && !p.Paused })
	f.allReady("prefill-0", "prefill-1", "decode")
}

// TestPlannerRollsBackAFailedMove: the new replica fails to start; the
// move is rolled back to the layout that served (decode-1 on GPU 2
// again), the failure is counted and said, and the cooldown holds.
func TestPlannerRollsBackAFailedMove(t *testing.T) {
	t.Parallel()
	f, pg := newPlannerFixture(t, plannerProfile(profiles.SLOAct, true))
	f.gw.stubGW.mu.Lock()
	f.gw.silent["prefill-1"] = true // it must print its way to ready, or fail
	f.gw.stubGW.mu.Unlock()
	f.allReady("prefill", "decode-0", "decode-1")
	pg.set(900*time.Millisecond, 10*time.Millisecond)
	p := f.waitPlanner("a failed move", func(p *snapshot.PlannerStatus) bool { return p.Failed == 1 })
	f.allReady("prefill", "decode-0", "decode-1")
	if got := f.names(); !reflect.DeepEqual(got, []string{"prefill", "decode-0", "decode-1"}) {
		t.Fatalf("roles after the rollback: %v", got)
	}
	if r, _ := f.sup.Plan().Role("decode-1"); r == nil || strings.Join(r.GPUs, ",") != "2" {
		t.Fatalf("decode-1 after the rollback: %+v", r)
	}
	if p.Moves != 0 || p.Paused || len(p.Recent) == 0 || p.Recent[len(p.Recent)-1].Outcome != "rolled back" {
		t.Fatalf("planner after the rollback: %+v", p)
	}
	if text := events(f.sup.Snapshot()); !strings.Contains(text, "failed and was rolled back") {
		t.Fatalf("events:\n%s", text)
	}
}

// TestPlannerWaits: every reason a proposal waits, row by row, and the
// order they are checked in.
func TestPlannerWaits(t *testing.T) {
	ready := []snapshot.RoleStatus{{Name: "prefill", State: snapshot.StateReady}, {Name: "decode", State: snapshot.StateReady}}
	draining := []snapshot.RoleStatus{{Name: "prefill", State: snapshot.StateReady}, {Name: "decode", State: snapshot.StateDraining}}
	remote := []snapshot.RoleStatus{{Name: "x", State: snapshot.StateRemote, Remote: true}}
	for _, c := range []struct {
		name     string
		f        waitFacts
		proposal bool
		want     string
	}{
		{"no proposal", waitFacts{mode: "act", paused: true}, false, ""},
		{"free to act", waitFacts{mode: "act", roles: ready}, true, ""},
		{"a remote role is not waited for", waitFacts{mode: "act", roles: remote}, true, ""},
		{"paused first", waitFacts{mode: "advise", paused: true, moving: true}, true, "paused (tsd planner resume gives it the wheel back)"},
		{"advise", waitFacts{mode: "advise", moving: true}, true, "advise mode (slo.mode: act carries proposals out)"},
		{"a plan file", waitFacts{mode: "act", noProfile: true, moving: true}, true, "a deployment run from a plan file has no profile to scale (tsd apply a profile first)"},
		{"a move under way", waitFacts{mode: "act", moving: true, apply: true}, true, "the last move is under way"},
		{"an operator's apply", waitFacts{mode: "act", apply: true, applyStep: "start extra", rolling: 1}, true, "an apply is in progress (start extra)"},
		{"a rolling restart", waitFacts{mode: "act", rolling: 1, roles: draining}, true, "a rolling restart is in progress"},
		{"a drain", waitFacts{mode: "act", roles: draining}, true, "decode draining"},
		{"many not ready", waitFacts{mode: "act", roles: []snapshot.RoleStatus{{Name: "a", State: "failed"}, {Name: "b", State: "starting"},
			{Name: "c", State: "backoff"}, {Name: "d", State: "stopped"}}}, true, "a failed, b starting, c backoff, 1 more"},
	} {
		if got := plannerWaits(c.f, c.proposal); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestPlannerLayout: the running plan as the decision reads it, replicas
// in index order whatever the plan's order, other roles' GPUs apart.
func TestPlannerLayout(t *testing.T) {
	p := &profiles.Plan{Roles: []profiles.RolePlan{
		{Name: "enc", Group: "enc", Kind: "encode", Local: true, GPUs: []string{"4"}},
		{Name: "decode-1", Group: "decode", Kind: "decode", Local: true, GPUs: []string{"3"}},
		{Name: "prefill", Group: "prefill", Kind: "prefill", Local: true, GPUs: []string{"0", "1"}},
		{Name: "decode-0", Group: "decode", Kind: "decode", Local: true, GPUs: []string{"2"}},
		{Name: "far", Group: "far", Kind: "decode", Host: "h", GPUs: []string{"0"}},
	}}
	slo := &profiles.SLOPlan{Roles: []profiles.SLORolePlan{{Group: "prefill", Kind: "prefill", Min: 1}, {Group: "decode", Kind: "decode", Min: 1, Max: 3}}}
	l, groups := plannerLayout(p, slo)
	want := planner.Layout{Groups: []planner.Group{
		{Name: "prefill", Kind: "prefill", Instances: []string{"prefill"}, Sets: [][]string{{"0", "1"}}, Min: 1},
		{Name: "decode", Kind: "decode", Instances: []string{"decode-0", "decode-1"}, Sets: [][]string{{"2"}, {"3"}}, Min: 1, Max: 3},
	}, Other: []string{"4"}}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("layout\n got %+v\nwant %+v", l, want)
	}
	if !reflect.DeepEqual(groups, map[string][]string{"prefill": {"prefill"}, "decode": {"decode-0", "decode-1"}}) {
		t.Fatalf("groups %v", groups)
	}
}

// TestPlannerObservation: counters are differenced per instance present
// in both readings; the mean in flight is the busy seconds over the span.
func TestPlannerObservation(t *testing.T) {
	st := &plannerState{}
	groups := map[string][]string{"decode": {"decode-0", "decode-1"}}
	t0 := time.Unix(1000, 0)
	first := snapshot.TrafficWindow{Roles: []snapshot.RoleWindow{{Role: "decode-0", Requests: 10, BusySec: 5, Prefilled: 100, Cached: 10}},
		Groups: []snapshot.RoleWindow{{Role: "decode", ITLp90: 20 * time.Millisecond, ITLN: 50}}}
	o := st.observation(first, groups, t0, 10*time.Second)
	if o.Span != 10*time.Second || o.Groups[0].Requests != 0 || o.Groups[0].ITL != 20*time.Millisecond {
		t.Fatalf("first reading: %+v", o)
	}
	second := snapshot.TrafficWindow{Roles: []snapshot.RoleWindow{
		{Role: "decode-0", Requests: 30, BusySec: 45, Prefilled: 300, Cached: 110, Queued: 7},
		{Role: "decode-1", Requests: 500, BusySec: 900, Queued: 3}, // new this interval: counts from the next
	}, Groups: []snapshot.RoleWindow{{Role: "decode"}}}
	o = st.observation(second, groups, t0.Add(20*time.Second), 10*time.Second)
	g := o.Groups[0]
	if o.Span != 20*time.Second || g.Requests != 20 || g.InFlight != 2 || g.Cached != 0.5 || g.Queued != 10 {
		t.Fatalf("second reading: span %v %+v", o.Span, g)
	}
}

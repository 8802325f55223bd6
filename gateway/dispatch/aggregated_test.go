package dispatch

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
)

var twoAgg = [][2]string{{"agg-0", profiles.KindAggregated}, {"agg-1", profiles.KindAggregated}}

// withLayouts counts layout routes (testMetrics leaves them out, as a
// plan without aggregated workers needs none).
func withLayouts(fl *fakeLane) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "layouts"}, []string{"layout", "reason"})
	fl.m.Layouts = c
	return c
}

// emitPrompt sends one full-variant output for rid carrying prompt
// logprobs for the prompt from start on (the first position has none),
// with tokens: an aggregated engine's first output.
func (r *fakeRank) emitPrompt(rid string, prompt []int32, start int, toks []int32, done int) {
	r.t.Helper()
	vals := make([]float64, 0, len(prompt)-start)
	for i := start; i < len(prompt); i++ {
		v := -0.5
		if i == 0 {
			v = math.NaN()
		}
		vals = append(vals, v)
	}
	f := wire.FullOutputBatch{RIDs: []string{rid}, FinishedReasons: []*wire.FinishReason{nil}, OutputIDs: [][]int32{toks},
		PromptTokens: []int{len(prompt)}, CompletionTokens: []int{done}, CachedTokens: []int{0},
		OutputTokenLogprobsVal: [][]float64{{}}, OutputTokenLogprobsIdx: [][]int32{{}}}
	f.SetInputLogprobs([][]float64{vals}, [][]int32{prompt[start:]})
	payload, err := wire.EncodeFullOutput(f)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.out.Send(zmq4.NewMsg(payload)); err != nil {
		r.t.Fatal(err)
	}
}

// An aggregated-only deployment sends each request as one leg to one
// aggregated engine: no bootstrap room, the whole stream from it, counted
// as an aggregated route (never) and an aggregated routing decision.
func TestAggregatedOneLeg(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, nil, twoAgg...)
	layouts := withLayouts(fl)
	if !fl.d.Ready() || fl.d.Health() != (Health{Aggregated: 2, Healthy: 2, Total: 2}) {
		t.Fatalf("aggregated only: ready %v, health %+v", fl.d.Ready(), fl.d.Health())
	}
	events, err := fl.d.Generate(context.Background(), request(3, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	eng, q := fl.decodeOf("agg-0", "agg-1")
	if q.BootstrapRoom != nil || q.BootstrapHost != nil || !strings.HasPrefix(q.RID, "req-") || !slices.Equal(q.InputIDs, []int32{11, 12, 13, 14}) {
		t.Fatalf("the one leg: rid %s room %s host %v prompt %v", q.RID, roomOf(q), q.BootstrapHost, q.InputIDs)
	}
	eng.emit(q.RID, 4, []int32{7}, nil, "", 1)
	eng.emit(q.RID, 4, []int32{8, 9}, nil, wire.FinishLength, 3)
	toks, _, last, errs := collect(t, events)
	if len(errs) > 0 || !slices.Equal(toks, []int32{7, 8, 9}) || last.Finish == nil || last.Finish.Reason != tokenapi.FinishLength || last.PromptTokens != 4 || last.OutputTokens != 3 {
		t.Fatalf("client saw %v, last %+v, errors %v", toks, last, errs)
	}
	fl.other2(eng).none()
	if n := testutil.ToFloat64(layouts.WithLabelValues(routing.LayoutAggregated, routing.LayoutReasonNever)); n != 1 {
		t.Fatalf("aggregated/never counted %v times", n)
	}
	if l := fl.d.Layouts(); l == nil || l.Disaggregation != routing.DisaggNever || l.Aggregated != 1 || l.PD != 0 {
		t.Fatalf("layout split %+v", l)
	}
	if p := fl.d.Policies(); p.Aggregated != routing.RoundRobin {
		t.Fatalf("policies %+v", p)
	}
}

// other2 is the other aggregated engine of twoAgg.
func (fl *fakeLane) other2(r *fakeRank) *fakeRank {
	if r.role == "agg-0" {
		return fl.ranks["agg-1"]
	}
	return fl.ranks["agg-0"]
}

// An aggregated engine that dies before the first token: the request goes
// again to the other one, under a fresh rid, as the same request.
func TestAggregatedRetryBeforeFirstToken(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, withRetry(true, 3), twoAgg...)
	events, err := fl.d.Generate(context.Background(), request(2, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	dead, q1 := fl.decodeOf("agg-0", "agg-1")
	fl.kill(dead.role)
	alive := fl.other2(dead)
	q2 := alive.next()
	if q2.RID == q1.RID || !slices.Equal(q2.InputIDs, q1.InputIDs) || *q2.Sampling.MaxNewTokens != 2 {
		t.Fatalf("retry: %s %v max %d after %s", q2.RID, q2.InputIDs, *q2.Sampling.MaxNewTokens, q1.RID)
	}
	alive.emit(q2.RID, 4, []int32{5, 6}, nil, wire.FinishLength, 2)
	toks, _, last, errs := collect(t, events)
	if len(errs) > 0 || !slices.Equal(toks, []int32{5, 6}) || last.Finish == nil {
		t.Fatalf("client saw %v, last %+v, errors %v", toks, last, errs)
	}
	if n := attempts(fl.m, FailDied, VerdictRetry); n != 1 {
		t.Fatalf("died/retry counted %v times", n)
	}
}

// An aggregated engine that dies after tokens went out: the stream
// continues on the other aggregated engine, which re-prefills the prompt
// plus the tokens sent, for the rest of the budget; the client sees one
// stream with unbroken counts.
func TestAggregatedMigrateAfterTokens(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, withRetry(true, 3), twoAgg...)
	events, err := fl.d.Generate(context.Background(), request(5, 3, true))
	if err != nil {
		t.Fatal(err)
	}
	dead, q1 := fl.decodeOf("agg-0", "agg-1")
	dead.emit(q1.RID, 4, []int32{1, 2}, []float64{-0.1, -0.2}, "", 2)
	if ev := event(t, events); !slices.Equal(ev.TokenIDs, []int32{1, 2}) || ev.OutputTokens != 2 {
		t.Fatalf("first event %+v", ev)
	}
	fl.kill(dead.role)
	alive := fl.other2(dead)
	q2 := alive.next()
	want := []int32{11, 12, 13, 14, 1, 2}
	if !slices.Equal(q2.InputIDs, want) || *q2.Sampling.MaxNewTokens != 3 || q2.Sampling.MinNewTokens != 1 || q2.BootstrapRoom != nil {
		t.Fatalf("migration: prompt %v max %d min %d room %s", q2.InputIDs, *q2.Sampling.MaxNewTokens, q2.Sampling.MinNewTokens, roomOf(q2))
	}
	alive.emit(q2.RID, 6, []int32{3, 4, 5}, []float64{-0.3, -0.4, -0.5}, wire.FinishLength, 3)
	toks, lps, last, errs := collect(t, events)
	if len(errs) > 0 || !slices.Equal(toks, []int32{3, 4, 5}) || len(lps) != 3 || last.OutputTokens != 5 || last.PromptTokens != 4 {
		t.Fatalf("after the seam: %v %v last %+v errors %v", toks, lps, last, errs)
	}
	if n := attempts(fl.m, FailDied, VerdictMigrate); n != 1 {
		t.Fatalf("died/migrate counted %v times", n)
	}
}

// Prompt logprobs come from the one leg: it is asked for them, and its
// first output carries them beside its first tokens, delivered on the
// client's first event. An engine whose first output has none is a 400
// before any response.
func TestAggregatedPromptLogprobs(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, nil, twoAgg...)
	r := request(2, 0, true)
	r.LogprobStartLen = 1
	type result struct {
		events <-chan tokenapi.Event
		err    error
	}
	done := make(chan result, 1)
	go func() {
		ev, err := fl.d.Generate(context.Background(), r)
		done <- result{ev, err}
	}()
	eng, q := fl.decodeOf("agg-0", "agg-1")
	if !q.ReturnLogprob || q.LogprobStartLen != 1 {
		t.Fatalf("the leg asks return_logprob %v logprob_start_len %d", q.ReturnLogprob, q.LogprobStartLen)
	}
	eng.emitPrompt(q.RID, q.InputIDs, 1, []int32{7}, 1)
	eng.emit(q.RID, 4, []int32{8}, []float64{-0.2}, wire.FinishLength, 2)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	first := event(t, res.events)
	if !slices.Equal(first.TokenIDs, []int32{7}) || len(first.PromptLogprobs) != 3 || first.PromptLogprobs[0] != -0.5 {
		t.Fatalf("first event %+v", first)
	}
	if toks, _, _, errs := collect(t, res.events); len(errs) > 0 || !slices.Equal(toks, []int32{8}) {
		t.Fatalf("rest %v errors %v", toks, errs)
	}

	go func() {
		ev, err := fl.d.Generate(context.Background(), r)
		done <- result{ev, err}
	}()
	eng, q = fl.decodeOf("agg-0", "agg-1")
	eng.emit(q.RID, 4, []int32{7}, nil, "", 1) // no prompt logprobs
	res = <-done
	var fe *front.Error
	if !errors.As(res.err, &fe) || fe.Status != 400 || fe.Code != "prompt_logprobs_unsupported" {
		t.Fatalf("an engine without prompt logprobs: %v", res.err)
	}
}

// Conditional disaggregation, as tsd apply switches it live: under never
// a prompt warms the aggregated engine cache_aware picks; switched to
// conditional, a turn that extends it (uncached within both limits) goes
// to that engine, a fresh long prompt prefill → decode, each counted by
// layout and reason; switched to always, everything goes prefill →
// decode.
func TestConditionalLayoutLive(t *testing.T) {
	t.Parallel()
	mixed := [][2]string{{"agg-0", profiles.KindAggregated}, {"agg-1", profiles.KindAggregated}, {"prefill", profiles.KindPrefill}, {"decode", profiles.KindDecode}}
	var plan profiles.GatewayPlan
	fl := newFakeLane(t, func(g *profiles.GatewayPlan) {
		g.Policy.Aggregated = routing.CacheAware
		g.Disaggregation = profiles.DisaggNever
		g.Conditional = profiles.ConditionalPlan{MaxUncachedTokens: 2048, MaxUncachedRatio: 0.7}
		plan = *g
	}, mixed...)
	layouts := withLayouts(fl)
	long := make([]int32, 300)
	for i := range long {
		long[i] = int32(100 + i)
	}
	ask := func(prompt []int32) (*fakeRank, wire.GenerateRequest, <-chan tokenapi.Event) {
		r := request(1, 0, false)
		r.InputIDs = prompt
		events, err := fl.d.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		eng, q := fl.decodeOf("agg-0", "agg-1", "prefill")
		return eng, q, events
	}
	serve := func(eng *fakeRank, q wire.GenerateRequest, events <-chan tokenapi.Event) {
		if eng.role == "prefill" {
			eng.prefillDone(q)
			eng = fl.ranks["decode"]
			q = eng.next()
		}
		eng.emit(q.RID, len(q.InputIDs), []int32{9}, nil, wire.FinishLength, 1)
		if _, _, last, errs := collect(t, events); len(errs) > 0 || last.Finish == nil {
			t.Fatalf("request on %s: last %+v errors %v", eng.role, last, errs)
		}
	}
	warm, q, ev := ask(long)
	if warm.role == "prefill" {
		t.Fatalf("never sent a request prefill → decode")
	}
	serve(warm, q, ev)

	plan.Disaggregation = profiles.DisaggConditional
	if err := fl.d.Reconfigure(plan, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	turn := append(append([]int32{}, long...), 1, 2, 3, 4, 5)
	eng, q, ev := ask(turn)
	if eng != warm {
		t.Fatalf("a turn that extends a cached prompt went to %s, want %s", eng.role, warm.role)
	}
	serve(eng, q, ev)
	fresh := make([]int32, 3000)
	for i := range fresh {
		fresh[i] = int32(5000 + i)
	}
	eng, q, ev = ask(fresh)
	if eng.role != "prefill" {
		t.Fatalf("a fresh 3000-token prompt went to %s, want prefill → decode", eng.role)
	}
	serve(eng, q, ev)

	plan.Disaggregation = profiles.DisaggAlways
	if err := fl.d.Reconfigure(plan, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	eng, q, ev = ask(turn)
	if eng.role != "prefill" {
		t.Fatalf("always sent a request to %s", eng.role)
	}
	serve(eng, q, ev)
	for _, c := range []struct {
		layout, reason string
	}{
		{routing.LayoutAggregated, routing.LayoutReasonNever},
		{routing.LayoutAggregated, routing.LayoutReasonUncached},
		{routing.LayoutPD, routing.LayoutReasonUncachedToo},
		{routing.LayoutPD, routing.LayoutReasonAlways},
	} {
		if n := testutil.ToFloat64(layouts.WithLabelValues(c.layout, c.reason)); n != 1 {
			t.Errorf("%s/%s counted %v times", c.layout, c.reason, n)
		}
	}
	if l := fl.d.Layouts(); l == nil || l.Disaggregation != routing.DisaggAlways || l.PD != 2 || l.Aggregated != 2 {
		t.Fatalf("split %+v", l)
	}
	for _, r := range fl.ranks {
		r.none()
	}
}

// routing's layout names are the profile's: a plan's setting reaches the
// decision unchanged.
func TestLayoutNamesAgree(t *testing.T) {
	t.Parallel()
	for _, p := range [][2]string{
		{routing.DisaggAlways, profiles.DisaggAlways}, {routing.DisaggNever, profiles.DisaggNever}, {routing.DisaggConditional, profiles.DisaggConditional},
		{routing.LayoutPD, profiles.LayoutPD}, {routing.LayoutAggregated, profiles.LayoutAggregated},
	} {
		if p[0] != p[1] {
			t.Errorf("routing says %q, profiles %q", p[0], p[1])
		}
	}
	if c := layoutConfig(profiles.GatewayPlan{Workers: []profiles.WorkerPlan{{Kind: profiles.KindAggregated}}}); c.Mode != routing.DisaggNever || c.MaxUncachedTokens != 2048 || c.MaxUncachedRatio != 0.7 {
		t.Errorf("an aggregated-only hand-written plan: %+v", c)
	}
	if c := layoutConfig(profiles.GatewayPlan{Workers: []profiles.WorkerPlan{{Kind: profiles.KindAggregated}, {Kind: profiles.KindPrefill}, {Kind: profiles.KindDecode}}}); c.Mode != routing.DisaggAlways {
		t.Errorf("a mixed hand-written plan: %+v", c)
	}
}

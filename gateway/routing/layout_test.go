package routing

import (
	"reflect"
	"testing"
)

// DecideLayout, row per case: each setting, each way conditional goes
// (and why), the limits at their edges, busy prefills, images, and a
// route without a routable worker.
func TestDecideLayout(t *testing.T) {
	t.Parallel()
	cond := LayoutConfig{Mode: DisaggConditional, MaxUncachedTokens: 2048, MaxUncachedRatio: 0.7, PrefillBusy: 1000}
	noBusy := cond
	noBusy.PrefillBusy = 0
	both := func(prompt, uncached int, queued ...int) LayoutFacts {
		return LayoutFacts{Prompt: prompt, Aggregated: true, PD: true, Uncached: uncached, PrefillQueued: queued}
	}
	for _, tc := range []struct {
		name     string
		c        LayoutConfig
		f        LayoutFacts
		layout   string
		reason   string
		counted  bool
		uncached int
		ratio    float64
	}{
		{"always: prefill → decode", LayoutConfig{Mode: DisaggAlways}, both(100, 0), LayoutPD, LayoutReasonAlways, false, 0, 0},
		{"unset is always (a hand-written plan)", LayoutConfig{}, both(100, 0), LayoutPD, LayoutReasonAlways, false, 0, 0},
		{"always even with only aggregated ranks routable", LayoutConfig{Mode: DisaggAlways}, LayoutFacts{Prompt: 10, Aggregated: true}, LayoutPD, LayoutReasonAlways, false, 0, 0},
		{"never: aggregated", LayoutConfig{Mode: DisaggNever}, both(10000, 10000), LayoutAggregated, LayoutReasonNever, false, 0, 0},
		{"never even with nothing routable (the caller waits)", LayoutConfig{Mode: DisaggNever}, LayoutFacts{Prompt: 10}, LayoutAggregated, LayoutReasonNever, false, 0, 0},
		{"conditional, mostly cached: aggregated", cond, both(1000, 150), LayoutAggregated, LayoutReasonUncached, true, 150, 0.15},
		{"conditional, all cached: aggregated", cond, both(1000, 0), LayoutAggregated, LayoutReasonUncached, true, 0, 0},
		{"conditional, at both limits: aggregated", cond, both(2048*10, 2048), LayoutAggregated, LayoutReasonUncached, true, 2048, 0.1},
		{"conditional, ratio exactly at its limit: aggregated", cond, both(1000, 700), LayoutAggregated, LayoutReasonUncached, true, 700, 0.7},
		{"conditional, one token past max_uncached_tokens: pd", cond, both(100000, 2049), LayoutPD, LayoutReasonUncachedToo, true, 2049, 0.02049},
		{"conditional, a short fresh prompt (ratio 1): pd", cond, both(200, 200), LayoutPD, LayoutReasonRatioTooHi, true, 200, 1},
		{"conditional, long and uncached: pd", cond, both(6000, 6000, 10, 20), LayoutPD, LayoutReasonUncachedToo, true, 6000, 1},
		{"conditional, every prefill busy: aggregated", cond, both(6000, 6000, 1001, 5000), LayoutAggregated, LayoutReasonBusy, true, 6000, 1},
		{"conditional, one prefill not busy: pd", cond, both(6000, 6000, 1001, 1000), LayoutPD, LayoutReasonUncachedToo, true, 6000, 1},
		{"conditional, prefill_busy 0: never busy", noBusy, both(6000, 6000, 1<<30), LayoutPD, LayoutReasonUncachedToo, true, 6000, 1},
		{"conditional, no prefill counted: not busy", cond, both(6000, 6000), LayoutPD, LayoutReasonUncachedToo, true, 6000, 1},
		{"conditional, an image: pd (encode first)", cond, LayoutFacts{Prompt: 100, Images: true, Aggregated: true, PD: true}, LayoutPD, LayoutReasonImage, false, 0, 0},
		{"conditional, no aggregated rank: pd", cond, LayoutFacts{Prompt: 100, PD: true}, LayoutPD, LayoutReasonNoAgg, false, 0, 0},
		{"conditional, nothing routable: pd (the caller waits)", cond, LayoutFacts{Prompt: 100}, LayoutPD, LayoutReasonNoAgg, false, 0, 0},
		{"conditional, no prefill or decode rank: aggregated", cond, LayoutFacts{Prompt: 6000, Uncached: 6000, Aggregated: true}, LayoutAggregated, LayoutReasonNoPD, false, 0, 0},
		{"conditional, a negative count is none", cond, both(100, -5), LayoutAggregated, LayoutReasonUncached, true, 0, 0},
	} {
		d := DecideLayout(tc.f, tc.c)
		if d.Layout != tc.layout || d.Reason != tc.reason || d.Counted != tc.counted || d.Uncached != tc.uncached || d.Ratio != tc.ratio {
			t.Errorf("%s: %+v, want %s (%s) counted %v uncached %d ratio %v", tc.name, d, tc.layout, tc.reason, tc.counted, tc.uncached, tc.ratio)
		}
	}
}

// TestDecideLayoutIsPure: the same facts and settings always give the
// same decision, and deciding changes neither.
func TestDecideLayoutIsPure(t *testing.T) {
	t.Parallel()
	c := LayoutConfig{Mode: DisaggConditional, MaxUncachedTokens: 2048, MaxUncachedRatio: 0.7, PrefillBusy: 10}
	f := LayoutFacts{Prompt: 5000, Aggregated: true, PD: true, Uncached: 4000, PrefillQueued: []int{11, 12}}
	keep := LayoutFacts{Prompt: 5000, Aggregated: true, PD: true, Uncached: 4000, PrefillQueued: []int{11, 12}}
	first := DecideLayout(f, c)
	for range 100 {
		if d := DecideLayout(f, c); d != first {
			t.Fatalf("decision changed: %+v then %+v", first, d)
		}
	}
	if !reflect.DeepEqual(f, keep) {
		t.Fatalf("facts changed: %+v", f)
	}
}

// RouteLayout counts the uncached prompt against the aggregated policy's
// own pick, and only the route taken records its decision: a prompt sent
// prefill → decode leaves the aggregated tree and counters as they were,
// so the same prompt again is still uncached there; one sent aggregated
// warms that rank, and the next like it stays aggregated on it.
func TestRouteLayoutRecordsOnlyTheRouteTaken(t *testing.T) {
	t.Parallel()
	s := fixed(RoundRobin, RoundRobin, Config{})
	s.reconfigure(Options{Prefill: RoundRobin, Decode: RoundRobin, Aggregated: CacheAware, Config: Config{}})
	pre, dec := []WorkerView{worker("prefill", 1)}, []WorkerView{worker("decode", 1)}
	agg := []WorkerView{worker("agg-0", 1), worker("agg-1", 1)}
	cond := LayoutConfig{Mode: DisaggConditional, MaxUncachedTokens: 2048, MaxUncachedRatio: 0.7}
	long := prompt(3, 400)
	ask := func(p []int32, c LayoutConfig) Routed {
		return s.routeLayout(Request{Prompt: p}, pre, dec, &layoutAsk{agg: agg, cfg: c})
	}
	for range 2 {
		r := ask(long, cond)
		if r.Layout.Layout != LayoutPD || r.Layout.Reason != LayoutReasonRatioTooHi || r.Layout.Uncached != 400 || r.Pre.Worker != 0 || r.Dec.Worker != 0 || r.Agg.Worker != -1 {
			t.Fatalf("a fresh prompt under conditional: %+v", r)
		}
	}
	if tok, _ := s.pools[PoolAggregated].tree.Stored(); tok != 0 || len(s.pools[PoolAggregated].seq) != 0 {
		t.Fatalf("a prefill → decode route recorded in the aggregated pool: %d tokens, counters %v", tok, s.pools[PoolAggregated].seq)
	}
	r := ask(long, LayoutConfig{Mode: DisaggNever})
	if r.Layout.Layout != LayoutAggregated || r.Agg.Worker < 0 || r.Pre.Worker != -1 {
		t.Fatalf("never: %+v", r)
	}
	warm := agg[r.Agg.Worker].Name
	// The prompt plus a new turn: 400 of its 450 tokens are on warm.
	turn := append(append([]int32{}, long...), prompt(4, 50)...)
	r = ask(turn, cond)
	if r.Layout.Layout != LayoutAggregated || r.Layout.Reason != LayoutReasonUncached || r.Layout.Uncached != 50 || agg[r.Agg.Worker].Name != warm {
		t.Fatalf("a mostly cached prompt: %+v, want aggregated on %s with 50 uncached", r, warm)
	}
	// Every prefill busy: aggregated whatever the prompt.
	busy := cond
	busy.PrefillBusy = 100
	pre[0].Ranks[0].Tokens = 101
	if r = ask(prompt(9, 5000), busy); r.Layout.Layout != LayoutAggregated || r.Layout.Reason != LayoutReasonBusy {
		t.Fatalf("every prefill busy: %+v", r)
	}
	// never with no routable aggregated rank: no choice for the caller to use.
	s2 := fixed(RoundRobin, RoundRobin, Config{})
	if r = s2.routeLayout(Request{Prompt: long}, pre, dec, &layoutAsk{agg: []WorkerView{{Name: "agg-0"}}, cfg: LayoutConfig{Mode: DisaggNever}}); r.Agg.Worker != -1 || r.Agg.Reason != ReasonNone {
		t.Fatalf("never with no aggregated rank: %+v", r)
	}
}

package traffic

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The cached-token share per prefill role and DP rank over the rate
// window, from the prefill legs' cached_tokens; /metrics has the totals
// and the same share.
func TestPrefillCachedShare(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now, Roles: []string{"prefill", "decode"}})
	leg := func(at time.Duration, rank, prompt, cached int) {
		clk.Set(at)
		r := b.Begin("POST", "/v1/chat/completions")
		r.Role("prefill", "prefill")
		r.Role("decode", "decode")
		r.Prefill("prefill", rank, prompt, cached)
		r.End(200)
	}
	// Rank 0: 1000 prompt tokens, 900 cached; rank 1: 1000, 100 cached.
	for i := range 10 {
		at := time.Duration(i) * time.Second
		leg(at, 0, 100, 90)
		leg(at, 1, 100, 10)
	}
	clk.Set(10 * time.Second)
	_, rows := b.Status()
	var pre *struct {
		share float64
		ranks []float64
	}
	for _, r := range rows {
		if r.Role != "prefill" {
			if len(r.Cache) != 0 || r.CachedShare != 0 {
				t.Errorf("%s has cache numbers: %+v", r.Role, r)
			}
			continue
		}
		pre = &struct {
			share float64
			ranks []float64
		}{r.CachedShare, nil}
		for _, c := range r.Cache {
			pre.ranks = append(pre.ranks, c.CachedShare)
		}
		if math.Abs(r.PromptTokS-200) > 1e-9 {
			t.Errorf("prompt tok/s %g, want 200", r.PromptTokS)
		}
	}
	if pre == nil || math.Abs(pre.share-0.5) > 1e-9 || len(pre.ranks) != 2 || math.Abs(pre.ranks[0]-0.9) > 1e-9 || math.Abs(pre.ranks[1]-0.1) > 1e-9 {
		t.Fatalf("prefill shares %+v, want 0.5 and [0.9 0.1]", pre)
	}
	// Out of the window: the share fades, the totals stay.
	clk.Set(60 * time.Second)
	_, rows = b.Status()
	for _, r := range rows {
		if r.Role == "prefill" && (r.PromptTokS != 0 || r.CachedShare != 0) {
			t.Errorf("idle prefill reads %+v", r)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(b)
	want := `
# HELP tsd_gateway_prefill_cached_tokens_total Of those, the tokens the engine found in its prefix cache (cached_tokens), by prefill role and attention-DP rank.
# TYPE tsd_gateway_prefill_cached_tokens_total counter
tsd_gateway_prefill_cached_tokens_total{dp_rank="0",role="prefill"} 900
tsd_gateway_prefill_cached_tokens_total{dp_rank="1",role="prefill"} 100
# HELP tsd_gateway_prefill_prompt_tokens_total Prompt tokens of finished prefill legs, by prefill role and attention-DP rank.
# TYPE tsd_gateway_prefill_prompt_tokens_total counter
tsd_gateway_prefill_prompt_tokens_total{dp_rank="0",role="prefill"} 1000
tsd_gateway_prefill_prompt_tokens_total{dp_rank="1",role="prefill"} 1000
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tsd_gateway_prefill_prompt_tokens_total", "tsd_gateway_prefill_cached_tokens_total"); err != nil {
		t.Fatal(err)
	}
}

// Hostile or odd values never break the account: a cached count above
// the prompt is capped, a nil record and a rank out of range are ignored.
func TestPrefillCachedBounds(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now})
	r := b.Begin("POST", "/generate")
	r.Prefill("prefill", 0, 10, 50)
	r.Prefill("prefill", -1, 10, 5)
	r.Prefill("prefill", maxDPRank, 10, 5)
	r.Prefill("prefill", 1, 0, 0)
	r.End(200)
	var nilRec *Rec
	nilRec.Prefill("prefill", 0, 10, 5)
	b.mu.Lock()
	defer b.mu.Unlock()
	if got := b.caches["prefill"]; len(got) != 1 || got[0].cached != 10 || got[0].prompt != 10 {
		t.Fatalf("caches %+v", got)
	}
}

package traffic

import (
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

func rowOf(t *testing.T, w snapshot.TrafficWindow, role string) snapshot.RoleWindow {
	t.Helper()
	for _, r := range w.Roles {
		if r.Role == role {
			return r
		}
	}
	t.Fatalf("no row %s in %+v", role, w.Roles)
	return snapshot.RoleWindow{}
}

// Pins: the planner's reading — p90s over the window only, prompt tokens
// that came in, queued prompt tokens until the prefill ends (or the first
// token comes, or the leg leaves), prefilled and cached tokens, output,
// and the summed latency whose growth is the mean in flight.
func TestObserve(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now, Roles: []string{"prefill", "decode"}})
	// An old request, outside a 10 s window: 5 s TTFT.
	old := b.Begin("POST", "/v1/chat/completions")
	old.Prompt(100)
	old.Role("prefill", "prefill")
	old.Role("decode", "decode")
	clk.Set(5 * time.Second)
	old.FirstToken()
	old.End(200)

	clk.Set(20 * time.Second)
	var recs []*Rec
	for i := range 10 {
		r := b.Begin("POST", "/v1/chat/completions")
		r.Prompt(1000)
		r.Role("prefill", "prefill")
		r.Role("decode", "decode")
		recs = append(recs, r)
		_ = i
	}
	w := b.Observe(10*time.Second, nil)
	if p := rowOf(t, w, "prefill"); p.Queued != 10_000 || p.InFlight != 10 || p.PromptIn != 100+10_000 {
		t.Fatalf("ten prompts waiting: %+v", p)
	}
	if d := rowOf(t, w, "decode"); d.Queued != 0 {
		t.Fatalf("a decode leg queues no prompt: %+v", d)
	}
	// Five prefills end (half cached), one leg leaves for another try,
	// the rest get their first token.
	for i, r := range recs {
		clk.Set(20*time.Second + time.Duration(100*(i+1))*time.Millisecond)
		switch {
		case i < 5:
			r.Prefill("prefill", 0, 1000, 500)
		case i == 5:
			r.Leave("prefill")
		}
	}
	if p := rowOf(t, b.Observe(10*time.Second, nil), "prefill"); p.Queued != 4000 || p.Prefilled != 5000 || p.Cached != 2500 {
		t.Fatalf("after five prefills and one leg left: %+v", p)
	}
	for i, r := range recs {
		clk.Set(21*time.Second + time.Duration(100*(i+1))*time.Millisecond)
		r.Output("decode", true, 0, 1)
		r.Output("decode", false, 20*time.Millisecond, 1)
		r.End(200)
	}
	w = b.Observe(10*time.Second, nil)
	p, d := rowOf(t, w, "prefill"), rowOf(t, w, "decode")
	if p.Queued != 0 || p.InFlight != 0 || p.Requests != 11 {
		t.Fatalf("every request ended: %+v", p)
	}
	// TTFTs of the window: 1.1 s … 2.0 s (the old 5 s is outside it).
	if p.TTFTN != 10 || p.TTFTp90 != 1900*time.Millisecond {
		t.Errorf("prefill TTFT p90 %v of %d samples, want 1.9s of 10", p.TTFTp90, p.TTFTN)
	}
	if d.ITLN != 10 || d.ITLp90 != 20*time.Millisecond || d.Output != 20 {
		t.Errorf("decode ITL p90 %v of %d, output %d", d.ITLp90, d.ITLN, d.Output)
	}
	// Summed latency: 5 s (the old one) + 1.1 … 2.0 s.
	if want := 5 + 15.5; d.BusySec < want-1e-9 || d.BusySec > want+1e-9 {
		t.Errorf("busy %v s, want %v", d.BusySec, want)
	}
	g := b.Observe(10*time.Second, map[string][]string{"pd": {"prefill", "decode"}, "none": {"gone"}})
	if len(g.Groups) != 2 || g.Groups[1].Role != "pd" || g.Groups[1].TTFTN != 20 || g.Groups[1].ITLN != 10 || g.Groups[0].TTFTN != 0 {
		t.Errorf("groups: the union of their rows' samples: %+v", g.Groups)
	}
	if all := b.Observe(time.Hour, nil); rowOf(t, all, "prefill").TTFTN != 11 || all.Window != SampleAge {
		t.Errorf("a window past SampleAge reads SampleAge: %+v", all)
	}
}

// Pins: a retried leg on the same role queues its prompt again, and a
// request that ends without a first token leaves nothing queued.
func TestObserveQueuedRetryAndFailure(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now})
	r := b.Begin("POST", "/generate")
	r.Prompt(300)
	r.Role("aggregated", "agg")
	r.Leave("agg")
	if q := rowOf(t, b.Observe(time.Minute, nil), "agg").Queued; q != 0 {
		t.Fatalf("after the leg left: queued %d", q)
	}
	r.Role("aggregated", "agg")
	if q := rowOf(t, b.Observe(time.Minute, nil), "agg").Queued; q != 300 {
		t.Fatalf("the retry: queued %d, want 300", q)
	}
	r.End(503)
	if row := rowOf(t, b.Observe(time.Minute, nil), "agg"); row.Queued != 0 || row.PromptIn != 300 {
		t.Fatalf("after the failure: %+v", row)
	}
}

// Pins: an aggregated engine streams its requests' tokens itself, so its
// row gets their tokens and inter-token latency, as a decode's does.
func TestObserveAggregatedStreams(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now})
	r := b.Begin("POST", "/generate")
	r.Prompt(100)
	r.Role("aggregated", "agg-0")
	clk.Set(time.Second)
	r.Output("agg-0", true, 0, 1)
	clk.Set(time.Second + 30*time.Millisecond)
	r.Output("agg-0", false, 30*time.Millisecond, 3)
	r.End(200)
	row := rowOf(t, b.Observe(time.Minute, nil), "agg-0")
	if row.Output != 4 || row.ITLN != 1 || row.ITLp90 != 10*time.Millisecond || row.TTFTN != 1 {
		t.Fatalf("aggregated row: %+v", row)
	}
}

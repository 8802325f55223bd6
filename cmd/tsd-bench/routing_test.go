package main

import (
	"strings"
	"testing"
	"time"
)

// The workload is upstream's shape: groups × prompts, each a group's
// system prompt then its own question, shuffled the same way every run;
// the hot one sends half to group 0.
func TestGSPWorkload(t *testing.T) {
	s := defaultRoutingSetup()
	for _, hot := range []bool{false, true} {
		a, b := gspWorkload(s, hot), gspWorkload(s, hot)
		if len(a) != s.groups*s.perGroup {
			t.Fatalf("%d requests", len(a))
		}
		perGroup := map[int]int{}
		for i, r := range a {
			perGroup[r.group]++
			if len(r.prompt) != s.sysLen+s.qLen || r.id != b[i].id || r.group != b[i].group || r.prompt[s.sysLen] != b[i].prompt[s.sysLen] {
				t.Fatalf("request %d differs between runs or has %d tokens", i, len(r.prompt))
			}
		}
		if !hot && (len(perGroup) != s.groups || perGroup[0] != s.perGroup) {
			t.Fatalf("uniform: %v", perGroup)
		}
		if hot && perGroup[0] != len(a)/2 {
			t.Fatalf("hot: group 0 has %d of %d", perGroup[0], len(a))
		}
	}
	if s.capacity*s.ranks*2 != s.workingSet() {
		t.Fatalf("capacity %d × %d ranks is not half of %d", s.capacity, s.ranks, s.workingSet())
	}
}

// The oracle's cache behaves as the engine's: whole pages, never the
// prompt's last token, least recently used leaves out first, never more
// than its capacity.
func TestPageCache(t *testing.T) {
	seq := func(head int32, n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = head + int32(i)
		}
		return p
	}
	c := newPageCache(4, 16) // four pages
	a := seq(100, 9)         // two whole pages and a token
	if got := c.serve(a); got != 0 {
		t.Fatalf("cold: %d cached", got)
	}
	if got := c.match(a); got != 8 {
		t.Fatalf("repeat matches %d, want 8 (two pages)", got)
	}
	if got := c.match(a[:8]); got != 4 {
		t.Fatalf("an 8-token prompt reuses %d, want 4 (never its last token)", got)
	}
	b := seq(500, 8)
	c.serve(b) // four pages now: a's two, b's two
	c.serve(a) // a used again: b is the least recently used
	c.serve(seq(900, 8))
	if c.match(a) != 8 || c.match(b) != 4 && c.match(b) != 0 || len(c.pages) > 4 {
		t.Fatalf("after eviction: a %d, b %d, %d pages", c.match(a), c.match(b), len(c.pages))
	}
	if c.match(b) != 0 {
		t.Fatalf("b should have been evicted leaf first then whole: %d", c.match(b))
	}
}

// With room for everything, the oracle misses only the first request of
// each group (what any router that keeps a group on one rank gets); with
// the bench's capacity it does no better than that and no worse than
// round robin would.
func TestOracle(t *testing.T) {
	s := defaultRoutingSetup()
	reqs := gspWorkload(s, false)
	big := s
	big.capacity = s.workingSet()
	all := oracle(big, reqs)
	perHit := float64(s.sysLen) / float64(s.sysLen+s.qLen)
	want := perHit * float64(len(reqs)-s.groups) / float64(len(reqs))
	if all.share < want-0.001 || all.share > want+0.001 {
		t.Fatalf("unbounded oracle share %.4f, want %.4f", all.share, want)
	}
	got := oracle(s, reqs)
	if got.share <= 0.3 || got.share > all.share {
		t.Fatalf("oracle share %.3f with half the working set (unbounded %.3f)", got.share, all.share)
	}
	hot := oracle(s, gspWorkload(s, true))
	t.Logf("oracle cached share: %.3f (unbounded %.3f), hot group %.3f, ranks %v / %v", got.share, all.share, hot.share, got.perRank, hot.perRank)
}

func TestRenderRouting(t *testing.T) {
	run := func(policy string, share float64, ttft time.Duration, ranks ...int) routingRun {
		return routingRun{policy: policy, share: share, ttftP50: ttft, perRank: ranks, reasons: map[string]int{"kv_hit": 3}}
	}
	r := routingResult{setup: defaultRoutingSetup(), oracle: oracleResult{share: 0.8},
		kv: run("kv_aware", 0.78, 5*time.Millisecond, 1, 1, 1, 1), cache: run("cache_aware", 0.74, 6*time.Millisecond),
		rr: run("round_robin", 0.2, 40*time.Millisecond), kvHot: run("kv_aware", 0.7, 0, 10, 10, 12, 8), caHot: run("cache_aware", 0.7, 0, 30, 4, 3, 3)}
	md := renderRouting(r)
	for _, want := range []string{"| cached share, kv_aware | 0.780 (0.97 × oracle) | ≥ 0.9 × oracle | pass |",
		"| cached share, cache_aware | 0.740 (0.95 × kv_aware) | ≥ 0.85 × kv_aware (within 15%) | pass |",
		"| TTFT p50: kv_aware / round_robin | 5.0 / 40.0 ms = 0.12 | ≤ 1/3 | pass |",
		"| hot group, kv_aware: busiest rank / mean | 1.20 ([10 10 12 8]) | ≤ 1.5 | pass |",
		"kv_aware kv_hit 3;"} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
	r.byConc = []concRow{{conc: 1, kv: run("kv_aware", 0.77, 0), cache: run("cache_aware", 0.76, 0)}, {conc: 16, kv: run("kv_aware", 0.70, 0), cache: run("cache_aware", 0.71, 0)}}
	r.small, r.smallOracle = concRow{conc: 3, kv: run("kv_aware", 0.79, 0), cache: run("cache_aware", 0.79, 0)}, oracleResult{share: 0.81}
	md = renderRouting(r)
	for _, want := range []string{"| 1 | 0.770 | 0.760 | 0.96 | pass |", "| 16 | 0.700 | 0.710 | 0.87 | **FAIL** |", "| 3 (6 groups × 8) | 0.790 | 0.790 | 0.98 | pass |"} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
	r.byConc, r.small = nil, concRow{}
	r.kvHot.perRank = []int{30, 4, 3, 3}
	r.kv.share = 0.5
	md = renderRouting(r)
	if n := strings.Count(md, "**FAIL**"); n != 2 { // kv_aware below the oracle, and the hot group
		t.Errorf("%d failures shown, want 2:\n%s", n, md)
	}
	if !strings.Contains(md, "| hot group, kv_aware: busiest rank / mean | 3.00 ([30 4 3 3]) | ≤ 1.5 | **FAIL** |") {
		t.Errorf("hot failure not shown:\n%s", md)
	}
}

package main

import (
	"strings"
	"testing"
	"time"
)

// The overload section's rows and verdicts, from a result.
func TestRenderOverload(t *testing.T) {
	r := overloadResult{setup: defaultOverloadSetup(), unloadedP90: 40 * time.Millisecond, loadedP90: 80 * time.Millisecond, unloadedN: 100, loadedN: 1200,
		sent: 6000, served: 2600, lowServed: 1400, shedArrival: 3000, shedArrivalRA: 3000, shedArrivalMax: 12 * time.Millisecond,
		shedWaited: 400, shedWaitedRA: 400, shedWaitedMax: 2 * time.Second, longest: 2 * time.Second, rssWarm: 50 << 20, rssEnd: 52 << 20,
		codes: map[string]int{"queue_full": 3000, "queue_displaced": 400}}
	md := renderOverload(r)
	for _, want := range []string{"| high class TTFT p90, at 2× | 80.0 ms = 2.00 × unloaded (1200 requests; 0 shed) | ≤ 2.5 × unloaded | pass |",
		"| shed at arrival: slowest answer | 12.0 ms (3000 requests, 3000 with Retry-After) | ≤ 50 ms, every one with Retry-After | pass |",
		"| tsd RSS after 10s → at the end | 50 → 52 MiB (+2 MiB) | ≤ +10% + 16 MiB | pass |", "Simulated figures"} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
	if strings.Contains(md, "FAIL") {
		t.Errorf("a failure in a passing run:\n%s", md)
	}
	r.loadedP90, r.shedArrivalRA, r.rssEnd = 120*time.Millisecond, 2999, 200<<20
	if n := strings.Count(renderOverload(r), "**FAIL**"); n != 3 {
		t.Errorf("%d failures shown, want 3 (TTFT, Retry-After, memory)", n)
	}
}

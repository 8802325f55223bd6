package gateway

import (
	"context"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// A decode that hangs but keeps its connection (SIGSTOP) drew every
// client under round_robin until the stall verdict (30 s): throughput
// fell to a tenth. Its outputs stop while it has work, so the lane calls
// it quiet within half a second and routing leaves it out while the
// other decode is routable: requests sent from then on all go to the
// other decode and finish with its ordinary latency, long before any
// stall verdict.
func TestQuietDecodeAvoidedUnderRoundRobin(t *testing.T) {
	t.Parallel()
	const (
		stall  = 30 * time.Second // the default: nothing below comes from a stall verdict
		tokens = 20
	)
	paced := []string{"--fake-tokens-per-s", "100"}
	c := newClusterWith(t, Options{StallTimeout: stall}, "tsd", profiles.ModePD, func(p *profiles.Plan) {
		p.Gateway.Policy.Decode = "round_robin"
	}, role{name: "prefill", kind: profiles.KindPrefill},
		role{name: "decode-0", kind: profiles.KindDecode, extra: paced}, role{name: "decode-1", kind: profiles.KindDecode, extra: paced})
	c.waitRegistered("prefill", "decode-0", "decode-1")

	// Requests that start on decode-1 before its silence counts are stuck
	// until the stall verdict: they are sent with a context the test
	// cancels at its end.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	hc := &http.Client{}
	// One request on each decode in flight, then decode-1 stops.
	for i := range 2 {
		first := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.generateNotify(ctx, hc, genBody(int64(100+i), 400, true), first)
		}()
		select {
		case <-first:
		case <-time.After(20 * time.Second):
			t.Fatalf("request %d never streamed", i)
		}
	}
	if d, _ := c.g.InFlight("decode-1"); d != 1 {
		t.Fatalf("decode-1 carries %d requests, want 1", d)
	}
	c.mu.Lock()
	pid := c.procs["decode-1"].Process.Pid
	c.mu.Unlock()
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGCONT) })
	// Until decode-1 is quiet (its floor, 500 ms, and a margin) requests
	// may still reach it: wait that out on a fixed clock, then send.
	time.Sleep(time.Second) // the quiet floor plus slack: the rule is clocked, not an event

	type result struct {
		r   genResult
		dur time.Duration
	}
	const n = 24
	results := make(chan result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			start := time.Now()
			r := c.generate(rctx, hc, genBody(int64(i), tokens, false))
			results <- result{r, time.Since(start)}
		}()
		time.Sleep(25 * time.Millisecond) // an open-loop arrival rate
	}
	var worst time.Duration
	for range n {
		res := <-results
		if res.r.err != "" || len(res.r.ids) != tokens {
			t.Fatalf("a request sent %s after decode-1 stopped: %+v", time.Since(stopped), res.r)
		}
		worst = max(worst, res.dur)
	}
	if el := time.Since(stopped); el > stall/2 {
		t.Fatalf("the requests took until %s after the stop, near the stall verdict", el)
	}
	if d, _ := c.g.InFlight("decode-1"); d != 1 {
		t.Fatalf("decode-1 carries %d requests, want only the one sent before it stopped", d)
	}
	t.Logf("%d requests after the stop, slowest %s", n, worst)
}

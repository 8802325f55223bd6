package gateway

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/profiles"
)

// Regression for the 1P(dp 2)+2D kill test that killed tsd after three
// SIGKILLs: concurrent clients keep sending while the prefill and a
// decode are killed and restarted; every request is accounted for
// (finished with the right tokens, or a clean error), none hangs, nothing
// panics, and nothing stays in flight.
func TestKillsUnderLoadAccounting(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{QueueTimeout: 20 * time.Second}, role{name: "prefill", kind: profiles.KindPrefill, dp: 2},
		role{name: "decode-0", kind: profiles.KindDecode}, role{name: "decode-1", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode-0", "decode-1")
	const clients = 24
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	ctx, stop := context.WithCancel(context.Background())
	var sent, ok, failed atomic.Int64
	progress := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := int64(i * 10000); ctx.Err() == nil; seed++ {
				sent.Add(1)
				rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				res := c.generate(rctx, hc, genBody(seed, 4, seed%2 == 0))
				cancel()
				switch {
				case res.err == "" && equalIDs(res.ids, expected(seed, 4)):
					ok.Add(1)
					select {
					case progress <- struct{}{}:
					default:
					}
				case res.err != "":
					failed.Add(1)
				default:
					t.Errorf("request %d: wrong answer %+v", seed, res)
				}
			}
		}()
	}
	served := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-progress:
			case <-time.After(30 * time.Second):
				t.Fatalf("no request finished for 30 s (sent %d ok %d failed %d)", sent.Load(), ok.Load(), failed.Load())
			}
		}
	}
	served(5)
	for _, victim := range []string{"prefill", "decode-1", "prefill", "decode-0"} {
		c.kill(victim)
		c.start(victim)
		c.waitRegistered(victim)
		served(5)
	}
	stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("clients still waiting: sent %d ok %d failed %d", sent.Load(), ok.Load(), failed.Load())
	}
	if s, o, f := sent.Load(), ok.Load(), failed.Load(); s != o+f {
		t.Fatalf("sent %d != ok %d + failed %d", s, o, f)
	}
	t.Logf("sent %d ok %d failed %d", sent.Load(), ok.Load(), failed.Load())
	if n := testutil.CollectAndCount(c.g.metrics.panics); n != 0 {
		t.Fatalf("%d panic series", n)
	}
	waitCond(t, "nothing in flight", func() bool {
		for _, r := range []string{"prefill", "decode-0", "decode-1"} {
			if n, _ := c.g.InFlight(r); n != 0 {
				return false
			}
		}
		return c.g.Status().InFlight == 0
	})
}

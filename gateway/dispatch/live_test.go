package dispatch

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// TestReconfigure: tsd apply's settings reach new requests (policies,
// retry, queue timeout), breakers keep their state under new knobs, and
// can be switched off and on again.
func TestReconfigure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gw := profiles.GatewayPlan{Mode: profiles.ModePD, Policy: profiles.PolicyPlan{Prefill: routing.RoundRobin, Decode: routing.RoundRobin},
		CircuitBreaker: profiles.CircuitBreakerPlan{FailureThreshold: 3, SuccessThreshold: 1, TimeoutDurationSecs: 30, WindowDurationSecs: 60}}
	for i, r := range [][2]string{{"prefill", profiles.KindPrefill}, {"decode", profiles.KindDecode}} {
		gw.Workers = append(gw.Workers, profiles.WorkerPlan{Role: r[0], Kind: r[1], DP: 1, URL: "ipc://" + filepath.Join(dir, string(rune('a'+i))), Handshake: "tcp://127.0.0.1:0"})
	}
	l, err := lane.New(gw.Workers, lane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	shut := make(chan struct{})
	t.Cleanup(func() { close(shut) })
	d := New(Config{Plan: &profiles.Plan{Gateway: gw}, Lane: l, Metrics: testMetrics(), Shutdown: shut,
		Options: Options{QueueTimeout: time.Second}})

	// A failure on decode, then new knobs: the run of failures stays.
	d.breakers.report(outcome{role: "decode", ev: BreakerFailure}, shut)
	waitFailures(t, d, "decode", 1)
	next := gw
	next.Policy.Prefill = "random"
	next.Retry.MaxRetries = 7
	next.CircuitBreaker.TimeoutDurationSecs = 5
	if err := d.Reconfigure(next, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	live := d.live.config()
	if live.prefillPolicy != "random" || live.retry.MaxAttempts != 7 || live.queueTimeout != 2*time.Second {
		t.Fatalf("live settings %+v", live)
	}
	if v := d.breakers.current(); v.cfg.Timeout != 5*time.Second || v.entries["decode"].b.Failures != 1 {
		t.Fatalf("breaker view after new knobs: cfg %+v, decode %+v", v.cfg, v.entries["decode"])
	}

	off := next
	off.CircuitBreaker.FailureThreshold = 0
	if err := d.Reconfigure(off, time.Second); err != nil {
		t.Fatal(err)
	}
	if d.breakers.on() || d.Breakers() != nil || !d.breakers.current().allows("decode") {
		t.Fatal("breakers switched off still answer")
	}
	if err := d.Reconfigure(next, time.Second); err != nil {
		t.Fatal(err)
	}
	st := d.Breakers()
	if len(st) != 2 || st[0].State != snapshot.BreakerClosed || st[1].Failures != 0 {
		t.Fatalf("breakers switched on again: %+v", st)
	}
}

package dispatch

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/profiles"
)

func testMetrics() *Metrics {
	h := func(name string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name})
	}
	return &Metrics{
		Requests:    prometheus.NewCounter(prometheus.CounterOpts{Name: "requests"}),
		ReqErrors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "errors"}, []string{"error_type"}),
		ReqDuration: h("duration"), TTFT: h("ttft"), RouterTTFT: h("router_ttft"), ITL: h("itl"),
		InTokens:           prometheus.NewCounter(prometheus.CounterOpts{Name: "in"}),
		OutTokens:          prometheus.NewCounter(prometheus.CounterOpts{Name: "out"}),
		Finishes:           prometheus.NewCounterVec(prometheus.CounterOpts{Name: "finishes"}, []string{"reason"}),
		Selection:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "selection"}, []string{"worker", "worker_type", "identity"}),
		Queued:             prometheus.NewCounterVec(prometheus.CounterOpts{Name: "queued"}, []string{"outcome"}),
		Attempts:           prometheus.NewCounterVec(prometheus.CounterOpts{Name: "attempts"}, []string{"failure", "verdict"}),
		BreakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cb_transitions"}, []string{"worker", "from", "to"}),
	}
}

// newTestDispatcher builds a Dispatcher over an unbound lane of one
// prefill and one decode worker: no rank ever registers, so every request
// that passes admission finds no routable worker.
func newTestDispatcher(t *testing.T, opts Options, onPanic func(string, any, []byte)) (*Dispatcher, *Metrics) {
	t.Helper()
	dir := t.TempDir()
	plan := &profiles.Plan{Name: "t", Gateway: profiles.GatewayPlan{Mode: profiles.ModePD, Workers: []profiles.WorkerPlan{
		{Role: "prefill", Kind: profiles.KindPrefill, DP: 1, URL: "ipc://" + dir + "/p"},
		{Role: "decode", Kind: profiles.KindDecode, DP: 1, URL: "ipc://" + dir + "/d"},
	}}}
	l, err := lane.New(plan.Gateway.Workers, lane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	m := testMetrics()
	return New(Config{Plan: plan, Lane: l, Metrics: m, Options: opts, Shutdown: make(chan struct{}), OnPanic: onPanic}), m
}

// The Dispatcher stands alone behind tokenapi.Engine: it is built from a lane,
// metrics and options, counts its refusals by error type, and its recover
// boundary reports a panic through OnPanic and fails only that request.
func TestDispatcherStandsAlone(t *testing.T) {
	t.Parallel()
	var panics atomic.Int32
	var where atomic.Value
	d, m := newTestDispatcher(t, Options{QueueTimeout: -1, HookPick: func() {
		if panics.Load() == 0 {
			panic("injected")
		}
	}}, func(w string, _ any, _ []byte) { where.Store(w); panics.Add(1) })
	if d.Ready() {
		t.Fatal("ready with no registered rank")
	}
	if h := d.Health(); h != (Health{Total: 2}) {
		t.Fatalf("health %+v", h)
	}
	if d.EPDMode() || d.ImageSupport() == nil {
		t.Fatal("a pd plan routes images")
	}

	// The pick panics once: a 500, reported at "dispatch", nothing left in flight.
	_, err := d.Generate(context.Background(), tokenapi.Request{InputIDs: []int32{1, 2}, LogprobStartLen: -1})
	var fe *front.Error
	if !errors.As(err, &fe) || fe.Status != http.StatusInternalServerError || fe.Code != "internal_error" || !strings.Contains(fe.Message, "injected") {
		t.Fatalf("panic: %v", err)
	}
	if panics.Load() != 1 || where.Load() != "dispatch" || testutil.ToFloat64(m.ReqErrors.WithLabelValues("panic")) != 1 {
		t.Fatalf("panic reported %d times at %v", panics.Load(), where.Load())
	}

	// Then no worker is routable and QueueTimeout < 0: a 503 at once.
	_, err = d.Generate(context.Background(), tokenapi.Request{InputIDs: []int32{1, 2}, LogprobStartLen: -1})
	if !errors.As(err, &fe) || fe.Status != http.StatusServiceUnavailable || fe.Code != "no_prefill_worker" {
		t.Fatalf("no workers: %v", err)
	}
	if n := testutil.ToFloat64(m.ReqErrors.WithLabelValues("no_workers")); n != 1 {
		t.Fatalf("no_workers counted %v times", n)
	}

	// Bad input is refused before any pick.
	_, err = d.Generate(context.Background(), tokenapi.Request{LogprobStartLen: -1})
	if !errors.As(err, &fe) || fe.Status != http.StatusBadRequest || fe.Param != "input_ids" {
		t.Fatalf("empty prompt: %v", err)
	}
	if n := testutil.ToFloat64(m.ReqErrors.WithLabelValues("invalid_request")); n != 1 {
		t.Fatalf("invalid_request counted %v times", n)
	}
	if d.InFlight() != 0 || testutil.ToFloat64(m.Requests) != 0 {
		t.Fatalf("in flight %d, dispatched %v", d.InFlight(), testutil.ToFloat64(m.Requests))
	}
}

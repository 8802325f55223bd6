package dispatch

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// gateway.queue_timeout bounds the request, not each attempt: an attempt
// whose request has spent its wait already does not wait again for a
// routable worker (a request once waited over 60 s through three
// attempts while the only decode restarted). QueueTimeout is an hour
// here: were the wait the attempt's, this test would hang.
func TestQueueDeadlineIsTheRequests(t *testing.T) {
	t.Parallel()
	d, m := newTestDispatcher(t, Options{QueueTimeout: time.Hour}, nil)
	ctx := context.WithValue(context.Background(), queueDeadlineKey{}, time.Now().Add(-time.Second))
	_, err := d.routes.pickQueued(ctx, &tokenapi.Request{InputIDs: []int32{1, 2}, LogprobStartLen: -1}, 7, avoid{})
	var fe *front.Error
	if !errors.As(err, &fe) || fe.Status != http.StatusServiceUnavailable || fe.Code != "no_prefill_worker" || !strings.Contains(fe.Message, "waited 1h0m0s") {
		t.Fatalf("an attempt past the request's deadline: %v", err)
	}
	if n := testutil.ToFloat64(m.Queued.WithLabelValues("timeout")); n != 1 {
		t.Fatalf("timeouts counted %v", n)
	}
}

// A request's priority class: its field, else SMG's header, else its
// key's; never above its key's (ClassOf, pure).
func TestClassOf(t *testing.T) {
	t.Parallel()
	p := func(v int) *int { return &v }
	for _, c := range []struct {
		name     string
		priority *int
		caller   front.Caller
		want     int
	}{
		{"nothing: default", nil, front.Caller{}, 0},
		{"the field", p(5), front.Caller{}, 5},
		{"the header", nil, front.Caller{Header: "interactive", HasHeader: true}, 1},
		{"an unknown header value is default", nil, front.Caller{Header: "urgent", HasHeader: true}, 0},
		{"the field over the header", p(-3), front.Caller{Header: "system", HasHeader: true}, -3},
		{"the key's class", nil, front.Caller{Tenant: "a", Priority: 2, Keyed: true}, 2},
		{"a key's class is a ceiling", p(50), front.Caller{Tenant: "a", Priority: 1, Keyed: true}, 1},
		{"a header above the key's class", nil, front.Caller{Tenant: "a", Priority: -1, Keyed: true, Header: "system", HasHeader: true}, -1},
		{"lower than the key's is taken", p(-5), front.Caller{Tenant: "a", Priority: 1, Keyed: true}, -5},
	} {
		if got := ClassOf(&tokenapi.Request{Priority: c.priority}, c.caller); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/reqtime"
)

// Where each request's time went, and the requests turned away: the
// series an operator alerts on beside the traffic account's
// (docs/metrics.md). SMG's names where SMG has the series.
type phaseMetrics struct {
	// stage is one histogram per phase of a request's time
	// (gateway/reqtime's timeline), under SMG's per-stage family.
	stage [reqtime.NumPhases]prometheus.Observer
	// SMG's PD series for the phases only a gateway that sees both legs
	// can measure, and its generation time (first token → last).
	pdPrefill, pdKV, generation prometheus.Histogram
	// shedVec counts requests shed for want of room, by reason.
	shedVec *prometheus.CounterVec
	// traceErrors counts failed exports of traces (gateway/tracing).
	traceErrors prometheus.Counter
}

// stageBuckets span a routing decision (tens of µs) to a long decode
// (minutes).
var stageBuckets = []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// shedReasons are the reasons smg_admission_queue_rejected_total starts
// with (at 0, so an alert on them has a series before the first shed);
// admission's own reasons join as they happen.
var shedReasons = []string{front.ShedTimeout, front.ShedBodyBudget}

func newPhaseMetrics(reg prometheus.Registerer) (phaseMetrics, error) {
	var m phaseMetrics
	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "smg_router_stage_duration_seconds",
		Help: "Where a request's time went, by stage: queued, tokenize, route, encode, prefill, kv_transfer, write, decode (docs/protocol.md §11.10).", Buckets: stageBuckets},
		[]string{"stage"})
	for p := reqtime.Phase(0); p < reqtime.NumPhases; p++ {
		m.stage[p] = stages.WithLabelValues(p.String())
	}
	m.pdPrefill = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "smg_pd_prefill_duration_seconds",
		Help: "Prefill leg of a PD request: legs sent (EPD: images encoded) to the prefill's end.", Buckets: stageBuckets})
	m.pdKV = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "smg_pd_kv_transfer_duration_seconds",
		Help: "KV transfer of a PD request: the prefill's end to the decode's first token.", Buckets: stageBuckets})
	m.generation = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "smg_router_generation_duration_seconds",
		Help: "Generation time: first output token to last.", Buckets: latencyBuckets})
	m.shedVec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "smg_admission_queue_rejected_total",
		Help: "Requests shed at once for want of room (429 or 503 with Retry-After), by reason."}, []string{"reason"})
	for _, r := range shedReasons {
		m.shedVec.WithLabelValues(r)
	}
	m.traceErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "tsd_gateway_trace_export_errors_total",
		Help: "Exports of request traces to gateway.tracing.endpoint that failed (their spans are dropped)."})
	for _, c := range []prometheus.Collector{stages, m.pdPrefill, m.pdKV, m.generation, m.shedVec, m.traceErrors} {
		if err := reg.Register(c); err != nil {
			return m, err
		}
	}
	return m, nil
}

// phases observes a request's measured phases, once, when it ended.
func (m *phaseMetrics) phases(tl reqtime.Timeline) {
	for p := reqtime.Phase(0); p < reqtime.NumPhases; p++ {
		if d, ok := tl.Duration(p); ok {
			m.stage[p].Observe(d.Seconds())
		}
	}
	if !tl.Merged {
		if d, ok := tl.Duration(reqtime.Prefill); ok {
			m.pdPrefill.Observe(d.Seconds())
		}
	}
	if d, ok := tl.Duration(reqtime.KV); ok {
		m.pdKV.Observe(d.Seconds())
	}
	if d, ok := tl.Duration(reqtime.Decode); ok {
		m.generation.Observe(d.Seconds())
	}
}

// shed counts one request turned away for reason: the front door's
// (front.ShedTimeout, front.ShedBodyBudget) and the admission queue's.
func (m *phaseMetrics) shed(reason string) { m.shedVec.WithLabelValues(reason).Inc() }

package gateway

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway/dispatch"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/snapshot"
)

// metrics uses SMG's names where docs/protocol.md §11.7 lists them, so
// dashboards built for SMG read tsd too; tsd-only series start with tsd_.
type metrics struct {
	g *Gateway

	httpRequests  *prometheus.CounterVec
	httpResponses *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	requests      prometheus.Counter
	reqErrors     *prometheus.CounterVec
	reqDuration   prometheus.Histogram
	ttft          prometheus.Histogram
	routerTTFT    prometheus.Histogram
	itl           prometheus.Histogram
	tokens        *prometheus.CounterVec
	inTokens      prometheus.Counter
	outTokens     prometheus.Counter
	finishes      *prometheus.CounterVec
	selection     *prometheus.CounterVec
	panics        *prometheus.CounterVec
	events        *prometheus.CounterVec
	queued        *prometheus.CounterVec
	routes        *prometheus.CounterVec
	layouts       *prometheus.CounterVec
	attempts      *prometheus.CounterVec
	cbTransitions *prometheus.CounterVec
	// The admission queue's per-observation series (gateway/admission;
	// the rest are read at scrape time, admission.go).
	tenantRequests *prometheus.CounterVec
	tenantTokens   *prometheus.CounterVec
	queueWait      *prometheus.HistogramVec

	// traffic is the one account of request outcomes, so the dashboard and
	// /metrics never disagree: its series are on /metrics and Status reads
	// the same counters.
	traffic *traffic.Book

	// gwAdded is the gateway's own share of each stream's time to first
	// token (gateway/reqtime: accept → legs sent, first token → first
	// byte), the access line's gw_us.
	gwAdded prometheus.Histogram

	phaseMetrics // each request's phases, sheds, trace exports (phasemetrics.go)
}

// gwAddedBuckets resolve the gateway's share of TTFT from 25 µs (a
// tokenizer-cache hit) to 100 ms (a request queued behind others).
var gwAddedBuckets = []float64{25e-6, 50e-6, 75e-6, 100e-6, 150e-6, 200e-6, 300e-6, 500e-6, 750e-6, .001, .002, .005, .01, .025, .1}

var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer, g *Gateway) (*metrics, error) {
	m := &metrics{
		g: g,
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_http_requests_total", Help: "HTTP requests received, by method and route."}, []string{"method", "path"}),
		httpResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_http_responses_total", Help: "HTTP responses sent, by method, route and status."}, []string{"method", "path", "status_code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "smg_http_request_duration_seconds", Help: "HTTP request duration.", Buckets: latencyBuckets}, []string{"method", "path"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smg_router_requests_total", Help: "Generations dispatched prefill → decode."}),
		reqErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_router_request_errors_total", Help: "Generations that failed or were refused, by error type."}, []string{"error_type"}),
		reqDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "smg_router_request_duration_seconds", Help: "Generation duration, dispatch to finish.", Buckets: latencyBuckets}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "smg_pd_ttft_seconds", Help: "Time from prefill dispatch to the first decode token.", Buckets: latencyBuckets}),
		routerTTFT: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "smg_router_ttft_seconds", Help: "Time to first token (PD: from prefill dispatch).", Buckets: latencyBuckets}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "smg_router_tpot_seconds", Help: "Inter-token latency of the decode stream (per token).", Buckets: latencyBuckets}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_router_tokens_total", Help: "Tokens through the gateway (input: prompt, output: generated)."}, []string{"token_type"}),
		finishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tsd_gateway_finish_total", Help: "Finished generations by finish reason."}, []string{"reason"}),
		selection: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smg_worker_selection_total", Help: "Worker choices, by worker, type and rank."}, []string{"worker", "worker_type", "identity"}),
	}
	m.panics = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsd_gateway_panics_total", Help: "Panics caught at the gateway's recover boundaries (the request failed, the daemon lived), by site."}, []string{"where"})
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsd_gateway_events_total", Help: "Gateway verdicts reported as events (panic, stall, readmit), by kind."}, []string{"kind"})
	m.queued = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsd_gateway_queued_total", Help: "Requests that waited for a routable worker, by outcome (routed, timeout, client_gone)."}, []string{"outcome"})
	m.routes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsd_gateway_route_decisions_total", Help: "Routing decisions by role kind, policy and reason (cache_hit, cache_miss, balance, kv_hit, fallback_cache_hit, sticky, ...; docs/profiles.md \"Routing policies\")."},
		[]string{"kind", "policy", "reason"})
	m.layouts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsd_gateway_layout_routes_total", Help: "Requests routed by layout (pd: prefill → decode; aggregated: one leg on an aggregated engine) and the reason (always, never, uncached, prefill_busy, uncached_tokens, uncached_ratio, image, no_aggregated_worker, no_pd_worker; docs/protocol.md §11.12), one per attempt."},
		[]string{"layout", "reason"})
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsd_gateway_attempt_failures_total", Help: "Failed attempts of requests, by what failed (refused, died, stalled, ended, aborted, encode, fatal) and what followed (retry, migrate, fail, continue)."}, []string{"failure", "verdict"})
	m.cbTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smg_worker_cb_transitions_total", Help: "Circuit breaker state transitions, by worker, from and to."}, []string{"worker", "from", "to"})
	m.tenantRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsd_gateway_tenant_requests_total", Help: "Generation requests by API key (gateway.api_keys name) and outcome (admitted, or why the admission queue shed it)."}, []string{"tenant", "outcome"})
	m.tenantTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tsd_gateway_tenant_prompt_tokens_total", Help: "Prompt tokens of the requests each API key got admitted."}, []string{"tenant"})
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "smg_scheduler_queue_wait_seconds", Help: "Time requests waited in the gateway's admission queue before they were admitted or shed, by priority class.", Buckets: latencyBuckets}, []string{"class"})
	var roles []string
	for _, w := range g.lane.Workers() {
		roles = append(roles, w.Role())
	}
	m.traffic = traffic.New(traffic.Options{Roles: roles, Logger: g.log})
	m.gwAdded = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tsd_gateway_added_ttft_seconds", Help: "The gateway's own share of a stream's time to first token: HTTP accept to legs sent, plus first token from the lane to first byte written (the access line's gw_us).",
		Buckets: gwAddedBuckets})
	if err := reg.Register(m.gwAdded); err != nil {
		return nil, err
	}
	var err error
	if m.phaseMetrics, err = newPhaseMetrics(reg); err != nil {
		return nil, err
	}
	if c := g.opts.TokenizerCache; c != nil && c.Stats().Enabled {
		if err := reg.Register(tokenizerCacheCollector{g.opts.TokenizerCache}); err != nil {
			return nil, err
		}
	}
	m.inTokens = m.tokens.WithLabelValues("input")
	m.outTokens = m.tokens.WithLabelValues("output")
	for _, c := range []prometheus.Collector{m.httpRequests, m.httpResponses, m.httpDuration, m.requests, m.reqErrors,
		m.reqDuration, m.ttft, m.routerTTFT, m.itl, m.tokens, m.finishes, m.selection, m.panics, m.events, m.queued, m.attempts, m.cbTransitions, m.routes, m.layouts, workerCollector{g}, m.traffic, kvCollector{g},
		m.tenantRequests, m.tenantTokens, m.queueWait, admissionCollector{g}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// dispatch is the part of the series the dispatch updates (the same
// collectors, so /metrics and the tests read them here).
func (m *metrics) dispatch() *dispatch.Metrics {
	return &dispatch.Metrics{Requests: m.requests, ReqErrors: m.reqErrors, ReqDuration: m.reqDuration, TTFT: m.ttft, RouterTTFT: m.routerTTFT,
		ITL: m.itl, InTokens: m.inTokens, OutTokens: m.outTokens, Finishes: m.finishes, Selection: m.selection, Queued: m.queued,
		Attempts: m.attempts, BreakerTransitions: m.cbTransitions, Routes: m.routes, Layouts: m.layouts,
		TenantRequests: m.tenantRequests, TenantTokens: m.tenantTokens, QueueWait: m.queueWait, Shed: m.shed}
}

// workerCollector reads per-worker and per-rank state from the lane at
// scrape time, so gauges never drift from the truth.
type workerCollector struct{ g *Gateway }

var (
	descActive = prometheus.NewDesc("smg_worker_requests_active", "In-flight requests per worker.",
		[]string{"worker", "worker_type"}, nil)
	descRankActive = prometheus.NewDesc("tsd_worker_rank_requests_active", "In-flight requests per engine rank.",
		[]string{"worker", "worker_type", "identity"}, nil)
	descHealth = prometheus.NewDesc("smg_worker_health", "1 when the worker has a registered, routed rank.",
		[]string{"worker", "worker_type"}, nil)
	descRanks = prometheus.NewDesc("tsd_worker_ranks", "Engine ranks per worker by handshake state.",
		[]string{"worker", "worker_type", "state"}, nil)
	descInflight = prometheus.NewDesc("tsd_gateway_requests_active", "Generations in flight in the gateway.", nil, nil)
	// Breakers (docs/protocol.md §11.9): SMG's coded gauge, and one per
	// state that is 1 for the state a worker's breaker is in.
	descCBState = prometheus.NewDesc("smg_worker_cb_state", "Circuit breaker state per worker (0=closed, 1=open, 2=half_open).",
		[]string{"worker"}, nil)
	descCBStates = prometheus.NewDesc("tsd_worker_breaker_state", "1 for the state each worker's circuit breaker is in, 0 for the others.",
		[]string{"worker", "state"}, nil)
	descCBFailures = prometheus.NewDesc("smg_worker_cb_consecutive_failures", "The current run of consecutive failures per worker.",
		[]string{"worker"}, nil)
	descCBSuccesses = prometheus.NewDesc("smg_worker_cb_consecutive_successes", "The current run of consecutive successes per worker while its breaker is half-open.",
		[]string{"worker"}, nil)
	descPool = prometheus.NewDesc("smg_worker_pool_size", "Workers (role instances) the gateway routes to, by kind; connection_mode is always zmq (the lane).",
		[]string{"worker_type", "connection_mode"}, nil)
	descQueued = prometheus.NewDesc("tsd_gateway_requests_queued", "Requests waiting for a routable worker (QueueTimeout).", nil, nil)
	descTree   = prometheus.NewDesc("tsd_gateway_routing_tree_tokens", "Prompt tokens cache_aware's radix tree keeps (also kv_aware's fallback), by role kind: about 4 bytes each (docs/profiles.md, Routing policies).",
		[]string{"kind"}, nil)
)

func (c workerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descActive
	ch <- descRankActive
	ch <- descHealth
	ch <- descRanks
	ch <- descInflight
	ch <- descQueued
	ch <- descTree
	ch <- descCBState
	ch <- descCBStates
	ch <- descCBFailures
	ch <- descCBSuccesses
	ch <- descPool
}

func (c workerCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(c.g.disp.InFlight()))
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(c.g.queuedNow.Load()))
	for kind, n := range c.g.disp.TreeTokens() {
		ch <- prometheus.MustNewConstMetric(descTree, prometheus.GaugeValue, float64(n), kind)
	}
	for _, b := range c.g.disp.Breakers() {
		code := map[string]float64{snapshot.BreakerClosed: 0, snapshot.BreakerOpen: 1, snapshot.BreakerHalfOpen: 2}[b.State]
		ch <- prometheus.MustNewConstMetric(descCBState, prometheus.GaugeValue, code, b.Role)
		ch <- prometheus.MustNewConstMetric(descCBFailures, prometheus.GaugeValue, float64(b.Failures), b.Role)
		ch <- prometheus.MustNewConstMetric(descCBSuccesses, prometheus.GaugeValue, float64(b.Successes), b.Role)
		for _, st := range []string{snapshot.BreakerClosed, snapshot.BreakerOpen, snapshot.BreakerHalfOpen} {
			v := 0.0
			if st == b.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descCBStates, prometheus.GaugeValue, v, b.Role, st)
		}
	}
	pool := map[string]int{}
	for _, w := range c.g.lane.Workers() {
		pool[w.Kind()]++
	}
	for kind, n := range pool {
		ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(n), kind, "zmq")
	}
	for _, w := range c.g.lane.Workers() {
		total, per := w.InFlight()
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(total), w.Role(), w.Kind())
		health := 0.0
		if len(w.Routable()) > 0 {
			health = 1
		}
		ch <- prometheus.MustNewConstMetric(descHealth, prometheus.GaugeValue, health, w.Role(), w.Kind())
		states := map[string]int{}
		for _, r := range w.Ranks() {
			states[r.State]++
			ch <- prometheus.MustNewConstMetric(descRankActive, prometheus.GaugeValue, float64(per[r.Identity]), w.Role(), w.Kind(), strconv.Itoa(r.Identity))
		}
		for _, st := range []string{snapshot.RankWaiting, snapshot.RankHello, snapshot.RankInitSent, snapshot.RankReady, snapshot.RankRegistered, snapshot.RankStalled, snapshot.RankDisconnected} {
			ch <- prometheus.MustNewConstMetric(descRanks, prometheus.GaugeValue, float64(states[st]), w.Role(), w.Kind(), st)
		}
	}
}

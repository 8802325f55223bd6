package dispatch

// The Dispatcher is the gateway's generation dispatch behind tokenapi.Engine
// (every front end speaks that one contract): validation, the PD/EPD leg choice, submission, the
// prompt-logprob join and each request's flight (generate.go, epdroute.go).
// Package gateway owns binding, HTTP and the supervisor-facing methods,
// and delegates to it where dispatch state is involved.

import (
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway/admission"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Options tune a Dispatcher; the gateway passes its own (gateway.Options)
// after defaulting them.
type Options struct {
	// RequestTimeout ends a generation that runs longer (both legs are
	// aborted).
	RequestTimeout time.Duration
	// DrainGrace is how long a finished request waits for its prefill leg
	// (or its encode legs) to finish before aborting it.
	DrainGrace time.Duration
	// QueueTimeout is how long a new request waits for a routable worker
	// of a kind it needs; negative: no wait.
	QueueTimeout time.Duration
	// HookPick and HookRun are test hooks: a panic injected at a dispatch
	// step proves the recover boundaries. nil outside tests.
	HookPick, HookRun func()
}

// Metrics are the series the dispatch updates; the gateway registers them
// (docs/protocol.md §11.7 names) and serves them on /metrics.
type Metrics struct {
	Requests    prometheus.Counter
	ReqErrors   *prometheus.CounterVec // error_type
	ReqDuration prometheus.Histogram
	TTFT        prometheus.Histogram
	RouterTTFT  prometheus.Histogram
	ITL         prometheus.Histogram
	InTokens    prometheus.Counter
	OutTokens   prometheus.Counter
	Finishes    *prometheus.CounterVec // reason
	Selection   *prometheus.CounterVec // worker, worker_type, identity
	Queued      *prometheus.CounterVec // outcome
	// Routes counts routing decisions by kind (prefill, decode), policy
	// and reason (gateway/routing's reasons: cache_hit, balance, ...).
	Routes *prometheus.CounterVec
	// Layouts counts routed attempts by layout (pd, aggregated) and the
	// layout decision's reason (routing.DecideLayout).
	Layouts *prometheus.CounterVec
	// Attempts counts failed attempts by what failed and what followed
	// (retry, migrate, fail, continue); BreakerTransitions each breaker
	// state change (SMG's smg_worker_cb_transitions_total).
	Attempts           *prometheus.CounterVec // failure, verdict
	BreakerTransitions *prometheus.CounterVec // worker, from, to
	// TenantRequests counts requests by API key (gateway.api_keys name)
	// and outcome (admitted, or the reason it was shed); TenantTokens
	// the prompt tokens of those admitted. QueueWait is how long
	// requests waited in the admission queue, by class (SMG's
	// smg_scheduler_queue_wait_seconds). nil: not counted.
	TenantRequests *prometheus.CounterVec
	TenantTokens   *prometheus.CounterVec
	QueueWait      *prometheus.HistogramVec
	// Shed hears a request the admission queue shed, by its reason
	// (smg_admission_queue_rejected_total, beside the front door's).
	Shed func(reason string)
}

// tenant counts a request of an API key's tenant ("": none, not counted).
func (m *Metrics) tenant(name, outcome string, prompt int) {
	if name == "" || m.TenantRequests == nil {
		return
	}
	m.TenantRequests.WithLabelValues(name, outcome).Inc()
	if prompt > 0 && m.TenantTokens != nil {
		m.TenantTokens.WithLabelValues(name).Add(float64(prompt))
	}
}

func (m *Metrics) reqError(kind string) { m.ReqErrors.WithLabelValues(kind).Inc() }

// dispatched counts a request whose first attempt is under way.
func (m *Metrics) dispatched(promptTokens int) {
	m.Requests.Inc()
	m.InTokens.Add(float64(promptTokens))
}

// selected counts a leg's worker choice.
func (m *Metrics) selected(l leg) {
	m.Selection.WithLabelValues(l.w.Role(), l.w.Kind(), strconv.Itoa(l.id)).Inc()
}

func (m *Metrics) attemptFailed(f Failure, v Verdict) {
	if m.Attempts != nil {
		m.Attempts.WithLabelValues(f.String(), v.String()).Inc()
	}
}

func (m *Metrics) finished(reason string, d time.Duration) {
	m.Finishes.WithLabelValues(reason).Inc()
	m.ReqDuration.Observe(d.Seconds())
}

// Config is what a Dispatcher is built from.
type Config struct {
	Plan    *profiles.Plan
	Lane    *lane.Lane // bound by the gateway; its workers are split by kind here
	Metrics *Metrics
	Options Options
	// Queued is the gauge of requests waiting for a worker, shared with
	// the front door's admission queue (both count into it).
	Queued *atomic.Int64
	// Shutdown ends every queued wait (the gateway is going away).
	Shutdown <-chan struct{}
	// OnPanic reports a panic a recover boundary caught (logged, counted
	// in tsd_gateway_panics_total, an event).
	OnPanic func(where string, v any, stack []byte)
	// KV is the index of the engines' KV events the kv_aware policy reads;
	// nil means no KV events at all: kv_aware falls back to cache_aware
	// for every worker.
	KV KVIndex
	// OnEvent hears verdicts worth showing on the dashboard's event list:
	// kind "breaker" (a worker's circuit breaker changed state). nil: none.
	OnEvent func(kind, role, msg string)
	// Now is the breakers' clock; nil: time.Now.
	Now func() time.Time
}

// Dispatcher implements tokenapi.Engine over the lane's workers. What it
// owns is split by job: the live settings and worker set (liveState,
// live.go), the routing side (routes, route.go), encode routing and the
// embedding watches (encoders, epdroute.go) and the circuit breakers
// (breakers, breaker.go); each request's flight (flight.go) and its
// attempts (attempt.go) read them.
type Dispatcher struct {
	mode      string // the plan's gateway mode (EPDMode)
	opts      Options
	lane      *lane.Lane
	metrics   *Metrics
	guard     panicGuard
	shutdown  <-chan struct{}
	queuedNow *atomic.Int64
	inflight  atomic.Int64
	rng       *lockedRand

	live   *liveState // what tsd apply changes: settings, the worker set
	routes *routes    // the routing side: the Router, the KV index, queueing
	// queue is the admission queue in front of the engines
	// (gateway/admission, admit.go).
	queue    *admission.Queue
	enc      *encoders // encode routing and the embedding watches
	breakers *breakers // gateway.circuit_breaker; no book while off
}

// New builds the dispatch over cfg.Lane's workers.
func New(cfg Config) *Dispatcher {
	g := &Dispatcher{mode: cfg.Plan.Gateway.Mode, opts: cfg.Options, lane: cfg.Lane, metrics: cfg.Metrics, guard: panicGuard{cfg.OnPanic},
		shutdown: cfg.Shutdown, queuedNow: cfg.Queued, rng: newLockedRand(), live: &liveState{}}
	if g.queuedNow == nil {
		g.queuedNow = &atomic.Int64{}
	}
	if g.guard.onPanic == nil {
		g.guard.onPanic = func(string, any, []byte) {}
	}
	ps := &pools{}
	for _, w := range cfg.Lane.Workers() {
		ps.add(w)
	}
	g.live.ps.Store(ps)
	if g.opts.RequestTimeout <= 0 {
		g.opts.RequestTimeout = 30 * time.Minute
	}
	lc := liveOf(cfg.Plan.Gateway, g.opts.QueueTimeout)
	g.live.cfg.Store(lc)
	g.breakers = &breakers{lane: cfg.Lane, shutdown: cfg.Shutdown, now: cfg.Now, guard: g.guard, onTr: func(role, from, to, reason string) {
		if m := g.metrics.BreakerTransitions; m != nil {
			m.WithLabelValues(role, from, to).Inc()
		}
		if cfg.OnEvent != nil {
			cfg.OnEvent("breaker", role, fmt.Sprintf("%s circuit breaker %s → %s (%s)", role, from, to, reason))
		}
	}}
	g.enc = &encoders{mode: g.mode, live: g.live, lane: cfg.Lane, brk: g.breakers, rng: g.rng, metrics: cfg.Metrics, guard: g.guard}
	g.routes = &routes{live: g.live, brk: g.breakers, enc: g.enc, lane: cfg.Lane, metrics: cfg.Metrics,
		queued: g.queuedNow, shutdown: cfg.Shutdown, hookPick: g.opts.HookPick}
	g.SetKV(cfg.KV)
	router := routing.NewRouter(routing.Options{Prefill: lc.prefillPolicy, Decode: lc.decodePolicy, Aggregated: lc.aggregatedPolicy, Config: routingConfig(cfg.Plan.Gateway), Rand: g.rng.Uint64,
		OnPanic: g.guard.onPanic, KV: kvSource{g.routes}})
	g.routes.router = router
	g.queue = admission.New(queueConfig(cfg.Plan.Gateway), admission.Options{Ranks: g.ranksOf, OnPanic: g.guard.onPanic,
		OnQueue: func(d int) { g.queuedNow.Add(int64(d)) },
		OnLeave: func(_ string, class int, waited time.Duration) {
			if h := g.metrics.QueueWait; h != nil {
				h.WithLabelValues(admission.ClassLabel(class)).Observe(waited.Seconds())
			}
		}})
	if cfg.Shutdown != nil {
		go func() {
			<-cfg.Shutdown
			router.Close()
			g.queue.Close()
		}()
	}
	g.breakers.start(BreakerConfigOf(cfg.Plan.Gateway.CircuitBreaker), laneRoles(cfg.Lane))
	return g
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Close stops the routing goroutine (the gateway's Shutdown does it
// through Config.Shutdown; tests that build a Dispatcher without one call
// Close).
func (g *Dispatcher) Close() {
	g.routes.router.Close()
	g.queue.Close()
}

// Policies are the policies in use per kind (aggregated's only with
// aggregated engines).
func (g *Dispatcher) Policies() snapshot.PolicyStatus {
	lc := g.live.config()
	p := snapshot.PolicyStatus{Prefill: lc.prefillPolicy, Decode: lc.decodePolicy, Encode: lc.encodePolicy}
	if len(g.live.pools().aggregated.workers) > 0 {
		p.Aggregated = lc.aggregatedPolicy
	}
	return p
}

// Layouts is the split of requests between the layouts; nil while every
// request goes prefill → decode and there is no aggregated engine.
func (g *Dispatcher) Layouts() *snapshot.LayoutStatus {
	mode := g.live.config().layout.Mode
	if mode == routing.DisaggAlways && len(g.live.pools().aggregated.workers) == 0 {
		return nil
	}
	return &snapshot.LayoutStatus{Disaggregation: mode, PD: g.routes.split[0].Load(), Aggregated: g.routes.split[1].Load()}
}

// Breakers is every worker's circuit breaker, by role (none when
// gateway.circuit_breaker is off).
func (g *Dispatcher) Breakers() []snapshot.BreakerStatus { return g.breakers.status() }

// Ready reports whether a request has a route (Routable), and in EPD
// mode one encode worker's rank 0 is registered and routed.
func (g *Dispatcher) Ready() bool {
	if g.EPDMode() && len(g.enc.ready()) == 0 {
		return false
	}
	return g.Routable(g.Health())
}

// Health counts the workers of each kind that have a routable rank, and
// every routed prefill, decode and aggregated worker.
type Health struct {
	Prefill, Decode, Aggregated int // workers with a routable rank
	Healthy, Total              int
}

// Health counts routable prefill, decode and aggregated workers and all
// of them, and in EPD mode the encode workers a request may need too (an
// encode worker is healthy when its rank 0 takes requests).
func (g *Dispatcher) Health() Health {
	ps := g.live.pools()
	h := Health{Prefill: ps.prefill.routable(), Decode: ps.decode.routable(), Aggregated: ps.aggregated.routable()}
	h.Healthy = h.Prefill + h.Decode + h.Aggregated
	h.Total = len(ps.prefill.workers) + len(ps.decode.workers) + len(ps.aggregated.workers)
	if g.EPDMode() {
		h.Healthy += len(g.enc.ready())
		h.Total += len(ps.encode)
	}
	return h
}

// Routable reports whether a text request has a route with h's workers
// under the disaggregation setting in use: a prefill and a decode rank
// (always), an aggregated rank (never), either (conditional).
func (g *Dispatcher) Routable(h Health) bool {
	pd, agg := h.Prefill > 0 && h.Decode > 0, h.Aggregated > 0
	switch g.live.config().layout.Mode {
	case routing.DisaggNever:
		return agg
	case routing.DisaggConditional:
		return pd || agg
	}
	return pd
}

// InFlight is how many generations the dispatch is running now.
func (g *Dispatcher) InFlight() int64 { return g.inflight.Load() }

// MaxModelLen is the smallest max_model_len among registered prefill,
// decode and aggregated ranks (a prompt must fit whichever route it
// takes), 0 when none reported one.
func (g *Dispatcher) MaxModelLen() int {
	best := 0
	ps := g.live.pools()
	for _, ws := range [][]*lane.Worker{ps.prefill.workers, ps.decode.workers, ps.aggregated.workers} {
		for _, w := range ws {
			if n := w.MaxModelLen(); n > 0 && (best == 0 || n < best) {
				best = n
			}
		}
	}
	return best
}

// Queues reports whether Generate waits for a routable worker
// (QueueTimeout > 0) instead of refusing at once.
func (g *Dispatcher) Queues() bool { return g.opts.QueueTimeout > 0 }

// ReportPanic reports a panic a front end's goroutine recovered the way
// the dispatch's own boundaries report theirs (Config.OnPanic).
func (g *Dispatcher) ReportPanic(where string, v any, stack []byte) { g.guard.onPanic(where, v, stack) }

// panicGuard is the dispatch's recover boundary, shared by every
// goroutine it starts and every request's flight.
type panicGuard struct {
	onPanic func(where string, v any, stack []byte)
}

// here is deferred at the top of a per-request goroutine: a panic is
// reported and onPanic (may be nil) ends that one request cleanly.
func (p panicGuard) here(where string, onPanic func(err error)) {
	v := recover()
	if v == nil {
		return
	}
	p.onPanic(where, v, debug.Stack())
	if onPanic != nil {
		onPanic(fmt.Errorf("internal error in the gateway's %s (recovered: %v)", where, v))
	}
}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand() *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

func (l *lockedRand) Uint64() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Uint64()
}

// Float64 is uniform in [0, 1).
func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

var _ tokenapi.Engine = (*Dispatcher)(nil)

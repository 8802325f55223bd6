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

// selected counts an attempt's worker choice.
func (m *Metrics) selected(pre, dec leg) {
	m.Selection.WithLabelValues(pre.w.Role(), pre.w.Kind(), strconv.Itoa(pre.id)).Inc()
	m.Selection.WithLabelValues(dec.w.Role(), dec.w.Kind(), strconv.Itoa(dec.id)).Inc()
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

// Dispatcher implements tokenapi.Engine over the lane's workers.
type Dispatcher struct {
	mode      string // the plan's gateway mode (EPDMode)
	opts      Options
	lane      *lane.Lane
	metrics   *Metrics
	onPanic   func(where string, v any, stack []byte)
	shutdown  <-chan struct{}
	queuedNow *atomic.Int64

	// ps is the workers routed to, by kind: swapped whole when tsd apply
	// adds or removes one (live.go); a request takes it once.
	ps  atomic.Pointer[pools]
	enc encodeRouting

	inflight atomic.Int64
	rng      *lockedRand

	// queue is the admission queue in front of the engines
	// (gateway/admission, admit.go).
	queue *admission.Queue
	// router owns the routing state of both PD pools (gateway/routing);
	// kv feeds kv_aware.
	router *routing.Router
	kv     atomic.Pointer[KVIndex]
	// encSeq is the encode round-robin position.
	encSeq atomic.Uint64
	// live is the settings tsd apply may change (live.go): policies,
	// retry knobs, the queue timeout; read once by each request.
	live     atomic.Pointer[liveConfig]
	breakers bookRef    // gateway.circuit_breaker; no book while off
	liveMu   sync.Mutex // one Reconfigure or worker change at a time
	now      func() time.Time
	onEvent  func(kind, role, msg string)
}

// pools are the workers of each kind.
type pools struct {
	prefill, decode pool
	encode          []*lane.Worker
}

// pools is the worker set now.
func (g *Dispatcher) pools() *pools { return g.ps.Load() }

// pool is the workers of one PD kind.
type pool struct {
	workers []*lane.Worker
	src     []rankSource // the same workers, as routing reads them
}

func (p *pool) add(w *lane.Worker) {
	p.workers = append(p.workers, w)
	p.src = append(p.src, w)
}

// routable counts the pool's workers that have a routable rank.
func (p *pool) routable() int {
	n := 0
	for _, w := range p.workers {
		if len(w.Routable()) > 0 {
			n++
		}
	}
	return n
}

// New builds the dispatch over cfg.Lane's workers.
func New(cfg Config) *Dispatcher {
	g := &Dispatcher{mode: cfg.Plan.Gateway.Mode, opts: cfg.Options, lane: cfg.Lane, metrics: cfg.Metrics, onPanic: cfg.OnPanic,
		shutdown: cfg.Shutdown, queuedNow: cfg.Queued, rng: newLockedRand()}
	if g.queuedNow == nil {
		g.queuedNow = &atomic.Int64{}
	}
	if g.onPanic == nil {
		g.onPanic = func(string, any, []byte) {}
	}
	ps := &pools{}
	for _, w := range cfg.Lane.Workers() {
		ps.add(w)
	}
	g.ps.Store(ps)
	g.SetKV(cfg.KV)
	if g.opts.RequestTimeout <= 0 {
		g.opts.RequestTimeout = 30 * time.Minute
	}
	lc := liveOf(cfg.Plan.Gateway, g.opts.QueueTimeout)
	g.live.Store(lc)
	g.router = routing.NewRouter(routing.Options{Prefill: lc.prefillPolicy, Decode: lc.decodePolicy, Config: routingConfig(cfg.Plan.Gateway), Rand: g.rng.Uint64,
		OnPanic: g.onPanic, KV: kvSource{g}})
	g.queue = admission.New(queueConfig(cfg.Plan.Gateway), admission.Options{Ranks: g.ranksOf, OnPanic: g.onPanic,
		OnQueue: func(d int) { g.queuedNow.Add(int64(d)) },
		OnLeave: func(_ string, class int, waited time.Duration) {
			if h := g.metrics.QueueWait; h != nil {
				h.WithLabelValues(admission.ClassLabel(class)).Observe(waited.Seconds())
			}
		}})
	if cfg.Shutdown != nil {
		go func() {
			<-cfg.Shutdown
			g.router.Close()
			g.queue.Close()
		}()
	}
	var roles []string
	for _, w := range cfg.Lane.Workers() {
		roles = append(roles, w.Role())
	}
	g.now, g.onEvent = cfg.Now, cfg.OnEvent
	g.startBook(BreakerConfigOf(cfg.Plan.Gateway.CircuitBreaker), roles)
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
	g.router.Close()
	g.queue.Close()
}

// Policies are the prefill, decode and encode policies in use.
func (g *Dispatcher) Policies() (prefill, decode, encode string) {
	lc := g.live.Load()
	return lc.prefillPolicy, lc.decodePolicy, lc.encodePolicy
}

// Breakers is every worker's circuit breaker, by role (none when
// gateway.circuit_breaker is off).
func (g *Dispatcher) Breakers() []snapshot.BreakerStatus { return g.breakers.status() }

// Ready reports whether at least one prefill and one decode rank are
// registered and routed, and in EPD mode one encode worker's rank 0.
func (g *Dispatcher) Ready() bool {
	p, d, _, _ := g.Health()
	if g.EPDMode() && len(g.encodeReady()) == 0 {
		return false
	}
	return p > 0 && d > 0
}

// Health counts routable prefill and decode workers and all of them.
func (g *Dispatcher) Health() (prefill, decode, healthy, total int) {
	ps := g.pools()
	prefill, decode = ps.prefill.routable(), ps.decode.routable()
	return prefill, decode, prefill + decode, len(ps.prefill.workers) + len(ps.decode.workers)
}

// InFlight is how many generations the dispatch is running now.
func (g *Dispatcher) InFlight() int64 { return g.inflight.Load() }

// MaxModelLen is the smallest max_model_len among registered prefill and
// decode ranks (a prompt must fit both legs), 0 when none reported one.
func (g *Dispatcher) MaxModelLen() int {
	best := 0
	ps := g.pools()
	for _, ws := range [][]*lane.Worker{ps.prefill.workers, ps.decode.workers} {
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
func (g *Dispatcher) ReportPanic(where string, v any, stack []byte) { g.onPanic(where, v, stack) }

// recoverHere is deferred at the top of a per-request goroutine: a panic
// is reported and onPanic (may be nil) ends that one request cleanly.
func (g *Dispatcher) recoverHere(where string, onPanic func(err error)) {
	v := recover()
	if v == nil {
		return
	}
	g.onPanic(where, v, debug.Stack())
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

// Package gateway is tsd's embedded gateway: it binds every worker's ZMQ
// lane sockets (gateway/lane), hosts the KV rendezvous when the profile
// asks, dispatches token-level requests prefill → decode
// (gateway-flow.md §4) — in epd mode an image request first goes to an
// encode server chosen by consistent hashing on the image (§5,
// epdroute.go) — and serves the HTTP API (/generate, /health, /readiness,
// /v1/models, /metrics, plus whatever front ends mount). Prompt logprobs
// come from the prefill leg alone (awaitPrompt).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway/bootstrap"
	"github.com/tsd-project/tsd/gateway/dispatch"
	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Options tune a Gateway. Zero values are sensible.
type Options struct {
	Logger *slog.Logger
	// Registry receives the gateway's metrics and is what /metrics serves
	// (one registry per process, decisions.md §8). nil: a private one.
	Registry *prometheus.Registry
	// Transport binds lane sockets; nil: zmq4.
	Transport lane.Transport
	// Listener serves HTTP instead of binding plan.Gateway.Listen (tests).
	Listener net.Listener
	// RequestTimeout ends a generation that runs longer (both legs are
	// aborted); 0: 30 minutes.
	RequestTimeout time.Duration
	// SilenceTimeout declares a worker dead after this long without output
	// while requests are in flight; 0: 300 s (SMG).
	SilenceTimeout time.Duration
	// MaxBodyBytes bounds request bodies; 0: 32 MiB.
	MaxBodyBytes int64
	// BodyReadTimeout bounds reading one request body; 0: 30 s (limits.go).
	BodyReadTimeout time.Duration
	// MaxInflightBodies budgets the body bytes of requests in flight
	// (429 beyond it); 0: 256 MiB.
	MaxInflightBodies int64
	// DrainGrace is how long a finished request waits for its prefill leg
	// to finish before aborting it; 0: 5 s.
	DrainGrace time.Duration
	// Mount lets a front end (gateway/openai) register its routes on mux,
	// with the gateway as its gen.Engine. The routes are served behind the
	// gateway's fixed ones with HTTP metrics; the front end applies its own
	// auth. (Handle is the alternative that also applies the gateway's auth.)
	Mount func(engine gen.Engine, mux *http.ServeMux)
}

// Gateway implements supervisor.Gateway and gen.Engine.
type Gateway struct {
	plan    *profiles.Plan
	opts    Options
	log     *slog.Logger
	lane    *lane.Lane
	metrics *metrics
	apiKey  string
	lim     httpLimits
	mux     *http.ServeMux
	srv     *http.Server

	prefill, decode, encode []*lane.Worker

	mu        sync.Mutex
	listener  net.Listener
	bound     bool
	boots     map[string]*bootstrap.Server
	alive     map[string]*atomic.Bool
	shutdown  chan struct{}
	shutOnce  sync.Once
	notes     []string
	rate      rateSample
	rrPrefill atomic.Uint64
	rrDecode  atomic.Uint64
	enc       encodeRouting

	requests atomic.Uint64
	errors   atomic.Uint64
	tokens   atomic.Uint64
	inflight atomic.Int64
	rng      *lockedRand
}

// New prepares a gateway for plan; nothing is bound until Bind.
func New(plan *profiles.Plan, opts Options) (*Gateway, error) {
	if plan == nil {
		return nil, errors.New("gateway: nil plan")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Minute
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 32 << 20
	}
	if opts.BodyReadTimeout <= 0 {
		opts.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if opts.MaxInflightBodies <= 0 {
		opts.MaxInflightBodies = DefaultMaxInflightBodies
	}
	if opts.DrainGrace <= 0 {
		opts.DrainGrace = 5 * time.Second
	}
	l, err := lane.New(plan.Gateway.Workers, lane.Options{Transport: opts.Transport, Logger: opts.Logger, SilenceTimeout: opts.SilenceTimeout})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g := &Gateway{
		plan:     plan,
		opts:     opts,
		log:      opts.Logger,
		lane:     l,
		mux:      http.NewServeMux(),
		boots:    map[string]*bootstrap.Server{},
		alive:    map[string]*atomic.Bool{},
		shutdown: make(chan struct{}),
		rng:      newLockedRand(),
	}
	for _, w := range l.Workers() {
		switch w.Kind() {
		case profiles.KindPrefill:
			g.prefill = append(g.prefill, w)
		case profiles.KindDecode:
			g.decode = append(g.decode, w)
		case profiles.KindEncode:
			g.encode = append(g.encode, w)
		}
		// tsd cannot watch a remote engine's process, so its rendezvous
		// answers /health from the start; local ones wait for SetAlive.
		a := &atomic.Bool{}
		a.Store(w.Plan().Remote)
		g.alive[w.Role()] = a
	}
	for kind, p := range map[string]string{"prefill": plan.Gateway.Policy.Prefill, "decode": plan.Gateway.Policy.Decode} {
		if p != "" && !dispatch.Known(p) {
			g.notes = append(g.notes, fmt.Sprintf("%s policy %s: using round_robin", kind, p))
		}
	}
	if p := plan.Gateway.Policy.Encode; g.epdMode() && p != "" && p != "consistent_hashing" {
		g.notes = append(g.notes, fmt.Sprintf("encode policy %s: using consistent_hashing", p))
	}
	if env := plan.Gateway.APIKeyEnv; env != "" {
		g.apiKey = os.Getenv(env)
		if g.apiKey == "" {
			return nil, fmt.Errorf("gateway: api_key_env %s is empty or unset", env)
		}
	}
	g.metrics, err = newMetrics(opts.Registry, g)
	if err != nil {
		return nil, fmt.Errorf("gateway: register metrics: %w", err)
	}
	g.routes()
	if opts.Mount != nil {
		sub := http.NewServeMux()
		opts.Mount(g, sub)
		g.mux.Handle("/", g.wrap("", sub, false))
	}
	g.srv = &http.Server{Handler: g.mux, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)}
	return g, nil
}

// Handle mounts a serving route (auth and HTTP metrics applied). Call it
// before Serve.
func (g *Gateway) Handle(pattern string, h http.Handler) {
	g.mux.Handle(pattern, g.wrap(pattern, h, true))
}

// Lane exposes the lane (tests, status views).
func (g *Gateway) Lane() *lane.Lane { return g.lane }

// Addr is the HTTP listener's address once bound.
func (g *Gateway) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.listener == nil {
		return ""
	}
	return g.listener.Addr().String()
}

// Bind binds every worker's sockets, the rendezvous servers the gateway
// hosts (bootstrap_server: tsd) and the HTTP listener, before any engine
// starts. On failure nothing stays bound.
func (g *Gateway) Bind(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.bound {
		return errors.New("gateway already bound")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := g.lane.Bind(); err != nil {
		return fmt.Errorf("bind lane: %w", err)
	}
	undo := func() {
		for _, b := range g.boots {
			_ = b.Close()
		}
		g.boots = map[string]*bootstrap.Server{}
		_ = g.lane.Close()
	}
	if g.plan.Gateway.BootstrapServer == "tsd" {
		for _, w := range g.prefill {
			addr := w.Plan().Bootstrap
			if addr == "" {
				undo()
				return fmt.Errorf("bind rendezvous for %s: the plan gives no bootstrap address", w.Role())
			}
			alive := g.alive[w.Role()]
			srv := bootstrap.NewServer(alive.Load)
			if err := srv.Start(addr); err != nil {
				undo()
				return fmt.Errorf("bind rendezvous for %s: %w", w.Role(), err)
			}
			g.boots[w.Role()] = srv
		}
	}
	l := g.opts.Listener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", g.plan.Gateway.Listen); err != nil {
			undo()
			return fmt.Errorf("bind HTTP listener %s: %w", g.plan.Gateway.Listen, err)
		}
	}
	g.listener = l
	g.bound = true
	return nil
}

// Serve runs the HTTP API until ctx ends or Shutdown is called.
func (g *Gateway) Serve(ctx context.Context) error {
	g.mu.Lock()
	l := g.listener
	g.mu.Unlock()
	if l == nil {
		return errors.New("gateway: Serve before Bind")
	}
	errc := make(chan error, 1)
	go func() { errc <- g.srv.Serve(l) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve HTTP: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return g.Shutdown(sctx)
	case <-g.shutdown:
		return nil
	}
}

// Shutdown stops accepting HTTP, lets requests drain until ctx's deadline,
// then unbinds every socket (failing what is still in flight) and removes
// ipc socket files.
func (g *Gateway) Shutdown(ctx context.Context) error {
	var errs []error
	g.shutOnce.Do(func() {
		close(g.shutdown)
		if err := g.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain HTTP: %w", err))
			_ = g.srv.Close()
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.listener != nil {
			_ = g.listener.Close() // Serve may never have run
		}
		for role, b := range g.boots {
			if err := b.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close rendezvous of %s: %w", role, err))
			}
		}
		if g.bound {
			if err := g.lane.Close(); err != nil {
				errs = append(errs, err)
			}
			g.bound = false
		}
	})
	return errors.Join(errs...)
}

// SubscribeRanks returns every rank's current state, then each change.
func (g *Gateway) SubscribeRanks() ([]snapshot.RankEvent, <-chan snapshot.RankEvent, func()) {
	return g.lane.SubscribeRanks()
}

// SetRouted takes a role out of routing or puts it back.
//
// Until drain lands in the gateway, taking a role out still ends its
// in-flight requests (ErrNotRouted), as before; AbortRole is the explicit
// form.
func (g *Gateway) SetRouted(role string, routed bool) {
	if w, ok := g.lane.Worker(role); ok {
		w.SetRouted(routed)
		if !routed {
			w.Abort(lane.ErrNotRouted)
		}
	}
	g.noteEncodeUp(role, routed)
}

// AbortRole ends every in-flight request on the role with reason.
func (g *Gateway) AbortRole(role, reason string) int {
	w, ok := g.lane.Worker(role)
	if !ok {
		return 0
	}
	return w.Abort(fmt.Errorf("%w: %s", lane.ErrNotRouted, reason))
}

// DrainCount is how many in-flight requests still need the role.
func (g *Gateway) DrainCount(role string) int {
	n, _ := g.InFlight(role)
	return n
}

// SetStalled takes a stalled role out of routing and ends its requests,
// or lets it be routed again.
func (g *Gateway) SetStalled(role string, stalled bool, reason string) {
	if stalled {
		g.SetRouted(role, false)
		g.AbortRole(role, reason)
		return
	}
	g.SetRouted(role, true)
}

// SetAlive tells the gateway whether a role's process is alive; the
// rendezvous it hosts for that role answers /health only while it is, and
// forgets the role's rank registrations when it dies (a restarted prefill
// registers again).
func (g *Gateway) SetAlive(role string, alive bool) {
	g.mu.Lock()
	a := g.alive[role]
	b := g.boots[role]
	g.mu.Unlock()
	if a == nil {
		return
	}
	was := a.Swap(alive)
	if was && !alive && b != nil {
		b.Reset()
	}
	if was != alive {
		g.noteEncodeUp(role, alive)
	}
}

// InFlight is the role's in-flight request count, total and per identity.
func (g *Gateway) InFlight(role string) (int, map[int]int) {
	w, ok := g.lane.Worker(role)
	if !ok {
		return 0, map[int]int{}
	}
	return w.InFlight()
}

// Ready reports whether at least one prefill and one decode rank are
// registered and routed, and in EPD mode one encode worker's rank 0.
func (g *Gateway) Ready() bool {
	p, d, _, _ := g.health()
	if g.epdMode() && len(g.encodeReady()) == 0 {
		return false
	}
	return p > 0 && d > 0
}

// health counts routable prefill and decode workers and all of them.
func (g *Gateway) health() (prefill, decode, healthy, total int) {
	for _, w := range g.prefill {
		if len(w.Routable()) > 0 {
			prefill++
		}
	}
	for _, w := range g.decode {
		if len(w.Routable()) > 0 {
			decode++
		}
	}
	return prefill, decode, prefill + decode, len(g.prefill) + len(g.decode)
}

// Status is the gateway's headline numbers.
func (g *Gateway) Status() snapshot.GatewayStatus {
	req, tok := g.requests.Load(), g.tokens.Load()
	rps, tps := g.rate.update(time.Now(), req, tok)
	notes := g.notes
	if n := g.encodeNote(); n != "" {
		notes = append([]string{n}, notes...)
	}
	note := strings.Join(notes, "; ")
	return snapshot.GatewayStatus{
		URL:       g.plan.Gateway.URL,
		Mode:      g.plan.Gateway.Mode,
		Ready:     g.Ready(),
		ReqPerSec: rps,
		TokPerSec: tps,
		Requests:  req,
		Errors:    g.errors.Load(),
		InFlight:  int(g.inflight.Load()),
		Note:      note,
	}
}

// rateSample turns counters into per-second rates over at least a second.
type rateSample struct {
	mu       sync.Mutex
	t        time.Time
	req, tok uint64
	rps, tps float64
}

func (r *rateSample) update(now time.Time, req, tok uint64) (float64, float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.t.IsZero() {
		r.t, r.req, r.tok = now, req, tok
		return 0, 0
	}
	if dt := now.Sub(r.t).Seconds(); dt >= 1 {
		r.rps = float64(req-r.req) / dt
		r.tps = float64(tok-r.tok) / dt
		r.t, r.req, r.tok = now, req, tok
	}
	return r.rps, r.tps
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

var _ gen.Engine = (*Gateway)(nil)

// Package gateway is tsd's embedded gateway: it binds every worker's ZMQ
// lane sockets (gateway/lane), hosts the KV rendezvous when the profile
// asks, dispatches token-level requests prefill → decode
// (docs/protocol.md §8) through its Dispatcher (gateway/dispatch) — in
// epd mode an image request first goes to an encode server chosen by
// consistent hashing on the image (docs/protocol.md §9.6) — and serves the
// HTTP API (/health, /readiness, /v1/models, /metrics, plus the front
// ends mounted on it: /generate from gateway/generate, the OpenAI routes
// from gateway/openai). Prompt logprobs come from the prefill leg
// alone (gateway/dispatch awaitPrompt).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/kvevents"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Registry is where the gateway registers its metrics and what /metrics
// serves: a *prometheus.Registry (a test may wrap one to see every
// collector registered).
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// Options tune a Gateway. Zero values are sensible.
type Options struct {
	Logger *slog.Logger
	// Registry receives the gateway's metrics and is what /metrics serves
	// (one registry per process, docs/architecture.md §D8). nil: a private one.
	Registry Registry
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
	// StallTimeout judges one engine rank stalled when it has requests
	// that owe output and sends nothing for this long: it leaves routing,
	// its requests end with an error naming role, rank and why, and it
	// shows snapshot.RankStalled until it speaks again. 0: 30 s — well
	// under the minute a user waits before giving up, and above a long
	// prefill's time to its first output under load (a decode waiting for
	// its prefill's KV owes nothing, so queueing there never trips it; a
	// prefill, whose output waits for its decode's KV fetch, gets twice
	// this, so a stopped decode is blamed before the prefill it holds up).
	// SilenceTimeout (300 s, the whole worker declared dead) stays as the
	// backstop for ranks that owe nothing the lane can see and for
	// StallTimeout < 0 (off).
	StallTimeout time.Duration
	// QueueTimeout is how long a new request waits for a routable worker
	// of a kind it needs (prefill, decode, encode for images) while there
	// is none, e.g. the only decode drains or restarts; then 503 with
	// Retry-After. 0: 30 s. Negative: no wait.
	QueueTimeout time.Duration
	// OnEvent hears verdicts worth showing on the dashboard's event list:
	// kind "panic" (a recovered panic; msg says where; role ""), "stall"
	// (a rank of role judged stalled; msg names role, rank and why),
	// "readmit" (a stalled rank spoke again) and "breaker" (a worker's
	// circuit breaker changed state; msg says from, to and why). Called from gateway
	// goroutines, never under a gateway lock; it must not block for long.
	// tsd hands it the deployment's event log, built before the gateway
	// (supervisor.EventLog).
	OnEvent func(kind, role, msg string)
	// Mount lets the front ends (gateway/generate, gateway/openai)
	// register their routes on mux, with the gateway as their tokenapi.Engine.
	// The routes are served behind the gateway's fixed ones, through the
	// same front door (gateway/front: auth, body limits, request id, CORS,
	// admission, metrics, the panic boundary). nil: no serving routes.
	Mount func(engine tokenapi.Engine, mux *http.ServeMux)
	// TokenizerCache is the prompt cache the mounted front ends encode
	// through, for /metrics and Status; nil: none.
	TokenizerCache *tokenizer.Cache

	// Test hooks: a panic injected at a dispatch step proves the recover
	// boundaries. nil outside tests.
	hookPick, hookRun func()
	// PeerCheck vets each connection to a local role's lane sockets
	// (see lane.Options.PeerCheck); nil admits any peer.
	PeerCheck func(role string, peer lane.PeerInfo) error
}

// Gateway implements supervisor.Gateway and tokenapi.Engine (the latter by
// delegating to its Dispatcher).
type Gateway struct {
	plan    *profiles.Plan
	opts    Options
	log     *slog.Logger
	lane    *lane.Lane
	disp    *dispatch.Dispatcher // generation dispatch (gateway/dispatch)
	metrics *metrics
	door    *front.Door // every route's HTTP layer (gateway/front)
	mux     *http.ServeMux
	srv     *http.Server

	mu       sync.Mutex
	listener net.Listener
	bound    bool
	boots    map[string]*bootstrap.Server
	shutdown chan struct{}
	shutOnce sync.Once
	notes    []string

	// The drain a shutdown begins with (Drain): once, its result kept.
	drainOnce sync.Once
	drained   snapshot.DrainResult
	stopOnce  sync.Once // closes shutdown

	// kv follows the prefill engines' KV events (nil: none publishes,
	// until tsd apply binds one that does: AddWorker builds it then);
	// stopKV ends it, set by Bind, under mu.
	kv     atomic.Pointer[kvevents.Subscriber]
	stopKV func()
	// settings are the gateway settings it serves by now: the plan's,
	// then each tsd apply's (live.go).
	settings atomic.Pointer[profiles.GatewayPlan]

	queuedNow atomic.Int64 // requests waiting: the front door's queue and the dispatch's
	panics    atomic.Uint64

	traces tracerSlot // gateway.tracing's tracer (traces.go)
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
	switch {
	case opts.StallTimeout == 0:
		opts.StallTimeout = 30 * time.Second
	case opts.StallTimeout < 0:
		opts.StallTimeout = 0 // the lane's "off"
	}
	if opts.QueueTimeout == 0 {
		opts.QueueTimeout = 30 * time.Second
	}
	g := &Gateway{}
	l, err := lane.New(plan.Gateway.Workers, lane.Options{Transport: opts.Transport, Logger: opts.Logger, SilenceTimeout: opts.SilenceTimeout, PeerCheck: opts.PeerCheck,
		StallTimeout: opts.StallTimeout, OnPanic: g.ReportPanic, OnEvent: g.event})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	*g = Gateway{
		plan:     plan,
		opts:     opts,
		log:      opts.Logger,
		lane:     l,
		mux:      http.NewServeMux(),
		boots:    map[string]*bootstrap.Server{},
		shutdown: make(chan struct{}),
	}
	var apiKey string
	if env := plan.Gateway.APIKeyEnv; env != "" {
		apiKey = os.Getenv(env)
		if apiKey == "" {
			return nil, fmt.Errorf("gateway: api_key_env %s is empty or unset", env)
		}
	}
	if sub := newKVEvents(plan, opts.Logger, g.ReportPanic); sub != nil {
		g.kv.Store(sub)
	}
	g.metrics, err = newMetrics(opts.Registry, g)
	if err != nil {
		return nil, fmt.Errorf("gateway: register metrics: %w", err)
	}
	var kv dispatch.KVIndex // a nil *Subscriber must stay a nil interface
	if sub := g.kv.Load(); sub != nil {
		kv = sub
	}
	g.disp = dispatch.New(dispatch.Config{Plan: plan, Lane: l, Metrics: g.metrics.dispatch(), Queued: &g.queuedNow, Shutdown: g.shutdown, OnPanic: g.ReportPanic, OnEvent: g.event, KV: kv,
		Options: dispatch.Options{RequestTimeout: opts.RequestTimeout, DrainGrace: opts.DrainGrace, QueueTimeout: opts.QueueTimeout, HookPick: opts.hookPick, HookRun: opts.hookRun}})
	first := plan.Gateway
	g.settings.Store(&first)
	keys, err := doorKeys(plan.Gateway.APIKeys, os.Getenv)
	if err != nil {
		return nil, err
	}
	tc, err := g.prepareTracing(nil, plan.Gateway.Tracing)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	tc.apply(g)
	g.door = g.newDoor(apiKey)
	if len(keys) > 0 {
		live := g.door.Settings()
		live.Keys = keys
		g.door.SetLive(live)
	}
	g.routes()
	var sub *http.ServeMux
	if opts.Mount != nil {
		sub = http.NewServeMux()
		opts.Mount(g, sub)
	}
	g.srv = &http.Server{Handler: g.handler(sub), ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)}
	return g, nil
}

// Handle mounts a serving route (the front door applied: auth, limits,
// metrics). Call it before Serve.
func (g *Gateway) Handle(pattern string, h http.Handler) {
	g.mux.Handle(pattern, g.door.Wrap(front.Route{Admit: front.GeneratePath}, h))
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
		for _, w := range g.lane.Workers() {
			if w.Kind() != profiles.KindPrefill {
				continue
			}
			addr := w.Plan().Bootstrap
			if addr == "" {
				undo()
				return fmt.Errorf("bind rendezvous for %s: the plan gives no bootstrap address", w.Role())
			}
			// It answers /health while the role's view says it lives
			// (lane Worker.Alive: a remote one from the start).
			srv := bootstrap.NewServer(w.Alive)
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
	// The engines bind their KV event sockets as they start; following
	// them begins now and retries quietly until they are up.
	g.stopKV = g.startKVEvents(g.kv.Load())
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

// cutGrace is how long the handlers of the requests a drain cut get to
// write their last event (the error and the finish reason) before their
// connections are closed.
const cutGrace = 5 * time.Second

// ShutdownError ends the requests a shutdown's drain cut at its deadline
// (Drain): a 503 with code "shutdown" before a response began, else the
// stream's finish reason "abort" and its error event. It unwraps to the
// lane's closed error, so the dispatch tries no other worker.
type ShutdownError struct{ Limit time.Duration }

func (e *ShutdownError) Error() string {
	if e.Limit <= 0 {
		return "tsd is stopping: the request was ended without a drain (tsd stop --now)"
	}
	return fmt.Sprintf("tsd is stopping: the request was still running when its drain of %s ended", e.Limit)
}

// Unwrap makes the dispatch classify it as the gateway going away.
func (e *ShutdownError) Unwrap() error { return lane.ErrLaneClosed }

// HTTPStatus is the status a client gets when no response began.
func (e *ShutdownError) HTTPStatus() int { return http.StatusServiceUnavailable }

// ErrorCode is the error's code (traffic.ReasonShutdown).
func (e *ShutdownError) ErrorCode() string { return traffic.ReasonShutdown }

// Drain stops accepting HTTP requests and lets those in flight finish
// until ctx ends; then it cuts what is still running (ShutdownError on
// every leg, so each stream ends with its finish reason and an error
// event, and its access line says 503 reason=shutdown), gives their
// handlers cutGrace to write that, and closes what is left. It returns
// how many requests were in flight, finished and were cut. Only the
// first call drains; later ones return its result. Shutdown drains first
// if Drain was not called.
func (g *Gateway) Drain(ctx context.Context) snapshot.DrainResult {
	g.drainOnce.Do(func() { g.drained = g.drain(ctx) })
	return g.drained
}

func (g *Gateway) drain(ctx context.Context) snapshot.DrainResult {
	g.stopOnce.Do(func() { close(g.shutdown) }) // requests queued for a worker stop waiting
	book := g.metrics.traffic
	book.BeginDrain()
	start := time.Now()
	if err := g.srv.Shutdown(ctx); err != nil {
		limit := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			limit = dl.Sub(start).Round(time.Second)
		}
		book.Cut()
		cut := &ShutdownError{Limit: limit}
		for _, w := range g.lane.Workers() {
			g.disp.DropEmbeds(w.Role(), "tsd is stopping")
			w.Abort(cut)
		}
		gctx, cancel := context.WithTimeout(context.Background(), cutGrace)
		if err := g.srv.Shutdown(gctx); err != nil {
			_ = g.srv.Close()
		}
		cancel()
	}
	in, fin, cut := book.DrainCounts()
	return snapshot.DrainResult{InFlight: in, Finished: fin, Cut: cut}
}

// Shutdown drains HTTP as Drain does (up to ctx's deadline) unless Drain
// ran already, then unbinds every socket and removes ipc socket files.
func (g *Gateway) Shutdown(ctx context.Context) error {
	var errs []error
	g.shutOnce.Do(func() {
		g.Drain(ctx)
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
		if g.stopKV != nil {
			g.stopKV()
			g.stopKV = nil
		}
		if g.bound {
			if err := g.lane.Close(); err != nil {
				errs = append(errs, err)
			}
			g.bound = false
		}
		g.stopTracing(ctx)
	})
	return errors.Join(errs...)
}

// Queues reports whether Generate waits for a routable worker instead of
// refusing at once (QueueTimeout > 0): front ends then skip their own
// fail-fast readiness check.
func (g *Gateway) Queues() bool { return g.disp.Queues() }

// SubscribeRanks returns every rank's current state, then each change.
func (g *Gateway) SubscribeRanks() ([]snapshot.RankEvent, <-chan snapshot.RankEvent, func()) {
	return g.lane.SubscribeRanks()
}

// SetRole takes the supervisor's whole view of one role
// (docs/architecture.md §4.2). The role's lane worker holds it: routing
// (lane and dispatch), the ranks' shown state and the rendezvous the
// gateway hosts all read that one value. What the new view changed is
// acted on here: a stall that begins has ended the role's requests with
// the view's reason (lane Worker.SetView), and it or a process that ended
// drops the embeddings an encode role held (dispatch HearView); a process
// that ended also makes its rendezvous forget the ranks it registered (a
// restarted prefill registers again).
func (g *Gateway) SetRole(role string, v snapshot.RoleView) {
	w, ok := g.lane.Worker(role)
	if !ok {
		return
	}
	c := w.SetView(v)
	g.disp.HearView(role, c, w.View().Reason)
	if !c.Ended {
		return
	}
	g.mu.Lock()
	b := g.boots[role]
	g.mu.Unlock()
	if b != nil {
		b.Reset()
	}
}

// AbortRole ends every in-flight request that uses the role with a clean
// error carrying reason: its own legs end here, and each request's run
// aborts the other PD leg when one fails; requests whose encode leg on it
// finished but whose prefill has not fetched the embedding yet end too.
// It returns how many legs and pending embeddings it ended.
func (g *Gateway) AbortRole(role, reason string) int {
	w, ok := g.lane.Worker(role)
	if !ok {
		return 0
	}
	n := g.disp.PendingEmbeds(role)
	g.disp.DropEmbeds(role, "its requests were ended: "+reason)
	return n + w.Abort(fmt.Errorf("%w: %s", lane.ErrRoleAborted, reason))
}

// DrainCount is how many in-flight requests still need the role. A leg
// leaves the lane's count when its terminal output arrives, so a prefill
// counts only requests whose prefill leg has not finished; an encode
// counts its running legs and the requests whose prefill has yet to fetch
// an embedding it holds.
func (g *Gateway) DrainCount(role string) int {
	n, _ := g.InFlight(role)
	return n + g.disp.PendingEmbeds(role)
}

// InFlight is the role's in-flight request count, total and per identity.
func (g *Gateway) InFlight(role string) (int, map[int]int) {
	w, ok := g.lane.Worker(role)
	if !ok {
		return 0, map[int]int{}
	}
	return w.InFlight()
}

// Stream dispatches r, read in the caller's goroutine (gateway/dispatch
// Dispatcher.Stream).
func (g *Gateway) Stream(ctx context.Context, r tokenapi.Request) (tokenapi.Streamer, error) {
	return g.disp.Stream(ctx, r)
}

// Generate dispatches r (gateway/dispatch Dispatcher.Generate).
func (g *Gateway) Generate(ctx context.Context, r tokenapi.Request) (<-chan tokenapi.Event, error) {
	return g.disp.Generate(ctx, r)
}

// Ready reports whether a request has a route: a prefill and a decode
// rank registered and routed, or an aggregated one, as
// gateway.disaggregation routes (gateway/dispatch Routable), and in EPD
// mode one encode worker's rank 0.
func (g *Gateway) Ready() bool { return g.disp.Ready() }

// ImageSupport says whether image requests can be routed: only in epd
// mode with an encode role (front ends ask before decoding anything).
func (g *Gateway) ImageSupport() error { return g.disp.ImageSupport() }

// health counts routable workers per kind and all of them.
func (g *Gateway) health() dispatch.Health { return g.disp.Health() }

// Status is the gateway's headline numbers.
func (g *Gateway) Status() snapshot.GatewayStatus {
	// The numbers are the traffic account's, the same /metrics reports
	// (gateway/traffic), so the dashboard and /metrics agree; one row per
	// role.
	tot, roles := g.metrics.traffic.Status()
	g.kvRows(roles)
	notes := g.notes
	if n := g.disp.EncodeNote(); n != "" {
		notes = append([]string{n}, notes...)
	}
	note := strings.Join(notes, "; ")
	return snapshot.GatewayStatus{
		URL:          g.plan.Gateway.URL,
		Mode:         g.plan.Gateway.Mode,
		Ready:        g.Ready(),
		ReqPerSec:    tot.ReqPerS,
		TokPerSec:    tot.TokPerS,
		Requests:     tot.Requests,
		Errors:       tot.Errors,
		ClientErrors: tot.ClientErrors,
		InFlight:     tot.InFlight,
		Note:         note,
		Queued:       int(g.queuedNow.Load()),
		Panics:       g.panics.Load(),
		Roles:        roles,
		TTFTp50:      tot.TTFTp50,
		TTFTp99:      tot.TTFTp99,
		ITLp50:       tot.ITLp50,
		ITLp99:       tot.ITLp99,
		Breakers:     g.disp.Breakers(),
		Policy:       g.policyStatus(),
		Layouts:      g.disp.Layouts(),

		TokenizerCache: g.tokenizerCacheStatus(),
		Admission:      g.admissionStatus(),
	}
}

var _ tokenapi.Engine = (*Gateway)(nil)

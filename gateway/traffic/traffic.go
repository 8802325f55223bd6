// Package traffic is the gateway's one account of request outcomes. Every
// HTTP request that asks for work (a POST) is begun and ended here exactly
// once; the request's dispatch adds the engine roles that served its legs,
// its first token, its tokens and its inter-token gaps. Both views read the
// same counters under the same lock: /metrics (Book is a
// prometheus.Collector) and the status snapshot (Status), so the dashboard
// and a scraper never disagree. Each request also gets one access line in
// the gateway's log.
//
// Attribution: a request counts on every role that served one of its legs
// (a PD request on its prefill and its decode, an image request on its
// encoders too); its tokens and inter-token latency on its decode roles; a
// request that never reached an engine (a 400, a 401, a 503 with no decode)
// counts under the row GatewayRole. Rates are the mean over the last ten
// whole seconds (window), percentiles come from a ring of the last samples
// of the past minute (samples): both bounded, both steady under steady load.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/snapshot"
)

// GatewayRole is the row of requests that no engine served: refused before
// dispatch (bad input, auth, limits, no routable worker) or not generation
// requests at all. It is the name no role may take (profiles.GatewayLogName).
const GatewayRole = "gateway"

// Role kinds as the dispatch names them (profiles.Kind*); only the kinds
// that stream a request's tokens (decode, and aggregated, which prefills
// and decodes in one leg) get tokens and inter-token latency.
const kindDecode = "decode"

func streamsTokens(kind string) bool { return kind == kindDecode || kind == kindAggregated }

// Bounds of the request id and path written to the access line: both come
// from the client.
const (
	maxIDLen   = 128
	maxPathLen = 256
	// maxEngineRIDs bounds the engine rids on one access line: n > 1 and
	// retries mint one each; beyond this many the line says how many more.
	maxEngineRIDs = 16
)

// StatusClientClosed is the access line's status of a request whose
// client went away before its answer was complete (nginx's 499).
const StatusClientClosed = 499

// Options configure a Book. Zero values are sensible.
type Options struct {
	// Roles are the role instances the gateway routes to, in the order the
	// snapshot lists them (after GatewayRole); a role not listed gets a row
	// when it first serves a request.
	Roles []string
	// Now is the clock; nil: time.Now. Tests inject a fake one.
	Now func() time.Time
	// Logger receives one access line per request (nil: none). It should
	// be the gateway's own logger, whose output is the gateway's log file
	// and the dashboard's "gateway" log source.
	Logger *slog.Logger
}

// Book owns the counters. One mutex guards all of them: every change is a
// few additions, so the writers (request handlers, decode relays) and the
// readers (the snapshot at the publisher's cadence, a scrape) never wait
// long, and a reader sees one consistent instant.
type Book struct {
	now   func() time.Time
	start time.Time
	log   *slog.Logger

	mu     sync.Mutex
	order  []string // rows in snapshot order, GatewayRole first
	roles  map[string]*acct
	total  acct                    // every counted request once
	caches map[string][]*cacheAcct // prefill roles' prefix caches, by DP rank (cache.go)
	drain  drainAcct               // the shutdown's drain (BeginDrain, Cut)
}

// drainAcct counts what the shutdown's drain did with the requests in
// flight: from BeginDrain every counted request that ends is one the
// drain let finish, unless Cut came first and it ended failed or with
// its connection closed: then the shutdown cut it.
type drainAcct struct {
	on, cut        bool
	inflight       int // counted requests in flight at BeginDrain
	finished, cuts int
}

// ReasonShutdown is the access line's reason (and the error code sent)
// of a request the shutdown's drain cut at its deadline: a server-side
// end, logged 503, never the client's 499.
const ReasonShutdown = "shutdown"

// acct is one row's counters. errors are the deployment's (a 5xx, or a
// stream that broke after its 200); clientErrors the requests refused
// for what they asked (a 4xx other than 499).
type acct struct {
	requests, errors, tokens uint64
	clientErrors             uint64
	inflight                 int
	reqs, toks               window
	ttft, itl                samples
	ttftH, itlH              hist
	plan                     planAcct // what the SLO planner reads (observe.go)
}

// New returns an empty Book.
func New(o Options) *Book {
	if o.Now == nil {
		o.Now = time.Now
	}
	b := &Book{now: o.Now, log: o.Logger, roles: map[string]*acct{}}
	b.start = b.now()
	b.row(GatewayRole)
	for _, r := range o.Roles {
		b.row(r)
	}
	return b
}

// row returns name's counters, creating the row; b.mu held (or New).
func (b *Book) row(name string) *acct {
	a, ok := b.roles[name]
	if !ok {
		a = &acct{}
		b.roles[name] = a
		b.order = append(b.order, name)
	}
	return a
}

// elapsed is the book's time axis: monotonic time since New, so a wall
// clock step never bends a rate.
func (b *Book) elapsed() time.Duration { return b.now().Sub(b.start) }

// Counted says whether a request enters the account: the requests that ask
// for work are POSTs; probes, the model list and scrapes (GETs) would only
// drown the rates.
func Counted(method string) bool { return method == http.MethodPost }

// Rec is one request's record. Its methods may be called from any
// goroutine, and on a nil *Rec (a dispatch called without an HTTP request,
// as in tests) they do nothing. Calls after End are ignored.
type Rec struct {
	b       *Book
	counted bool
	method  string
	path    string
	begin   time.Duration
	times   *reqtime.Stamps // set once, before the request is dispatched (Times)

	// Guarded by b.mu.
	id         string
	engineRIDs []string // every rid sent to an engine for this request
	moreRIDs   int      // engine rids past maxEngineRIDs
	reason     string   // why it failed (the error code sent)
	abandoned  bool     // the client went away first
	roles      []roleRef
	first      bool
	ttft       time.Duration
	prompt     int
	completion int
	failed     string
	ended      bool
	retries    int  // attempts after the first (retries and migrations)
	migrated   bool // a migration continued the stream on another decode
	route      routeFields
	traceID    string           // the request's trace, when one is recorded (Trace)
	status     int              // the status End settled on
	timeline   reqtime.Timeline // its phases, as End found them
}

// routeFields are the routing decision the access line shows: the route
// the request took and why (layout, with the uncached prompt it was
// weighed on), then the policy's decision for its first leg (the
// prefill's, or the aggregated engine's: policy, reason, cache match)
// and the legs' DP ranks.
type routeFields struct {
	set                     bool
	policy, reason          string
	match                   float64 // < 0: the policy reads no cache
	prefillRank, decodeRank int
	aggregated              bool // one leg on an aggregated engine: aggRank, no prefill or decode rank
	aggRank                 int
	layout, layoutReason    string  // "": none recorded
	uncached                int     // < 0: not weighed
	ratio                   float64 // the uncached share of the prompt
}

// roleRef is a role that served one of the request's legs; legs counts
// those still in flight there (Leave takes one back), and the request is
// in flight on the role while it is above 0.
type roleRef struct {
	kind, name string
	legs       int
	queued     int // prompt tokens booked as waiting for this role's prefill (observe.go)
}

// Begin starts the record of one request; End must follow.
func (b *Book) Begin(method, path string) *Rec {
	if len(path) > maxPathLen {
		path = path[:maxPathLen]
	}
	r := &Rec{b: b, counted: Counted(method), method: method, path: path}
	b.mu.Lock()
	r.begin = b.elapsed()
	if r.counted {
		b.total.inflight++
		b.roles[GatewayRole].inflight++
	}
	b.mu.Unlock()
	return r
}

// Times gives the record the request's stamps (gateway/reqtime): the
// first token is stamped there too, and the access line shows the
// gateway's share of the time to first token. Call it before the request
// is dispatched, from the goroutine that began it.
func (r *Rec) Times(st *reqtime.Stamps) {
	if r != nil {
		r.times = st
	}
}

// Mark stamps one of the request's moments (gateway/reqtime) on its
// stamps, for the dispatch's sites that hold the record (the prefill's
// end, the encode legs' end).
func (r *Rec) Mark(st reqtime.Stage) {
	if r != nil {
		r.times.Mark(st)
	}
}

// Trace records the id of the request's trace (gateway/tracing) for its
// access line, so a line leads to its trace; "" for one not sampled.
func (r *Rec) Trace(id string) {
	if r == nil || id == "" {
		return
	}
	r.b.mu.Lock()
	r.traceID = id
	r.b.mu.Unlock()
}

// ID sets the request id the access line shows; the first one set stays
// (the client's x-request-id, set by the HTTP layer, wins over the id the
// dispatch mints).
func (r *Rec) ID(id string) {
	if r != nil {
		r.keepFirst(&r.id, id)
	}
}

// keepFirst sets *field (one of r's) to s cut to maxIDLen, unless it
// holds one already: the first value set stays (ID, Reason). An empty s
// sets nothing.
func (r *Rec) keepFirst(field *string, s string) {
	if s == "" {
		return
	}
	if len(s) > maxIDLen {
		s = s[:maxIDLen]
	}
	r.b.mu.Lock()
	if *field == "" {
		*field = s
	}
	r.b.mu.Unlock()
}

// EngineRID records a rid the dispatch sent to the engines for this
// request (both PD legs share it; an encode leg's is "<rid>-enc-<i>"):
// the access line lists them all, so one id joins the gateway's line to
// the engines' lines of the same request (an n > 1 request and each retry
// mint their own).
func (r *Rec) EngineRID(rid string) {
	if r == nil || rid == "" {
		return
	}
	if len(rid) > maxIDLen {
		rid = rid[:maxIDLen]
	}
	r.b.mu.Lock()
	if len(r.engineRIDs) < maxEngineRIDs {
		r.engineRIDs = append(r.engineRIDs, rid)
	} else {
		r.moreRIDs++
	}
	r.b.mu.Unlock()
}

// Reason records why the request failed, as the error code sent to the
// client ("no_decode_worker"); the first one stays. Every 5xx access line
// carries one (reason=).
func (r *Rec) Reason(code string) {
	if r != nil {
		r.keepFirst(&r.reason, code)
	}
}

// Gone records that the request's context ended with err: when that is
// the client going away (context.Canceled, not a deadline), the request
// was abandoned, and its access line says 499 instead of the status the
// gateway had begun to send. An abandoned request is not an error of the
// deployment: it does not count in the error rates.
func (r *Rec) Gone(err error) {
	if r == nil || !errors.Is(err, context.Canceled) {
		return
	}
	r.b.mu.Lock()
	r.abandoned = true
	r.b.mu.Unlock()
}

// Role records that role instance name, of kind (prefill, decode,
// encode), serves one of the request's legs: from now on the request is in
// flight there, not in the gateway row.
func (r *Rec) Role(kind, name string) {
	if r == nil {
		return
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.ended {
		return
	}
	for i := range r.roles {
		if x := &r.roles[i]; x.name == name {
			// n > 1 samples, or a later attempt, dispatch more legs to
			// the same roles.
			if x.legs == 0 && r.counted {
				b.row(name).inflight++
			}
			x.legs++
			r.queueLocked(x)
			return
		}
	}
	if r.counted {
		if len(r.roles) == 0 {
			b.roles[GatewayRole].inflight--
		}
		b.row(name).inflight++
		b.row(name).plan.promptIn += uint64(r.prompt)
	}
	r.roles = append(r.roles, roleRef{kind: kind, name: name, legs: 1})
	r.queueLocked(&r.roles[len(r.roles)-1])
}

// Leave takes back one leg on role name: an attempt that failed there
// (docs/protocol.md §11.9) while the request goes on elsewhere. The
// request leaves the role's in flight once none of its legs is there; it
// still counts on the role when it ends.
func (r *Rec) Leave(name string) {
	if r == nil {
		return
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.ended {
		return
	}
	for i := range r.roles {
		if x := &r.roles[i]; x.name == name && x.legs > 0 {
			if x.legs--; x.legs == 0 && r.counted {
				b.row(name).inflight--
				r.unqueueLocked(x)
			}
			return
		}
	}
}

// Route records the routing decision for the access line: the prefill
// leg's policy and its reason, the share of the prompt the chosen rank
// was expected to hold (match < 0: the policy reads no cache; not shown)
// and the DP ranks of both legs. The last call wins (a retried request
// shows the attempt that ran).
func (r *Rec) Route(policy, reason string, match float64, prefillRank, decodeRank int) {
	if r != nil {
		r.setRoute(routeFields{set: true, policy: policy, reason: reason, match: match, prefillRank: prefillRank, decodeRank: decodeRank})
	}
}

// RouteAggregated is Route for a request served in one leg on an
// aggregated engine: the aggregated policy's decision and the DP rank it
// chose.
func (r *Rec) RouteAggregated(policy, reason string, match float64, rank int) {
	if r != nil {
		r.setRoute(routeFields{set: true, policy: policy, reason: reason, match: match, aggregated: true, aggRank: rank})
	}
}

// setRoute records the policy's decision f (Route, RouteAggregated) in
// place of an earlier one, keeping the route Layout recorded.
func (r *Rec) setRoute(f routeFields) {
	r.b.mu.Lock()
	if !r.ended {
		l := r.route
		f.layout, f.layoutReason, f.uncached, f.ratio = l.layout, l.layoutReason, l.uncached, l.ratio
		r.route = f
	}
	r.b.mu.Unlock()
}

// Layout records the route the request took (pd or aggregated) and why,
// with the uncached prompt tokens and their share of the prompt it was
// weighed on (uncached < 0: not weighed, not shown). Call it before
// Route or RouteAggregated; the last call wins, as Route's does.
func (r *Rec) Layout(layout, reason string, uncached int, ratio float64) {
	if r == nil {
		return
	}
	r.b.mu.Lock()
	if !r.ended {
		r.route.layout, r.route.layoutReason, r.route.uncached, r.route.ratio = layout, reason, uncached, ratio
	}
	r.b.mu.Unlock()
}

// Prompt records the prompt's length in tokens (n > 1 samples share it).
func (r *Rec) Prompt(n int) {
	if r == nil {
		return
	}
	r.b.mu.Lock()
	r.prompt = max(r.prompt, n)
	r.b.mu.Unlock()
}

// FirstToken records the time to the first output token, from the
// request's arrival (what its client waits), once per request, on every
// role that served it.
func (r *Rec) FirstToken() {
	if r == nil {
		return
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.ended || r.first {
		return
	}
	r.times.Mark(reqtime.FirstToken)
	now := b.elapsed()
	r.first, r.ttft = true, now-r.begin
	if !r.counted {
		return
	}
	for i := range r.roles {
		r.unqueueLocked(&r.roles[i]) // a first token: every prefill is done
	}
	b.total.ttft.add(now, r.ttft)
	for _, x := range r.roles {
		a := b.roles[x.name]
		a.ttft.add(now, r.ttft)
		a.ttftH.observe(r.ttft)
	}
}

// Tokens records n output tokens of the decode leg on role as they stream,
// so tok/s follows the stream rather than jumping when it ends. (n > 1
// samples may stream from different decodes; role "" credits every decode
// role of the request.)
func (r *Rec) Tokens(role string, n int) { r.output(role, n, -1) }

// Output records one output of n tokens of the decode leg on role as
// FirstToken (first) or ITL (gap, the time since the previous output,
// spread over its tokens) and Tokens do together, but a later output
// under one lock and one clock read: it runs per output of every stream.
func (r *Rec) Output(role string, first bool, gap time.Duration, n int) {
	if r == nil || n <= 0 {
		return
	}
	if first {
		r.FirstToken()
		r.output(role, n, -1)
		return
	}
	r.output(role, n, gap/time.Duration(n))
}

// output books n tokens and, when d >= 0, the per-token gap d before
// them (Tokens, Output).
func (r *Rec) output(role string, n int, d time.Duration) {
	if r == nil || n <= 0 {
		return
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.ended {
		return
	}
	r.times.Mark(reqtime.LastToken)
	r.completion += n
	if !r.counted {
		return
	}
	now := b.elapsed()
	if d >= 0 {
		r.itlLocked(role, d, now)
	}
	r.tokensLocked(role, n, now)
}

// ITL records one inter-token gap (per token) of the decode leg on role
// ("": every decode role of the request).
func (r *Rec) ITL(role string, d time.Duration) {
	if r == nil || d < 0 {
		return
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.ended || !r.counted {
		return
	}
	r.itlLocked(role, d, b.elapsed())
}

// tokensLocked books n tokens at now on the totals and role's rows (every
// decode row of the request for ""); callers hold b.mu.
func (r *Rec) tokensLocked(role string, n int, now time.Duration) {
	b, sec := r.b, second(now)
	b.total.tokens += uint64(n)
	b.total.toks.add(sec, uint64(n))
	for _, x := range r.roles {
		if streamsTokens(x.kind) && (role == "" || role == x.name) {
			a := b.roles[x.name]
			a.tokens += uint64(n)
			a.toks.add(sec, uint64(n))
		}
	}
}

// itlLocked books one per-token gap d at now, as tokensLocked books
// tokens; callers hold b.mu.
func (r *Rec) itlLocked(role string, d, now time.Duration) {
	b := r.b
	b.total.itl.add(now, d)
	for _, x := range r.roles {
		if streamsTokens(x.kind) && (role == "" || role == x.name) {
			a := b.roles[x.name]
			a.itl.add(now, d)
			a.itlH.observe(d)
		}
	}
}

// Attempts records how many more attempts than the first the dispatch
// made (retries and migrations, docs/protocol.md §11.9) and whether one
// was a migration, for the access line. The last call stays.
func (r *Rec) Attempts(retries int, migrated bool) {
	if r == nil {
		return
	}
	r.b.mu.Lock()
	if !r.ended {
		r.retries, r.migrated = max(r.retries, retries), r.migrated || migrated
	}
	r.b.mu.Unlock()
}

// Fail marks the request failed with an error code although its HTTP
// status may already be 200 (a stream that broke after its headers). The
// first code stays.
func (r *Rec) Fail(code string) {
	if r == nil {
		return
	}
	r.b.mu.Lock()
	if r.failed == "" && !r.ended {
		if code == "" {
			code = "failed"
		}
		r.failed = code
	}
	r.b.mu.Unlock()
}

// End closes the record with the HTTP status sent (0: 200). It counts the
// request once, as the deployment's error (a 5xx, or Fail was called) or
// a client error (another status ≥ 400 but 499), on every role that
// served it or else on the gateway row, and writes its access line.
// Later calls do nothing.
func (r *Rec) End(status int) {
	if r == nil {
		return
	}
	if status == 0 {
		status = http.StatusOK
	}
	b := r.b
	b.mu.Lock()
	if r.ended {
		b.mu.Unlock()
		return
	}
	r.ended = true
	now := b.elapsed()
	if r.counted && b.drain.cut && (r.abandoned || r.failed != "" || status >= 500) {
		// The shutdown's drain ended it at its deadline (the error it
		// sent, or the connection it closed): the server cut it, the
		// client did not leave (docs/architecture.md §5).
		status, r.abandoned, r.failed, r.reason = http.StatusServiceUnavailable, false, ReasonShutdown, ReasonShutdown
	}
	if r.abandoned && (status < 400 || status >= 500) {
		// The client left first: whatever the handler wrote after (a 502
		// for a generation that ended without its finish, to nobody) is
		// not the deployment's failure. A 4xx came from the request itself.
		status, r.failed, r.reason = StatusClientClosed, "", ""
	}
	failed := status >= 500 || r.failed != ""
	refused := !failed && status >= 400 && status != StatusClientClosed
	if r.counted && b.drain.on {
		if r.reason == ReasonShutdown {
			b.drain.cuts++
		} else {
			b.drain.finished++
		}
	}
	r.status = status
	if r.counted {
		sec := second(now)
		for i := range r.roles {
			r.unqueueLocked(&r.roles[i])
		}
		count := func(a *acct, inflight bool) {
			a.requests++
			a.plan.busy += (now - r.begin).Seconds()
			a.reqs.add(sec, 1)
			if inflight {
				a.inflight--
			}
			switch {
			case failed:
				a.errors++
			case refused:
				a.clientErrors++
			}
		}
		count(&b.total, true)
		if len(r.roles) == 0 {
			count(b.roles[GatewayRole], true)
		}
		for _, x := range r.roles {
			count(b.roles[x.name], x.legs > 0)
		}
	}
	line := access{method: r.method, path: r.path, status: status, prompt: r.prompt, completion: r.completion,
		latency: now - r.begin, id: r.id, failed: r.failed, reason: r.reason, moreRIDs: r.moreRIDs, retries: r.retries, migrated: r.migrated, route: r.route,
		traceID: r.traceID}
	line.engineRIDs = strings.Join(r.engineRIDs, ",")
	if r.first {
		line.ttft = r.ttft
	}
	stamps := r.times.Snapshot()
	line.gw, line.gwSet = reqtime.Compute(stamps)
	r.timeline = reqtime.TimelineOf(stamps, r.oneLeg())
	line.phases = r.timeline
	names := make([]string, len(r.roles))
	for i, x := range r.roles {
		names[i] = x.name
	}
	line.roles = strings.Join(names, ",")
	b.mu.Unlock()
	if b.log != nil && (r.counted || status >= 400) {
		line.write(b.log)
	}
}

// access is one request's access line. Never the prompt, the output or a
// header beyond the request id: the line is safe to share. Its fields, in
// this order (README.md "The gateway's access line"): method, path,
// status (499: the client went away first), prompt_tokens,
// completion_tokens, latency_ms, ttft_ms (once a token came), rid (the
// client's x-request-id, else the gateway's), engine_rids (every rid the
// engines saw: grep one in the engine logs), roles, reason (the error
// code of a failed request; always on a 5xx), error (a stream that broke
// after its 200), retries (attempts after the first: retries and
// migrations, docs/protocol.md §11.9), migrated (0 or 1). Fields others
// add go after these: the routing decision, then, on a stream that got
// its first token, the gateway's share of the time to it (gw_us, and its
// stages gw_tok_us, gw_send_us, gw_write_us: gateway/reqtime), then the
// request's phases that were measured (queued_ms, route_us, encode_ms,
// prefill_ms, kv_ms, decode_ms, itl_ms: docs/protocol.md §11.10) and
// the trace_id of a request whose trace was recorded.
type access struct {
	method, path       string
	status             int
	prompt, completion int
	latency, ttft      time.Duration
	id, roles, failed  string
	engineRIDs, reason string
	moreRIDs           int
	retries            int
	migrated           bool
	gw                 reqtime.Breakdown
	gwSet              bool
	route              routeFields
	phases             reqtime.Timeline
	traceID            string
}

func (a access) write(log *slog.Logger) {
	level := slog.LevelInfo
	if a.status >= 500 || a.failed != "" {
		level = slog.LevelWarn
	}
	attrs := make([]slog.Attr, 0, 28)
	attrs = append(attrs,
		slog.String("method", a.method),
		slog.String("path", a.path),
		slog.Int("status", a.status),
		slog.Int("prompt_tokens", a.prompt),
		slog.Int("completion_tokens", a.completion),
		slog.Float64("latency_ms", ms(a.latency)))
	if a.ttft > 0 {
		attrs = append(attrs, slog.Float64("ttft_ms", ms(a.ttft)))
	}
	roles := a.roles
	if roles == "" {
		roles = GatewayRole
	}
	attrs = append(attrs, slog.String("rid", a.id))
	if a.engineRIDs != "" {
		rids := a.engineRIDs
		if a.moreRIDs > 0 {
			rids += fmt.Sprintf(",+%d", a.moreRIDs)
		}
		attrs = append(attrs, slog.String("engine_rids", rids))
	}
	attrs = append(attrs, slog.String("roles", roles))
	reason := a.reason
	if reason == "" && a.status >= 500 {
		// Every 5xx says why; without a code, the status's own name.
		reason = strings.ReplaceAll(strings.ToLower(http.StatusText(a.status)), " ", "_")
		if reason == "" {
			reason = "server_error"
		}
	}
	if reason != "" && a.status >= 400 {
		attrs = append(attrs, slog.String("reason", reason))
	}
	if a.failed != "" {
		attrs = append(attrs, slog.String("error", a.failed))
	}
	// retries and migrated (docs/protocol.md §11.9) are on every line, so
	// a grep for retries=0 means what it says.
	migrated := 0
	if a.migrated {
		migrated = 1
	}
	attrs = append(attrs, slog.Int("retries", a.retries), slog.Int("migrated", migrated))
	if rt := a.route; rt.layout != "" {
		attrs = append(attrs, slog.String("layout", rt.layout), slog.String("layout_reason", rt.layoutReason))
		if rt.uncached >= 0 {
			attrs = append(attrs, slog.Int("uncached", rt.uncached), slog.String("ratio", strconv.FormatFloat(rt.ratio, 'f', 2, 64)))
		}
	}
	if rt := a.route; rt.set {
		attrs = append(attrs, slog.String("route", rt.policy), slog.String("route_reason", rt.reason))
		if rt.match >= 0 {
			attrs = append(attrs, slog.String("match", strconv.FormatFloat(rt.match, 'f', 2, 64)))
		}
		if rt.aggregated {
			attrs = append(attrs, slog.Int("aggregated_rank", rt.aggRank))
		} else {
			attrs = append(attrs, slog.Int("prefill_rank", rt.prefillRank), slog.Int("decode_rank", rt.decodeRank))
		}
	}
	if a.gwSet {
		attrs = append(attrs, slog.Int64("gw_us", a.gw.Total.Microseconds()), slog.Int64("gw_tok_us", a.gw.Tok.Microseconds()),
			slog.Int64("gw_send_us", a.gw.Send.Microseconds()), slog.Int64("gw_write_us", a.gw.Write.Microseconds()))
	}
	attrs = a.phaseAttrs(attrs)
	if a.traceID != "" {
		attrs = append(attrs, slog.String("trace_id", a.traceID))
	}
	log.LogAttrs(context.Background(), level, "access", attrs...)
}

// phaseAttrs appends the request's measured phases (docs/protocol.md
// §11.10): the routing decision in microseconds, the rest in
// milliseconds; itl_ms is the decode's mean gap per token after the
// first.
func (a access) phaseAttrs(attrs []slog.Attr) []slog.Attr {
	tl := a.phases
	if d, ok := tl.Duration(reqtime.Queued); ok {
		attrs = append(attrs, slog.Float64("queued_ms", ms(d)))
	}
	if d, ok := tl.Duration(reqtime.Route); ok {
		attrs = append(attrs, slog.Int64("route_us", d.Microseconds()))
	}
	for _, p := range []struct {
		phase reqtime.Phase
		key   string
	}{{reqtime.Encode, "encode_ms"}, {reqtime.Prefill, "prefill_ms"}, {reqtime.KV, "kv_ms"}, {reqtime.Decode, "decode_ms"}} {
		if d, ok := tl.Duration(p.phase); ok {
			attrs = append(attrs, slog.Float64(p.key, ms(d)))
		}
	}
	if d, ok := tl.Duration(reqtime.Decode); ok && a.completion > 1 {
		attrs = append(attrs, slog.Float64("itl_ms", msFine(d/time.Duration(a.completion-1))))
	}
	return attrs
}

// msFine is d in milliseconds rounded to a hundredth of one (inter-token
// gaps are a few milliseconds).
func msFine(d time.Duration) float64 {
	return float64(d.Round(10*time.Microsecond)) / float64(time.Millisecond)
}

// ms is d in milliseconds rounded to a tenth: short, sortable, greppable.
func ms(d time.Duration) float64 {
	return float64(d.Round(100*time.Microsecond)) / float64(time.Millisecond)
}

// BeginDrain starts counting the shutdown's drain and returns how many
// counted requests are in flight now.
func (b *Book) BeginDrain() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.drain.on {
		b.drain = drainAcct{on: true, inflight: b.total.inflight}
	}
	return b.drain.inflight
}

// Cut marks the drain's deadline: a counted request that ends from now
// on failed, with a 5xx or with its connection closed was cut by the
// shutdown (status 503, reason shutdown), not left by its client.
func (b *Book) Cut() {
	b.mu.Lock()
	b.drain.cut = true
	b.mu.Unlock()
}

// DrainCounts is the drain's account so far: in flight when it began,
// ended since (finished), and ended by the cut.
func (b *Book) DrainCounts() (inflight, finished, cut int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.drain.inflight, b.drain.finished, b.drain.cuts
}

// Totals are the headline numbers: every counted request once.
type Totals struct {
	Requests, Errors uint64
	ClientErrors     uint64 // refused with a 4xx (not 499): not the deployment's errors
	ReqPerS, TokPerS float64
	InFlight         int
	// Every counted request's time to first token and inter-token
	// latency, whatever role served it (the dashboard's trends).
	TTFTp50, TTFTp99, ITLp50, ITLp99 time.Duration
}

// Status reads the headline totals and one row per role (GatewayRole
// first, then the roles in Options order) at one instant.
func (b *Book) Status() (Totals, []snapshot.RoleTraffic) {
	b.mu.Lock()
	now := b.elapsed()
	sec := second(now)
	t := Totals{Requests: b.total.requests, Errors: b.total.errors, ClientErrors: b.total.clientErrors, InFlight: b.total.inflight,
		ReqPerS: b.total.reqs.rate(sec), TokPerS: b.total.toks.rate(sec)}
	rows := make([]snapshot.RoleTraffic, 0, len(b.order))
	ttft := make([][]time.Duration, 0, len(b.order)+1)
	itl := make([][]time.Duration, 0, len(b.order)+1)
	totTTFT, totITL := b.total.ttft.recent(now), b.total.itl.recent(now)
	for _, name := range b.order {
		a := b.roles[name]
		rows = append(rows, snapshot.RoleTraffic{Role: name, ReqPerS: a.reqs.rate(sec), TokPerS: a.toks.rate(sec),
			InFlight: a.inflight, Errors: a.errors, ClientErrors: a.clientErrors})
		ttft = append(ttft, a.ttft.recent(now))
		itl = append(itl, a.itl.recent(now))
	}
	b.cacheRows(rows, sec)
	b.mu.Unlock()
	// Sorted outside the lock: the requests' records never wait for it.
	for i := range rows {
		rows[i].TTFTp50, rows[i].TTFTp99 = quantiles(ttft[i])
		rows[i].ITLp50, rows[i].ITLp99 = quantiles(itl[i])
	}
	t.TTFTp50, t.TTFTp99 = quantiles(totTTFT)
	t.ITLp50, t.ITLp99 = quantiles(totITL)
	return t, rows
}

// ctxKey is how the HTTP layer hands a request's Rec to its dispatch.
type ctxKey struct{}

// NewContext returns ctx carrying rec.
func NewContext(ctx context.Context, rec *Rec) context.Context {
	return context.WithValue(ctx, ctxKey{}, rec)
}

// FromContext is the request's Rec, or nil.
func FromContext(ctx context.Context) *Rec {
	r, _ := ctx.Value(ctxKey{}).(*Rec)
	return r
}

// kindAggregated is the role kind that serves a request in one leg
// (profiles.KindAggregated).
const kindAggregated = "aggregated"

// oneLeg reports a request served by an aggregated engine, whose prefill
// and decode are one leg (reqtime.TimelineOf); b.mu held.
func (r *Rec) oneLeg() bool {
	for _, x := range r.roles {
		if x.kind == kindAggregated {
			return true
		}
	}
	return false
}

// Timeline is the request's phases as End found them (/metrics observes
// them once per request).
func (r *Rec) Timeline() reqtime.Timeline {
	if r == nil {
		return reqtime.Timeline{}
	}
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return r.timeline
}

// Summary is a request's record once it ended: what its trace carries
// (gateway/tracing). Stamps are its moments (gateway/reqtime), Timeline
// its phases as End found them.
type Summary struct {
	Method, Path       string
	Status             int
	ID, EngineRIDs     string
	Reason, Failed     string // the error code sent; the code of a stream that broke
	Prompt, Completion int
	Retries            int
	Migrated           bool
	Roles              []RoleLeg // the roles that served its legs, in the order they were sent
	Route              RouteSummary
	Stamps             [reqtime.NumStages]int64
	Timeline           reqtime.Timeline
}

// RoleLeg is a role that served one of a request's legs.
type RoleLeg struct{ Kind, Name string }

// RouteSummary is the routing decision the access line shows (Set: one
// was made): its layout and why, the first leg's policy, reason and
// cache match, and the legs' DP ranks (Aggregated: one leg, on AggRank).
type RouteSummary struct {
	Set                     bool
	Layout, LayoutReason    string // "": none recorded
	Policy, Reason          string
	Match                   float64 // < 0: the policy reads no cache
	PrefillRank, DecodeRank int
	Aggregated              bool
	AggRank                 int
}

// Summary is the record's facts; meaningful once End was called.
func (r *Rec) Summary() Summary {
	if r == nil {
		return Summary{}
	}
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	s := Summary{Method: r.method, Path: r.path, Status: r.status, ID: r.id, EngineRIDs: strings.Join(r.engineRIDs, ","),
		Reason: r.reason, Failed: r.failed, Prompt: r.prompt, Completion: r.completion, Retries: r.retries, Migrated: r.migrated,
		Stamps: r.times.Snapshot(), Timeline: r.timeline}
	for _, x := range r.roles {
		s.Roles = append(s.Roles, RoleLeg{Kind: x.kind, Name: x.name})
	}
	if rt := r.route; rt.set {
		s.Route = RouteSummary{Set: true, Layout: rt.layout, LayoutReason: rt.layoutReason, Policy: rt.policy, Reason: rt.reason, Match: rt.match,
			PrefillRank: rt.prefillRank, DecodeRank: rt.decodeRank, Aggregated: rt.aggregated, AggRank: rt.aggRank}
	}
	return s
}

package front

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/reqtime"
)

// Why the door sheds a request (Config.OnShed): the reasons of
// smg_admission_queue_rejected_total (docs/metrics.md).
const (
	ShedTimeout    = "timeout"     // no gateway.max_concurrent slot freed within queue_timeout (SMG's name)
	ShedBodyBudget = "body_budget" // the bodies of the requests in flight hold their whole budget
)

// Config is the front door's policy. Zero values mean "off".
type Config struct {
	// APIKey, when set, is the bearer token every non-public route needs.
	APIKey string
	// CORSOrigins are the origins answered with CORS headers ("*": any).
	CORSOrigins []string
	// MetricsPublic opens Route.Metrics routes without the API key.
	MetricsPublic bool
	// Body bounds request bodies; nil: no limits (tests).
	Body *BodyLimits
	// Admit bounds concurrent generation routes; nil: unlimited.
	Admit *Limiter
	// RequestTimeout bounds a whole request with a body (read, dispatch,
	// stream); 0: none.
	RequestTimeout time.Duration
	// Observe hears every request's route label, status and duration
	// (the HTTP metrics).
	Observe func(method, route string, status int, d time.Duration)
	// OnPanic hears a panic a route's boundary recovered.
	OnPanic func(where string, v any, stack []byte)
	// OnShed hears a request the door turned away for want of room
	// (ShedTimeout, ShedBodyBudget): the gateway counts them.
	OnShed func(reason string)
	// Begin, when set, starts a request's record once its id is known
	// (the traffic account, gateway/traffic): it may return the request
	// with a new context, and end hears the final status and the error
	// code sent with it ("" when none: the access line's reason=).
	Begin func(r *http.Request) (_ *http.Request, end func(status int, errCode string))
}

// Door wraps routes with the front door.
type Door struct {
	cfg  Config
	live atomic.Pointer[Live]
}

// Live is the part of the door's policy a running gateway may change
// (tsd apply, docs/architecture.md §4.3). Each request reads it once, when
// it arrives, and keeps what it read: a request admitted under the old
// limiter releases its slot there, one authorized with the old key
// finishes.
type Live struct {
	APIKey string
	// Keys are gateway.api_keys: more bearer keys, each naming its tenant
	// (a request's Caller).
	Keys        []Key
	CORSOrigins []string
	Admit       *Limiter
	// MetricsPublic opens the routes marked Route.Metrics without the key.
	MetricsPublic bool
}

// Key is one bearer key of gateway.api_keys: its tenant's name, the key
// itself, and the priority class of its requests (also their ceiling).
type Key struct {
	Name     string
	Secret   string
	Priority int
}

// Caller is who sent a request and what priority it asked for in its
// headers, as the door found them (the admission queue reads it).
type Caller struct {
	// Tenant is the name of the gateway.api_keys entry whose key the
	// request carried; "" for api_key_env's key or no key.
	Tenant string
	// Priority is that key's class; Keyed says there is one (it is then
	// also the highest class the request may ask for).
	Priority int
	Keyed    bool
	// Header is the class SMG's x-smg-priority header named; HasHeader
	// says it was sent (a value SMG does not know counts as default).
	Header    string
	HasHeader bool
}

type callerKey struct{}

// CallerFrom is the request's Caller (zero when the door set none).
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	if c == nil {
		return Caller{}
	}
	return *c
}

// PriorityHeader is SMG's header naming a request's priority class
// (system, interactive, default, bulk).
const PriorityHeader = "X-SMG-Priority"

// New builds a Door; cfg's APIKey, CORSOrigins, Admit and MetricsPublic
// are its first Live settings.
func New(cfg Config) *Door {
	d := &Door{cfg: cfg}
	d.live.Store(&Live{APIKey: cfg.APIKey, CORSOrigins: cfg.CORSOrigins, Admit: cfg.Admit, MetricsPublic: cfg.MetricsPublic})
	return d
}

// SetLive replaces the door's live settings; requests from now on see them.
func (d *Door) SetLive(l Live) { d.live.Store(&l) }

// Settings is the door's live settings now.
func (d *Door) Settings() Live { return *d.live.Load() }

// Route says how the door treats one route.
type Route struct {
	// Label is the metrics label: the path alone (no method), the same
	// for every route. "": the pattern a nested ServeMux matched, method
	// stripped.
	Label string
	// Public routes skip the API key (probes).
	Public bool
	// Metrics routes skip it while Live.MetricsPublic says so (/metrics).
	Metrics bool
	// Generate routes pass admission (Config.Admit).
	Generate bool
	// Admit, when set, decides Generate per request (a mounted mux's
	// routes share one wrapper).
	Admit func(*http.Request) bool
	// NoBody routes never read the body (the 404 and 405 of a path no
	// route serves): its size is not checked against max_model_len, a
	// prompt rule that says nothing of a route that takes none.
	NoBody bool
}

// generatePaths are the routes that start generations: the ones
// gateway.max_concurrent counts. A front end adding one adds it here.
var generatePaths = map[string]bool{
	"/generate":            true,
	"/v1/chat/completions": true,
	"/v1/completions":      true,
	"/v1/responses":        true,
}

// GeneratePath reports a POST to a route that starts generations.
func GeneratePath(r *http.Request) bool {
	return r.Method == http.MethodPost && generatePaths[r.URL.Path]
}

// Wrap returns h behind the door.
func (d *Door) Wrap(rt Route, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		label := func() string { return routeLabel(rt.Label, r) }
		var end func(int, string)
		defer func() {
			st := sw.status
			if st == 0 {
				st = http.StatusOK
			}
			if d.cfg.Observe != nil {
				d.cfg.Observe(r.Method, label(), st, time.Since(start))
			}
			if end != nil {
				end(st, sw.Header().Get(ErrorCodeHeader))
			}
		}()
		// Deferred after the metrics so the 500 it writes is what they count.
		defer d.recoverHTTP(func() *http.Request { return r }, label, sw)
		id := requestID(r)
		sw.Header().Set("X-Request-Id", id)
		// The request's moments (gateway/reqtime), in the writer's own
		// allocation; the first byte is stamped by the writer itself.
		r = r.WithContext(reqtime.NewContext(context.WithValue(r.Context(), idKey{}, id), &sw.times))
		if d.cfg.Begin != nil {
			r, end = d.cfg.Begin(r)
		}
		// Accept once the request's record has begun: the record's
		// latency and time to first token then hold every stage of the
		// gateway's share, so the access line's figures agree however the
		// goroutine is scheduled between the two (a preemption here once
		// put 4 ms of gw_tok_us before the record's start, on a loaded box).
		sw.times.Mark(reqtime.Accept)
		live := d.live.Load() // this request's settings, whatever an apply does meanwhile
		if d.cors(sw, r, live.CORSOrigins) {
			return // preflight answered
		}
		public := rt.Public || (rt.Metrics && live.MetricsPublic)
		var caller *Caller
		if !public && (live.APIKey != "" || len(live.Keys) > 0) {
			k, e := authorize(r, live.APIKey, live.Keys)
			if e != nil {
				WriteErrorUnread(sw, r, e)
				return
			}
			if k != nil {
				caller = &Caller{Tenant: k.Name, Priority: k.Priority, Keyed: true}
			}
		}
		if h := r.Header.Get(PriorityHeader); h != "" {
			if caller == nil {
				caller = &Caller{}
			}
			caller.Header, caller.HasHeader = h, true
		}
		if caller != nil {
			r = r.WithContext(context.WithValue(r.Context(), callerKey{}, caller))
		}
		if b := d.cfg.Body; b != nil && !rt.NoBody {
			release, e := b.Read(sw, r)
			defer release()
			if e != nil && e.Status == http.StatusTooManyRequests {
				d.shed(ShedBodyBudget)
			}
			if e != nil {
				if e.Code == codeBodyTimeout {
					WriteError(sw, e) // a client that stalls mid-body is not waited for again
				} else {
					WriteErrorUnread(sw, r, e)
				}
				return
			}
		}
		if r.ContentLength != 0 && d.cfg.RequestTimeout > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), d.cfg.RequestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		if live.Admit != nil && (rt.Generate || (rt.Admit != nil && rt.Admit(r))) {
			// The wait for a slot is the request's admission queue
			// (reqtime's queued phase).
			sw.times.Mark(reqtime.AdmitBegin)
			release, e := live.Admit.Acquire(r.Context())
			sw.times.Mark(reqtime.Admitted)
			if e != nil && e.Status == http.StatusTooManyRequests {
				d.shed(ShedTimeout)
			}
			if e != nil {
				WriteError(sw, e)
				return
			}
			defer release()
		}
		h.ServeHTTP(sw, r)
		sw.wrote() // a reply net/http flushes only now
	})
}

func (d *Door) shed(reason string) {
	if d.cfg.OnShed != nil {
		d.cfg.OnShed(reason)
	}
}

// routeLabel is a route's metrics label: the path alone, so the gateway's
// fixed routes and a mounted front end's label alike ("/v1/models", never
// "GET /v1/models").
func routeLabel(label string, r *http.Request) string {
	if label != "" {
		return label
	}
	p := r.Pattern // set in place by a nested ServeMux
	if p == "" {
		return "unmatched"
	}
	if _, path, ok := strings.Cut(p, " "); ok {
		return path
	}
	return p
}

// authorize checks the bearer token against key (api_key_env's, "" none)
// and every one of keys, each in constant time and all of them whatever
// matched; the key it is, nil for api_key_env's.
func authorize(r *http.Request, key string, keys []Key) (*Key, *Error) {
	got, ok := bearer(r.Header.Get("Authorization"))
	tok := []byte(got)
	found := -1
	legacy := key != "" && subtle.ConstantTimeCompare(tok, []byte(key)) == 1
	for i := range keys {
		if keys[i].Secret != "" && subtle.ConstantTimeCompare(tok, []byte(keys[i].Secret)) == 1 {
			found = i
		}
	}
	switch {
	case !ok:
	case found >= 0:
		return &keys[found], nil
	case legacy:
		return nil, nil
	}
	return nil, Errorf(http.StatusUnauthorized, "invalid_api_key", "", "missing or invalid API key (Authorization: Bearer ...)")
}

// bearer is the token of an Authorization header in the Bearer scheme,
// whose name is case-insensitive (RFC 7235 §2.1: "bearer" and "BEARER"
// are "Bearer").
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

type idKey struct{}

// RequestID is the request's id (x-request-id as sent, or minted).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(idKey{}).(string)
	return id
}

// requestID takes the client's x-request-id when it is a sane token
// (printable ASCII, at most 128 bytes: it goes into logs and a header),
// else mints one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 {
		ok := true
		for i := 0; i < len(id); i++ {
			if id[i] <= ' ' || id[i] > '~' {
				ok = false
				break
			}
		}
		if ok {
			return id
		}
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req-" + hex.EncodeToString(b[:])
}

// recoverHTTP is every route's per-request boundary: a panic fails that
// one request with a 500 while nothing was sent, with an error event on a
// started event stream, and cuts the connection otherwise; the daemon and
// the connection's other requests live on.
func (d *Door) recoverHTTP(req func() *http.Request, label func() string, sw *statusWriter) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v) // net/http's own way to cut a connection
	}
	route := label()
	if d.cfg.OnPanic != nil {
		d.cfg.OnPanic("http "+where(req(), route), v, debug.Stack())
	}
	e := Errorf(http.StatusInternalServerError, "internal_error", "", "internal error while serving %s (the gateway recovered: %v)", route, v)
	if sw.status == 0 {
		WriteError(sw, e)
		return
	}
	if strings.HasPrefix(sw.Header().Get("Content-Type"), "text/event-stream") {
		NewSSE(sw).Fail(e)
		return
	}
	// A JSON body was partly written: cut the connection so the client
	// sees a broken response, never a valid-looking truncated one.
	panic(http.ErrAbortHandler)
}

// where names a panic's site: the pattern the mux matched (method and
// path), else the route label.
func where(r *http.Request, label string) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return label
}

// statusWriter records the status for the metrics and the panic boundary,
// adds Retry-After to every 503, keeps Flush reachable for SSE and stamps
// the request's first byte (reqtime.FirstByte): the first flush of an
// event stream after the first token came.
type statusWriter struct {
	http.ResponseWriter
	status int
	times  reqtime.Stamps
	byte1  bool // FirstByte stamped, or never will be (not a stream)
}

// wrote stamps the first byte once the first token is in and what went
// out was an event stream (a JSON reply's first byte waits for the whole
// generation: it says nothing of the time to first token).
func (w *statusWriter) wrote() {
	if w.byte1 || !w.times.Has(reqtime.FirstToken) {
		return
	}
	w.byte1 = true
	if strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		w.times.Mark(reqtime.FirstByte)
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		SetRetryAfter(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if !w.byte1 {
		w.wrote()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Started reports whether w (a door-wrapped writer) has sent its status.
func Started(w http.ResponseWriter) bool {
	for {
		switch x := w.(type) {
		case *statusWriter:
			return x.status != 0
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return false
		}
	}
}

// Mounted is one mux the server dispatches to; Handler serves what Mux
// matches (nil: Mux itself, whose handlers are wrapped already).
type Mounted struct {
	Mux     *http.ServeMux
	Handler http.Handler
}

// Dispatch serves a request with the first mux that has a route for it;
// when none has, it answers 405 (with the union of Allow) if some mux
// knows the path under another method, else 404 — in the one error
// shape, through wrap (the door for unmatched requests).
func Dispatch(wrap func(http.Handler) http.Handler, muxes ...Mounted) http.Handler {
	refuse := wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range muxes {
			h, _ := m.Mux.Handler(r)
			probe := &probeWriter{h: http.Header{}}
			h.ServeHTTP(probe, r)
			if probe.status == http.StatusMethodNotAllowed {
				allow = append(allow, probe.h.Get("Allow"))
			}
		}
		if len(allow) > 0 {
			a := strings.Join(allow, ", ")
			w.Header().Set("Allow", a)
			WriteErrorUnread(w, r, Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "", "method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, a))
			return
		}
		WriteErrorUnread(w, r, Errorf(http.StatusNotFound, "not_found", "", "no route %s %s", r.Method, r.URL.Path))
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, m := range muxes {
			if _, pattern := m.Mux.Handler(r); pattern != "" {
				if m.Handler != nil {
					// Known before the wrapper runs, so a request the
					// door refuses (401, 413, 429) is labelled by its route.
					r.Pattern = pattern
					m.Handler.ServeHTTP(w, r)
				} else {
					m.Mux.ServeHTTP(w, r)
				}
				return
			}
		}
		refuse.ServeHTTP(w, r)
	})
}

// Serve is what an HTTP server runs behind the door: fixed's routes (each
// wrapped by the caller, with its own Route), then each mounted front
// end's mux, wrapped whole (its generation routes admitted by
// GeneratePath), then a 404 or 405 in the one error shape. fixed may be
// nil (a front end served alone, as its tests do).
func (d *Door) Serve(fixed *http.ServeMux, mounted ...*http.ServeMux) http.Handler {
	var muxes []Mounted
	if fixed != nil {
		muxes = append(muxes, Mounted{Mux: fixed})
	}
	for _, m := range mounted {
		if m != nil {
			muxes = append(muxes, Mounted{Mux: m, Handler: d.Wrap(Route{Admit: GeneratePath}, m)})
		}
	}
	return Dispatch(func(h http.Handler) http.Handler {
		return d.Wrap(Route{Label: "unmatched", Public: true, NoBody: true}, h)
	}, muxes...)
}

// probeWriter captures what the mux's own refusal handler would send.
type probeWriter struct {
	h      http.Header
	status int
}

func (p *probeWriter) Header() http.Header { return p.h }
func (p *probeWriter) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}
func (p *probeWriter) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}

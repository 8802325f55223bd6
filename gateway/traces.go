package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/tracing"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/profiles"
)

// The gateway's side of tracing (gateway/tracing, docs/metrics.md
// "Traces"): the tracer gateway.tracing asks for, swapped whole by tsd
// apply, and the request's trace begun at the front door and finished
// with its record.

// traceFlushTimeout bounds how long a replaced or shut-down tracer may
// take to send what it holds.
const traceFlushTimeout = 5 * time.Second

// exportErrorEvery is how often a failing exporter is logged: once, then
// at most once a minute (the counter says how many).
const exportErrorEvery = time.Minute

// tracerSlot holds the tracer requests are traced by now (nil: off).
type tracerSlot struct {
	cur        atomic.Pointer[tracing.Tracer]
	lastLogged atomic.Int64 // unix nanoseconds of the last export error logged
}

// newTracer builds the tracer p asks for; nil, nil when p is off. The
// headers come from the daemon's environment (headers_env); their value
// is never in an error.
func (g *Gateway) newTracer(p *profiles.TracingPlan) (*tracing.Tracer, error) {
	if p == nil || p.Endpoint == "" {
		return nil, nil
	}
	c := tracing.Config{Endpoint: p.Endpoint, SampleRatio: p.SampleRatio, Deployment: g.plan.Name, OnError: g.onTraceExportError}
	if env := p.HeadersEnv; env != "" {
		v := os.Getenv(env)
		if v == "" {
			return nil, fmt.Errorf("gateway.tracing.headers_env %s is empty or unset", env)
		}
		h, err := tracing.ParseHeaders(v)
		if err != nil {
			return nil, fmt.Errorf("gateway.tracing.headers_env %s: %w", env, err)
		}
		c.Headers = h
	}
	t, err := tracing.New(c)
	if err != nil {
		return nil, fmt.Errorf("gateway.tracing: %w", err)
	}
	return t, nil
}

// tracingChange is a change of the tracing settings, built but not yet
// in use (Reconfigure builds it before it changes anything, so a bad
// headers_env refuses the whole apply).
type tracingChange struct {
	changed bool
	next    *tracing.Tracer
	ratio   float64
}

// prepareTracing builds the tracer p asks for when it differs from old.
func (g *Gateway) prepareTracing(old, p *profiles.TracingPlan) (tracingChange, error) {
	if reflect.DeepEqual(old, p) && (p == nil) == (g.traces.cur.Load() == nil) {
		return tracingChange{}, nil
	}
	t, err := g.newTracer(p)
	if err != nil {
		return tracingChange{}, err
	}
	c := tracingChange{changed: true, next: t}
	if p != nil {
		c.ratio = p.SampleRatio
	}
	return c, nil
}

// apply puts the change in use: requests from now on are traced by the
// new tracer; the old one is flushed and shut down behind it (requests
// in flight finish their traces there, unsent ones are dropped).
func (c tracingChange) apply(g *Gateway) {
	if !c.changed {
		return
	}
	if prev := g.traces.cur.Swap(c.next); prev != nil {
		go g.shutdownTracer(prev)
	}
	if c.next != nil {
		g.log.Info("tracing requests", "endpoint", c.next.Endpoint(), "sample_ratio", c.ratio)
	}
}

// discard drops a change that will not be used.
func (c tracingChange) discard(g *Gateway) {
	if c.next != nil {
		go g.shutdownTracer(c.next)
	}
}

func (g *Gateway) shutdownTracer(t *tracing.Tracer) {
	defer g.recoverHere("tracer shutdown")
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	_ = t.Shutdown(ctx)
}

// stopTracing flushes the traces of the requests that ended and stops
// the exporter (Shutdown).
func (g *Gateway) stopTracing(ctx context.Context) {
	t := g.traces.cur.Swap(nil)
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, traceFlushTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		g.log.Warn("tracing: the last traces were not all sent", "err", err)
	}
}

// startTrace begins the trace of a generation request when tracing is
// on and the request is sampled; its id goes on the access line. Other
// routes are not traced.
func (g *Gateway) startTrace(r *http.Request, rec *traffic.Rec) *tracing.Request {
	t := g.traces.cur.Load()
	if t == nil || !front.GeneratePath(r) {
		return nil
	}
	q := t.Start(r, r.Method+" "+r.URL.Path)
	rec.Trace(q.TraceID())
	return q
}

// onTraceExportError counts a failed export and logs it, at most once a
// minute.
func (g *Gateway) onTraceExportError(err error) {
	g.metrics.traceErrors.Inc()
	now := time.Now().UnixNano()
	last := g.traces.lastLogged.Load()
	if now-last < int64(exportErrorEvery) || !g.traces.lastLogged.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn("tracing: export to the collector failed (logged at most once a minute; tsd_gateway_trace_export_errors_total counts them)", "err", err)
}

// recoverHere runs deferred in a gateway goroutine: a panic there is
// reported and swallowed.
func (g *Gateway) recoverHere(where string) {
	if v := recover(); v != nil {
		g.ReportPanic(where, v, debug.Stack())
	}
}

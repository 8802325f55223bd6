// Package tracing is the gateway's OpenTelemetry trace of each request
// (docs/metrics.md "Traces"): a server span per generation request, a
// child span per phase of its time (gateway/reqtime's timeline: queued,
// tokenize, route, encode, prefill, kv_transfer, write, decode) carrying
// the role, rank, policy, layout and tokens, exported over OTLP/HTTP with
// the official SDK. A client's W3C traceparent is honoured (the trace
// continues it; its sampled flag decides), other requests are sampled by
// trace id at the configured ratio.
//
// The spans are built once the request has ended, from its stamps, with
// their own timestamps: while a request runs, tracing costs one span
// start and nothing per token. Without an endpoint no Tracer exists and
// the gateway pays one nil check per request.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is where and how much to trace.
type Config struct {
	// Endpoint is the OTLP/HTTP traces URL (http://host:4318/v1/traces).
	Endpoint string
	// SampleRatio is the share of root traces recorded (0..1).
	SampleRatio float64
	// Headers go with every export (a collector's token): never logged.
	Headers map[string]string
	// Deployment names the deployment on every span (resource attribute
	// tsd.deployment); Version is tsd's (service.version).
	Deployment, Version string
	// OnError hears the exporter's failures (the gateway logs them, at
	// most once a minute, and counts them); nil: dropped.
	OnError func(error)
	// Timeout bounds one export; 0: 10 s.
	Timeout time.Duration
}

// Tracer records the requests' traces. Its methods are safe for
// concurrent use.
type Tracer struct {
	cfg  Config
	tp   *sdktrace.TracerProvider
	tr   trace.Tracer
	prop propagation.TraceContext
}

// New builds the exporter and the provider; nothing is sent until a
// sampled request ends.
func New(c Config) (*Tracer, error) {
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing sample ratio %g is outside 0..1", c.SampleRatio)
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(c.Endpoint), otlptracehttp.WithTimeout(c.Timeout)}
	if c.Headers != nil {
		opts = append(opts, otlptracehttp.WithHeaders(c.Headers))
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("create the OTLP/HTTP trace exporter for %s: %w", redact(c.Endpoint), err)
	}
	res := resource.NewSchemaless(keyService.String("tsd"), keyServiceVersion.String(c.Version), keyDeployment.String(c.Deployment))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(reporting{exp, c.OnError}),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
		sdktrace.WithResource(res),
	)
	quietGlobalHandler()
	return &Tracer{cfg: c, tp: tp, tr: tp.Tracer("github.com/tsd-project/tsd/gateway")}, nil
}

// Endpoint is where the tracer sends (credentials never in it: the
// profile refuses them).
func (t *Tracer) Endpoint() string { return t.cfg.Endpoint }

// Flush sends every span ended so far.
func (t *Tracer) Flush(ctx context.Context) error { return t.tp.ForceFlush(ctx) }

// Shutdown flushes and stops the exporter; the tracer records nothing
// after.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

// Start begins the trace of one request: its server span, continuing the
// client's traceparent when it sent one. It returns nil for a request
// that is not sampled (nothing more to do for it).
func (t *Tracer) Start(r *http.Request, name string) *Request {
	ctx := t.prop.Extract(context.Background(), propagation.HeaderCarrier(r.Header))
	ctx, span := t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() {
		return nil
	}
	return &Request{tr: t.tr, ctx: ctx, span: span}
}

// Request is one sampled request's trace, finished once (Finish).
type Request struct {
	tr   trace.Tracer
	ctx  context.Context // carries span: the phases are its children
	span trace.Span
	done atomic.Bool
}

// TraceID is the request's trace id in hex (the access line's trace_id).
func (q *Request) TraceID() string {
	if q == nil {
		return ""
	}
	return q.span.SpanContext().TraceID().String()
}

// reporting hands each failed export to onError.
type reporting struct {
	sdktrace.SpanExporter
	onError func(error)
}

func (r reporting) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := r.SpanExporter.ExportSpans(ctx, spans)
	if err != nil && r.onError != nil {
		r.onError(err)
	}
	return err
}

var quietOnce sync.Once

// quietGlobalHandler keeps the SDK's own error reports (which a failing
// export also raises) off the daemon's stderr: the gateway's OnError
// logs them, rate-limited, in its log.
func quietGlobalHandler() {
	quietOnce.Do(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
}

// ParseHeaders reads OTEL_EXPORTER_OTLP_HEADERS' format:
// key=value,key2=value2 with URL-escaped values. Errors name the entry's
// position, never its value (a token).
func ParseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("header %d is not key=value", i+1)
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("header %d (%s): bad escape in its value", i+1, k)
		}
		out[k] = val
	}
	if len(out) == 0 {
		return nil, errors.New("no header in it")
	}
	return out, nil
}

// redact is an endpoint with any credentials masked.
func redact(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil {
		return u.Redacted()
	}
	return "the configured endpoint"
}

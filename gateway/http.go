package gateway

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/traffic"
)

// RequestError is a request the gateway refuses or fails: the front
// door's one error type (Status, Code as SMG's X-SMG-Error-Code, Param
// naming the offending field), rendered by front.WriteError.
type RequestError = front.Error

func (g *Gateway) routes() {
	g.mux.Handle("GET /health", g.door.Wrap(front.Route{Label: "/health", Public: true}, http.HandlerFunc(handleHealth)))
	g.mux.Handle("GET /liveness", g.door.Wrap(front.Route{Label: "/liveness", Public: true}, http.HandlerFunc(handleHealth)))
	g.mux.Handle("GET /readiness", g.door.Wrap(front.Route{Label: "/readiness", Public: true}, http.HandlerFunc(g.handleReadiness)))
	// The model list and the metrics (role names, request rates, GPU
	// load) need the key like serving routes; probes stay open, and
	// gateway.metrics_public opens /metrics for a scraper without it.
	g.mux.Handle("GET /v1/models", g.door.Wrap(front.Route{Label: "/v1/models"}, http.HandlerFunc(g.handleModels)))
	g.mux.Handle("GET /metrics", g.door.Wrap(front.Route{Label: "/metrics", Metrics: true}, promhttp.HandlerFor(g.opts.Registry, promhttp.HandlerOpts{})))
}

// newDoor is the gateway's front door (gateway/front): one API-key check,
// body limits, request id, CORS, admission and HTTP metrics for its own
// routes and a mounted front end's alike.
// gateway.max_concurrent's waiters count as queued requests, like those
// waiting for a routable worker.
func (g *Gateway) newDoor(apiKey string) *front.Door {
	return front.New(front.Config{
		APIKey:         apiKey,
		CORSOrigins:    g.plan.Gateway.CORSOrigins,
		MetricsPublic:  g.plan.Gateway.MetricsPublic,
		Body:           &front.BodyLimits{Max: g.opts.MaxBodyBytes, ReadTimeout: g.opts.BodyReadTimeout, Budget: g.opts.MaxInflightBodies, MaxModelLen: g.bodyModelLen},
		Admit:          front.NewLimiter(g.plan.Gateway.MaxConcurrent, g.opts.QueueTimeout, func(d int) { g.queuedNow.Add(int64(d)) }),
		RequestTimeout: g.opts.RequestTimeout + g.opts.BodyReadTimeout,
		Observe: func(method, route string, status int, d time.Duration) {
			g.metrics.httpRequests.WithLabelValues(method, route).Inc()
			g.metrics.httpResponses.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
			g.metrics.httpDuration.WithLabelValues(method, route).Observe(d.Seconds())
		},
		OnPanic: g.ReportPanic,
		OnShed:  g.metrics.shed,
		// The request's one record in the traffic account; the
		// dispatch finds it in the context (gateway/traffic).
		Begin: func(r *http.Request) (*http.Request, func(int, string)) {
			rec := g.metrics.traffic.Begin(r.Method, r.URL.Path)
			rec.ID(front.RequestID(r.Context()))
			times := reqtime.FromContext(r.Context())
			rec.Times(times)
			trace := g.startTrace(r, rec) // nil: tracing off, or not sampled
			return r.WithContext(traffic.NewContext(r.Context(), rec)), func(status int, code string) {
				rec.Reason(code)
				rec.End(status)
				if !traffic.Counted(r.Method) {
					return
				}
				if b, ok := times.Breakdown(); ok {
					g.metrics.gwAdded.Observe(b.Total.Seconds())
				}
				g.metrics.phases(rec.Timeline())
				if trace != nil { // tracing off or not sampled: nothing more
					trace.Finish(rec.Summary())
				}
			}
		},
	})
}

// handler is what the HTTP server runs: the gateway's routes, then a
// mounted front end's, then a 404/405 in the one error shape.
func (g *Gateway) handler(sub *http.ServeMux) http.Handler { return g.door.Serve(g.mux, sub) }

// WriteError writes the one error shape (gateway/front).
func WriteError(w http.ResponseWriter, err error) { front.WriteError(w, err) }

func writeJSON(w http.ResponseWriter, status int, v any) { front.WriteJSON(w, status, v) }

func handleHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "OK")
}

// handleReadiness answers 200 when the gateway can serve a request: a
// prefill and a decode rank routed, and in EPD mode an encode rank too
// (Ready); the counts include every worker a request may need.
func (g *Gateway) handleReadiness(w http.ResponseWriter, _ *http.Request) {
	h := g.health()
	if g.Ready() {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "healthy_workers": h.Healthy, "total_workers": h.Total})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "insufficient healthy workers",
		"healthy_workers": h.Healthy, "total_workers": h.Total})
}

func (g *Gateway) modelName() string {
	if g.plan.ServedModelName != "" {
		return g.plan.ServedModelName
	}
	return g.plan.Model
}

func (g *Gateway) handleModels(w http.ResponseWriter, _ *http.Request) {
	if g.health().Healthy == 0 {
		WriteError(w, &RequestError{Status: http.StatusServiceUnavailable, Code: "no_models", Message: "No models available"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": g.modelName(), "object": "model", "created": 0, "owned_by": "tsd", "root": g.plan.Model}}})
}

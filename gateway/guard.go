package gateway

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
)

// ReportPanic records a panic that a recover boundary caught: logged with
// its stack, counted (tsd_gateway_panics_total{where}), and reported as a
// "panic" event (Options.OnEvent). Front ends that run their own
// goroutines (gateway/openai) call it through an optional interface.
func (g *Gateway) ReportPanic(where string, v any, stack []byte) {
	g.panics.Add(1)
	g.log.Error("recovered panic", "where", where, "panic", fmt.Sprint(v), "stack", string(stack))
	g.metrics.panics.WithLabelValues(panicSite(where)).Inc()
	g.event("panic", "", fmt.Sprintf("gateway recovered a panic in %s: %v", where, v))
}

// panicSite is the metric label: the boundary's kind without the role name
// the lane puts first ("decode-1 output batch" → "output batch"), so the
// series stay few.
func panicSite(where string) string {
	for _, w := range []string{"output batch", "input message", "handshake message", "peer event", "watchdog", "send", "lane loop", "zmtp watcher"} {
		if strings.Contains(where, w) {
			return "lane " + w
		}
	}
	return where
}

// event hands a verdict worth showing to Options.OnEvent and counts it.
func (g *Gateway) event(kind, role, msg string) {
	g.metrics.events.WithLabelValues(kind).Inc()
	if fn := g.onEvent.Load(); fn != nil {
		(*fn)(kind, role, msg)
	}
}

// recoverHere is deferred at the top of a per-request goroutine: a panic
// is reported and onPanic (may be nil) ends that one request cleanly.
func (g *Gateway) recoverHere(where string, onPanic func(err error)) {
	v := recover()
	if v == nil {
		return
	}
	g.ReportPanic(where, v, debug.Stack())
	if onPanic != nil {
		onPanic(fmt.Errorf("internal error in the gateway's %s (recovered: %v)", where, v))
	}
}

// recoverHTTP is deferred by every route's wrapper: a panic fails that
// one request with a 500 in the OpenAI/SMG error shape while nothing was
// sent yet, or with an error event when an event stream had started; the
// connection and the daemon live on.
func (g *Gateway) recoverHTTP(routeLabel func() string, sw *statusWriter) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v) // net/http's own way to cut a connection
	}
	route := routeLabel()
	g.ReportPanic("http "+route, v, debug.Stack())
	msg := fmt.Sprintf("internal error while serving %s (the gateway recovered: %v)", route, v)
	if sw.status == 0 {
		WriteError(sw, &RequestError{Status: http.StatusInternalServerError, Code: "internal_error", Message: msg})
		return
	}
	if strings.HasPrefix(sw.Header().Get("Content-Type"), "text/event-stream") {
		b, _ := jsonMarshal(map[string]any{"error": map[string]any{"message": msg, "type": "internal_error", "code": "internal_error"}})
		_, _ = sw.Write(append(append([]byte("data: "), b...), '\n', '\n'))
		sw.Flush()
		return
	}
	// A JSON body was partly written: cut the connection so the client
	// sees a broken response, never a valid-looking truncated one.
	panic(http.ErrAbortHandler)
}

package gateway

import (
	"fmt"
	"strings"
)

// ReportPanic records a panic that a recover boundary caught: logged with
// its stack, counted (tsd_gateway_panics_total{where}), and reported as a
// "panic" event (Options.OnEvent). Front ends that run their own
// goroutines (gateway/openai) call it through tokenapi.Engine.
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
	for _, w := range []string{"output batch", "input message", "handshake message", "peer event", "watchdog", "rank book", "send", "lane loop", "zmtp watcher"} {
		if strings.Contains(where, w) {
			return "lane " + w
		}
	}
	return where
}

// event hands a verdict worth showing to Options.OnEvent and counts it.
func (g *Gateway) event(kind, role, msg string) {
	g.metrics.events.WithLabelValues(kind).Inc()
	if g.opts.OnEvent != nil {
		g.opts.OnEvent(kind, role, msg)
	}
}

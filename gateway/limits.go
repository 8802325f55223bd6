package gateway

// Limits a request meets before dispatch: the body limits themselves are
// the front door's (gateway/front body.go); here are their defaults. The
// prompt is checked against the engines' max_model_len by the dispatch
// (gateway/dispatch limits.go).

import "time"

// Defaults of the HTTP limits (Options).
const (
	DefaultBodyReadTimeout   = 30 * time.Second
	DefaultMaxInflightBodies = 256 << 20
)

// bodyModelLen is the context length request bodies are bounded by
// (gateway/front BodyLimits): 0 when unknown (no rank registered yet) or
// when images may ride in the body (epd mode: data: URLs are large).
func (g *Gateway) bodyModelLen() int {
	if g.disp.EPDMode() {
		return 0
	}
	return g.MaxModelLen()
}

// MaxModelLen is the smallest max_model_len among registered prefill and
// decode ranks (a prompt must fit both legs), 0 when none reported one.
func (g *Gateway) MaxModelLen() int { return g.disp.MaxModelLen() }

package gateway

// Limits a request meets before dispatch: the body limits themselves are
// the front door's (gateway/front body.go); here are their defaults and
// the prompt checked against the engines' max_model_len.

import (
	"net/http"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/snapshot"
)

// Defaults of the HTTP limits (Options).
const (
	DefaultBodyReadTimeout   = 30 * time.Second
	DefaultMaxInflightBodies = 256 << 20
	// MaxBytesPerToken bounds how many body bytes one prompt token can
	// take (front.MaxBytesPerToken).
	MaxBytesPerToken = front.MaxBytesPerToken
)

// bodyModelLen is the context length request bodies are bounded by
// (gateway/front BodyLimits): 0 when unknown (no rank registered yet) or
// when images may ride in the body (epd mode: data: URLs are large).
func (g *Gateway) bodyModelLen() int {
	if g.epdMode() {
		return 0
	}
	return g.MaxModelLen()
}

// MaxModelLen is the smallest max_model_len among registered prefill and
// decode ranks (a prompt must fit both legs), 0 when none reported one.
func (g *Gateway) MaxModelLen() int {
	best := 0
	for _, ws := range [][]*lane.Worker{g.prefill, g.decode} {
		for _, w := range ws {
			for _, st := range w.Ranks() {
				if st.State != snapshot.RankRegistered || st.Registration == nil || st.Registration.MaxModelLen <= 0 {
					continue
				}
				if n := int(st.Registration.MaxModelLen); best == 0 || n < best {
					best = n
				}
			}
		}
	}
	return best
}

// checkPromptLen refuses a tokenized prompt the engines cannot hold, or
// whose max_new_tokens would run past the context (before, a 1M-token
// prompt went to the engines and came back a 502, which clients retry).
func (g *Gateway) checkPromptLen(r *gen.Request) error {
	if e := CheckContext(len(r.InputIDs), r.Sampling.MaxNewTokens, g.MaxModelLen(), "input_ids", "max_new_tokens"); e != nil {
		return e
	}
	return nil
}

// CheckContext is the context-length admission rule: a prompt of prompt
// tokens must leave room for at least one output token, and prompt +
// maxTokens (when set) must fit maxModelLen (0: unknown, admitted). The
// 400 names both numbers and the client's fields.
func CheckContext(prompt int, maxTokens *int, maxModelLen int, promptParam, maxParam string) *front.Error {
	if maxModelLen <= 0 {
		return nil
	}
	if prompt >= maxModelLen {
		return front.Errorf(http.StatusBadRequest, "context_length_exceeded", promptParam,
			"the prompt has %d tokens; the engines' context length (max_model_len) is %d tokens", prompt, maxModelLen)
	}
	if maxTokens != nil && prompt+*maxTokens > maxModelLen {
		return front.Errorf(http.StatusBadRequest, "context_length_exceeded", promptParam,
			"the prompt has %d tokens and %s asks for %d more: %d in all, over the engines' context length (max_model_len) of %d tokens",
			prompt, maxParam, *maxTokens, prompt+*maxTokens, maxModelLen)
	}
	return nil
}

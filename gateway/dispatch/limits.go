package dispatch

import (
	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/gen"
)

// checkPromptLen refuses a tokenized prompt the engines cannot hold, or
// whose max_new_tokens would run past the context (before, a 1M-token
// prompt went to the engines and came back a 502, which clients retry).
func (g *Dispatcher) checkPromptLen(r *gen.Request) error {
	if e := front.CheckContext(len(r.InputIDs), r.Sampling.MaxNewTokens, g.MaxModelLen(), "input_ids", "max_new_tokens"); e != nil {
		return e
	}
	return nil
}

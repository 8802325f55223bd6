package dispatch

import (
	"net/http"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/gen"
)

// checkPromptLen refuses a tokenized prompt the engines cannot hold, or
// whose max_new_tokens would run past the context (before, a 1M-token
// prompt went to the engines and came back a 502, which clients retry).
func (g *Dispatcher) checkPromptLen(r *gen.Request) error {
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

package openai

import (
	"math"

	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// promptTokenLogprobs pairs the prefill's prompt logprobs (first event,
// tokenapi.Event.PromptLogprobs) with the prompt tokens they cover, for echo
// with logprobs. A position without a logprob (the first token) stays NaN
// and renders as null.
func promptTokenLogprobs(req tokenapi.Request, vals []float64) []tokenLogprob {
	start := req.LogprobStartLen
	if start < 0 || start > len(req.InputIDs) {
		return nil
	}
	ids := req.InputIDs[start:]
	out := make([]tokenLogprob, 0, len(vals))
	for i, v := range vals {
		if i < len(ids) {
			out = append(out, tokenLogprob{id: ids[i], logprob: v})
		}
	}
	return out
}

// jsonLogprob is a logprob as JSON: null where there is none.
func jsonLogprob(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

package generate

import (
	"math"
	"net/http"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// Finish is meta_info.finish_reason: why a generation ended (tokenapi.Finish
// reasons) and, for aborts, the message.
type Finish struct {
	Type    string `json:"type"`
	Message string `json:"message,omitempty"`
}

// Meta is a reply's meta_info, as SGLang shapes it.
type Meta struct {
	ID               string   `json:"id"`
	FinishReason     *Finish  `json:"finish_reason"`
	PromptTokens     int      `json:"prompt_tokens"`
	CompletionTokens int      `json:"completion_tokens"`
	CachedTokens     int      `json:"cached_tokens"` // as SGLang: prompt tokens the prefill found cached
	E2ELatency       float64  `json:"e2e_latency"`
	OutputLogprobs   [][2]any `json:"output_token_logprobs,omitempty"`
	InputLogprobs    [][2]any `json:"input_token_logprobs,omitempty"`
	// OutputTopLogprobs is SGLang's: per token, its top_logprobs_num
	// alternatives as [logprob, token_id, null] (no text asked).
	OutputTopLogprobs [][][3]any `json:"output_top_logprobs,omitempty"`
}

// Usage is the token counts of a finished generation.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Response is /generate's JSON answer, and each SSE event's payload
// (output_ids then holds the tokens new since the previous event).
type Response struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  Meta    `json:"meta_info"`
	Usage     *Usage  `json:"usage,omitempty"`
}

// logprobPairs is SGLang's [[logprob, token_id], ...]; a position
// without a logprob (NaN: the first prompt token) is null.
func logprobPairs(ids []int32, lps []float64) [][2]any {
	if len(lps) == 0 {
		return nil
	}
	out := make([][2]any, 0, len(lps))
	for i, lp := range lps {
		if i < len(ids) {
			var v any = lp
			if math.IsNaN(lp) {
				v = nil
			}
			out = append(out, [2]any{v, ids[i]})
		}
	}
	return out
}

// topTriples is SGLang's output_top_logprobs for tokens' alternatives.
func topTriples(top [][]tokenapi.TopLogprob) [][][3]any {
	if len(top) == 0 {
		return nil
	}
	out := make([][][3]any, len(top))
	for i, alts := range top {
		out[i] = make([][3]any, len(alts))
		for j, a := range alts {
			out[i][j] = [3]any{a.Logprob, a.ID, nil}
		}
	}
	return out
}

// topLogprobsError is an engine that answered a top-logprob request
// without alternatives (tokenapi.CheckTopLogprobs).
func topLogprobsError(err error) *front.Error {
	return &front.Error{Status: http.StatusBadRequest, Code: "top_logprobs_unsupported", Param: "top_logprobs_num", Message: err.Error(), Cause: err}
}

// promptIDs are the prompt tokens prompt logprobs cover.
func promptIDs(r tokenapi.Request) []int32 {
	if r.LogprobStartLen < 0 || r.LogprobStartLen > len(r.InputIDs) {
		return nil
	}
	return r.InputIDs[r.LogprobStartLen:]
}

package generate

import (
	"encoding/json"
	"net/http"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// generateBody is SGLang's native /generate request: input_ids, or text the
// gateway tokenizes (Options.Encode).
type generateBody struct {
	Text            *string         `json:"text"`
	InputIDs        []int32         `json:"input_ids"`
	SamplingParams  *samplingBody   `json:"sampling_params"`
	Stream          bool            `json:"stream"`
	ReturnLogprob   bool            `json:"return_logprob"`
	LogprobStartLen *int            `json:"logprob_start_len"`
	TopLogprobsNum  int             `json:"top_logprobs_num"`
	RID             string          `json:"rid"`
	ImageData       json.RawMessage `json:"image_data"`
	// Priority is SGLang's priority field (docs/protocol.md §11.13):
	// larger is served first by the gateway's queue.
	Priority *int `json:"priority"`
}

type samplingBody struct {
	MaxNewTokens      *int            `json:"max_new_tokens"`
	MinNewTokens      int             `json:"min_new_tokens"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              float64         `json:"min_p"`
	FrequencyPenalty  float64         `json:"frequency_penalty"`
	PresencePenalty   float64         `json:"presence_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	StopTokenIDs      []int32         `json:"stop_token_ids"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	Seed              *int64          `json:"seed"`
	N                 *int            `json:"n"`
	Stop              json.RawMessage `json:"stop"`
}

// generateFields are /generate's fields beyond generateBody's: none are
// ignored, so a field the gateway does not implement is refused by name.
var generateFields = &front.Fields{
	Nested: map[string]*front.Fields{"sampling_params": {
		Refused: map[string]string{
			"json_schema":     "constrained decoding is not wired on /generate yet",
			"regex":           "constrained decoding is not wired on /generate yet",
			"ebnf":            "constrained decoding is not wired on /generate yet",
			"logit_bias":      "logit_bias is not implemented by the gateway",
			"structural_tag":  "structural_tag is not wired on /generate yet",
			"custom_params":   "custom logit processors are not supported",
			"thinking_budget": "thinking_budget is not wired yet",
		},
		// /generate answers token ids, never text: these shape only text.
		Ignored: map[string]string{
			"skip_special_tokens":           "no text is produced",
			"spaces_between_special_tokens": "no text is produced",
			"no_stop_trim":                  "no stop strings on /generate",
		},
	}},
}

// generateName maps a sampling field's engine name to /generate's.
func generateName(field string) string { return "sampling_params." + field }

// toRequest validates the body; encode tokenizes text (nil: no tokenizer
// here) after the byte-level context pre-check against maxModelLen.
func (b *generateBody) toRequest(encode func(string) ([]int32, error), maxModelLen int) (tokenapi.Request, error) {
	switch {
	case len(b.ImageData) > 0 && string(b.ImageData) != "null":
		return tokenapi.Request{}, &front.Error{Status: http.StatusBadRequest, Code: "multimodal_not_supported", Param: "image_data", Message: "/generate takes no images (it has no tokenizer or image preprocessor); send images as image_url parts to /v1/chat/completions"}
	case b.Text != nil && b.InputIDs != nil:
		return tokenapi.Request{}, front.BadRequest("text", "send text or input_ids, not both")
	case b.Text != nil && encode == nil:
		return tokenapi.Request{}, front.BadRequest("text", "text input needs the model's tokenizer, which did not load in this gateway; send input_ids")
	case b.Text == nil && b.InputIDs == nil:
		return tokenapi.Request{}, front.BadRequest("input_ids", "input_ids (or text) is required")
	}
	if err := tokenapi.CheckPriority(b.Priority); err != nil {
		return tokenapi.Request{}, front.BadRequest("priority", "%w", err)
	}
	r := tokenapi.Request{RID: b.RID, InputIDs: b.InputIDs, Stream: b.Stream, ReturnLogprob: b.ReturnLogprob,
		TopLogprobsNum: b.TopLogprobsNum, LogprobStartLen: -1, Priority: b.Priority}
	if b.LogprobStartLen != nil && b.ReturnLogprob {
		// SGLang: prompt logprobs come with return_logprob only.
		r.LogprobStartLen = *b.LogprobStartLen
	}
	if s := b.SamplingParams; s != nil {
		if len(s.Stop) > 0 && string(s.Stop) != "null" && string(s.Stop) != "[]" && string(s.Stop) != `""` {
			return r, front.BadRequest("sampling_params.stop", "stop strings need a tokenizer; /generate takes stop_token_ids")
		}
		if s.N != nil && *s.N != 1 {
			return r, front.BadRequest("sampling_params.n", "n must be 1 on /generate")
		}
		r.Sampling = tokenapi.Sampling{MaxNewTokens: s.MaxNewTokens, MinNewTokens: s.MinNewTokens,
			Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, MinP: s.MinP,
			FrequencyPenalty: s.FrequencyPenalty, PresencePenalty: s.PresencePenalty, RepetitionPenalty: s.RepetitionPenalty,
			StopTokenIDs: s.StopTokenIDs, IgnoreEOS: s.IgnoreEOS, Seed: s.Seed}
		if fe := tokenapi.CheckSampling(r.Sampling, generateName); fe != nil {
			return r, front.BadRequest(fe.Field, "%s", fe.Message)
		}
	}
	if b.Text != nil {
		if maxModelLen > 0 && len(*b.Text) > maxModelLen*front.MaxBytesPerToken {
			return r, front.Errorf(http.StatusBadRequest, "context_length_exceeded", "text",
				"the text is %d bytes, more than the engines' context length (max_model_len %d tokens) can hold", len(*b.Text), maxModelLen)
		}
		ids, err := encode(*b.Text)
		if err != nil {
			return r, front.Errorf(http.StatusInternalServerError, "tokenization_failed", "text", "tokenize text: %w", err)
		}
		r.InputIDs = ids
	}
	param := "input_ids"
	if b.Text != nil {
		param = "text"
	}
	if e := front.CheckContext(len(r.InputIDs), r.Sampling.MaxNewTokens, maxModelLen, param, "sampling_params.max_new_tokens"); e != nil {
		return r, e
	}
	return r, nil
}

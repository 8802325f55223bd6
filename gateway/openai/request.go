package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// common holds the request fields chat and completions share.
type common struct {
	Model               string          `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MinTokens           int             `json:"min_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	StopTokenIDs        []int32         `json:"stop_token_ids"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	SkipSpecialTokens      *bool `json:"skip_special_tokens"`
	IncludeStopStrInOutput bool  `json:"include_stop_str_in_output"`
	NoStopTrim             bool  `json:"no_stop_trim"`
	BestOf                 *int  `json:"best_of"`
	// Priority is SGLang's and vLLM's priority field (docs/protocol.md
	// §11.13): larger is served first by the gateway's queue.
	Priority *int `json:"priority"`
}

// plan is a validated request, ready to run.
type plan struct {
	model        string
	n            int
	stream       bool
	includeUsage bool
	sampling     tokenapi.Sampling
	stops        []string
	stopByID     map[int32]string
	skipSpecial  bool
	includeStop  bool
	logprobs     bool
	topLogprobs  int
	routingKey   string // the X-SMG-Routing-Key header (tokenapi.Request.RoutingKey)
	priority     *int   // the priority field (tokenapi.Request.Priority)
}

// stopStrings accepts null, "x" or ["x", ...] (at most 4 in OpenAI; we allow 16).
func stopStrings(raw json.RawMessage) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var items []*string
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(items) > 16 {
		return nil, badRequest("stop", "at most 16 stop strings")
	}
	many := make([]string, len(items))
	for i, it := range items {
		if it == nil {
			// OpenAI answers [null] with a 400; read as "" it would
			// silently stop nothing.
			return nil, badRequest(fmt.Sprintf("stop[%d]", i), fmt.Sprintf("invalid type for 'stop[%d]': expected a string, but got null instead", i))
		}
		many[i] = *it
	}
	return many, nil
}

func (s *Server) plan(c *common) (*plan, *apiError) {
	if s.opts.Model != "" && c.Model != "" && c.Model != s.opts.Model {
		return nil, errorf(http.StatusNotFound, "model_not_found", "model", fmt.Sprintf("No worker available for model '%s'", c.Model))
	}
	p := &plan{model: c.Model, n: 1, stream: c.Stream, skipSpecial: true, priority: c.Priority}
	if err := tokenapi.CheckPriority(c.Priority); err != nil {
		return nil, badRequest("priority", err.Error())
	}
	if p.model == "" {
		p.model = s.opts.Model
	}
	if c.N != nil {
		p.n = *c.N
	}
	if p.n < 1 || p.n > s.opts.MaxN {
		return nil, badRequest("n", fmt.Sprintf("n must be between 1 and %d", s.opts.MaxN))
	}
	if c.BestOf != nil && *c.BestOf != p.n {
		return nil, badRequest("best_of", "best_of other than n is not supported")
	}
	if c.StreamOptions != nil {
		if !c.Stream {
			return nil, badRequest("stream_options", "stream_options is only allowed with stream=true")
		}
		p.includeUsage = c.StreamOptions.IncludeUsage
	}
	sp := &p.sampling
	max := c.MaxCompletionTokens
	if max == nil {
		max = c.MaxTokens
	}
	if max != nil {
		if *max < 1 {
			return nil, badRequest("max_tokens", "max_tokens must be at least 1")
		}
		v := *max
		sp.MaxNewTokens = &v
	}
	sp.MinNewTokens = c.MinTokens
	sp.Temperature, sp.TopP, sp.TopK, sp.RepetitionPenalty = c.Temperature, c.TopP, c.TopK, c.RepetitionPenalty
	for _, f := range []struct {
		v   *float64
		dst *float64
	}{
		{c.MinP, &sp.MinP},
		{c.FrequencyPenalty, &sp.FrequencyPenalty},
		{c.PresencePenalty, &sp.PresencePenalty},
	} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	// One validation table (tokenapi.SamplingLimits, the engine's limits);
	// here only the names: the client sent max_tokens (or
	// max_completion_tokens) and min_tokens.
	if fe := tokenapi.CheckSampling(*sp, func(f string) string { return openAIName(f, c) }); fe != nil {
		return nil, badRequest(fe.Field, fe.Message)
	}
	sp.Seed = c.Seed
	sp.IgnoreEOS = c.IgnoreEOS
	var aerr *apiError
	if p.stops, aerr = stopStrings(c.Stop); aerr != nil {
		return nil, aerr
	}
	ids, byID := s.tok.SplitStops(p.stops)
	vocab := int32(s.tok.VocabSize())
	for _, id := range c.StopTokenIDs {
		if id < 0 || id >= vocab {
			return nil, badRequest("stop_token_ids", fmt.Sprintf("stop token id %d out of range", id))
		}
	}
	sp.StopTokenIDs = append(append([]int32(nil), c.StopTokenIDs...), ids...)
	p.stopByID = byID
	if c.SkipSpecialTokens != nil {
		p.skipSpecial = *c.SkipSpecialTokens
	}
	p.includeStop = c.IncludeStopStrInOutput || c.NoStopTrim
	return p, nil
}

// openAIName is a sampling field's name as an OpenAI client sends it.
func openAIName(field string, c *common) string {
	switch field {
	case tokenapi.FieldMaxNewTokens:
		if c.MaxCompletionTokens != nil {
			return "max_completion_tokens"
		}
		return "max_tokens"
	case tokenapi.FieldMinNewTokens:
		return "min_tokens"
	}
	return field
}

// engineTop is the top_logprobs_num the engine is asked for: the
// alternatives the client wants, when it wants logprobs at all.
func (p *plan) engineTop() int {
	if !p.logprobs {
		return 0
	}
	return p.topLogprobs
}

// request builds sample i's engine request.
func (p *plan) request(rid string, ids []int32, i int) tokenapi.Request {
	sp := p.sampling
	sp.StopTokenIDs = append([]int32(nil), sp.StopTokenIDs...)
	if sp.Seed != nil && i > 0 {
		// Distinct seeds keep n samples from being identical copies.
		v := *sp.Seed + int64(i)
		sp.Seed = &v
	}
	return tokenapi.Request{
		RID:             fmt.Sprintf("%s-%d", rid, i),
		InputIDs:        ids,
		Sampling:        sp,
		Stream:          p.stream,
		ReturnLogprob:   p.logprobs,
		TopLogprobsNum:  p.engineTop(),
		LogprobStartLen: -1,
		RoutingKey:      p.routingKey,
		Priority:        p.priority,
	}
}

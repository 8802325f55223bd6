package tokenapi

import (
	"fmt"
	"math"

	"github.com/tsd-project/tsd/gateway/wire"
)

// Sampling fields by their engine names (docs/protocol.md §5.3); front
// ends map their own names onto these (OpenAI's max_tokens is
// max_new_tokens) so an error names the field the client sent.
const (
	FieldMaxNewTokens      = "max_new_tokens"
	FieldMinNewTokens      = "min_new_tokens"
	FieldTemperature       = "temperature"
	FieldTopP              = "top_p"
	FieldTopK              = "top_k"
	FieldMinP              = "min_p"
	FieldFrequencyPenalty  = "frequency_penalty"
	FieldPresencePenalty   = "presence_penalty"
	FieldRepetitionPenalty = "repetition_penalty"
)

// Limit is one numeric sampling field's admissible range: [Lo, Hi], with
// LoOpen excluding Lo itself.
type Limit struct {
	Field  string
	Lo, Hi float64
	LoOpen bool
	// Also are further admissible values outside [Lo, Hi] (top_k -1).
	Also []float64
	// Doc says the range in words for the 400.
	Doc string
	// get reads the field; false: the client left it to the engine's
	// default, which needs no check.
	get func(*Sampling) (float64, bool)
}

// plain and opt read a field for the table.
func plain(v float64) (float64, bool) { return v, true }

func opt[T int | int64 | float64](p *T) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return float64(*p), true
}

// SamplingLimits is the one validation table for sampling: the engine's
// own admission checks (wire.SamplingParams.Validate, docs/protocol.md
// §5.3), so a value a front end accepts is never refused by the engine,
// plus OpenAI's documented ceiling on temperature. Every front end checks
// through it (CheckSampling).
var SamplingLimits = []Limit{
	{Field: FieldTemperature, Lo: 0, Hi: 2, Doc: "between 0 and 2", get: func(s *Sampling) (float64, bool) { return opt(s.Temperature) }},
	{Field: FieldTopP, Lo: 0, Hi: 1, LoOpen: true, Doc: "in (0, 1]", get: func(s *Sampling) (float64, bool) { return opt(s.TopP) }},
	// 0 is vLLM's "no limit", which OpenAI clients send: Wire maps it to
	// "all", like -1.
	{Field: FieldTopK, Lo: 1, Hi: 127, Also: []float64{-1, 0}, Doc: "-1 (all) or 1..127", get: func(s *Sampling) (float64, bool) { return opt(s.TopK) }},
	{Field: FieldMinP, Lo: 0, Hi: 1, Doc: "between 0 and 1", get: func(s *Sampling) (float64, bool) { return plain(s.MinP) }},
	{Field: FieldFrequencyPenalty, Lo: -2, Hi: 2, Doc: "between -2 and 2", get: func(s *Sampling) (float64, bool) { return plain(s.FrequencyPenalty) }},
	{Field: FieldPresencePenalty, Lo: -2, Hi: 2, Doc: "between -2 and 2", get: func(s *Sampling) (float64, bool) { return plain(s.PresencePenalty) }},
	{Field: FieldRepetitionPenalty, Lo: 0, Hi: 2, Doc: "between 0 and 2", get: func(s *Sampling) (float64, bool) { return opt(s.RepetitionPenalty) }},
	{Field: FieldMinNewTokens, Lo: 0, Hi: math.MaxInt32, Doc: "at least 0", get: func(s *Sampling) (float64, bool) { return plain(float64(s.MinNewTokens)) }},
	{Field: FieldMaxNewTokens, Lo: 0, Hi: math.MaxInt32, Doc: "at least 0", get: func(s *Sampling) (float64, bool) { return opt(s.MaxNewTokens) }},
}

// Admits reports whether v is in the limit's range.
func (l Limit) Admits(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	for _, a := range l.Also {
		if v == a {
			return true
		}
	}
	if l.LoOpen {
		return v > l.Lo && v <= l.Hi
	}
	return v >= l.Lo && v <= l.Hi
}

// FieldError is a sampling value out of range, named as the client sent it.
type FieldError struct {
	Field   string // the client's name (after the front end's mapping)
	Message string
}

// CheckSampling validates s against SamplingLimits (and min ≤ max
// tokens). name maps an engine field name to the client's (nil: as is),
// so the error names what the client sent; a name mapped to "" is a
// field that front end does not take, skipped.
func CheckSampling(s Sampling, name func(field string) string) *FieldError {
	if name == nil {
		name = func(f string) string { return f }
	}
	for _, l := range SamplingLimits {
		n := name(l.Field)
		if n == "" {
			continue
		}
		if v, set := l.get(&s); set && !l.Admits(v) {
			return &FieldError{Field: n, Message: fmt.Sprintf("%s must be %s, got %v", n, l.Doc, v)}
		}
	}
	if s.MaxNewTokens != nil && s.MinNewTokens > *s.MaxNewTokens {
		n := name(FieldMinNewTokens)
		return &FieldError{Field: n, Message: fmt.Sprintf("%s %d must not exceed %s %d", n, s.MinNewTokens, name(FieldMaxNewTokens), *s.MaxNewTokens)}
	}
	return nil
}

// Wire is the one conversion of API sampling to the normalized wire form
// SMG sends (docs/protocol.md §5.3): the engine's defaults where a field
// was left unset, top_k 0 as "all", then the engine's own admission check
// (a value CheckSampling admits always passes it).
func (s Sampling) Wire() (wire.SamplingParams, error) {
	sp := wire.DefaultSamplingParams()
	sp.MaxNewTokens = s.MaxNewTokens
	sp.MinNewTokens = s.MinNewTokens
	if s.Temperature != nil {
		sp.Temperature = *s.Temperature
	}
	if s.TopP != nil {
		sp.TopP = *s.TopP
	}
	if s.TopK != nil && *s.TopK != 0 {
		sp.TopK = *s.TopK
	}
	sp.MinP = s.MinP
	sp.FrequencyPenalty = s.FrequencyPenalty
	sp.PresencePenalty = s.PresencePenalty
	if s.RepetitionPenalty != nil {
		sp.RepetitionPenalty = *s.RepetitionPenalty
	}
	if len(s.StopTokenIDs) > 0 {
		sp.StopTokenIDs = s.StopTokenIDs
	}
	sp.IgnoreEOS = s.IgnoreEOS
	sp.Seed = s.Seed
	sp.JSONSchema, sp.Regex, sp.EBNF = s.JSONSchema, s.Regex, s.EBNF
	if err := sp.Validate(0); err != nil {
		return sp, err
	}
	return sp.Normalized(), nil
}

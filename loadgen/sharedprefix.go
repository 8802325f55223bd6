package loadgen

import (
	"fmt"
)

// SharedPrefixOptions shape upstream bench_serving's
// generated-shared-prefix dataset: NumGroups system prompts, each shared
// by PromptsPerGroup requests that append a question of their own; with
// NumTurns > 1 every request is a conversation of that many turns, each
// turn sending the conversation so far plus the next question.
type SharedPrefixOptions struct {
	NumGroups       int     // --gsp-num-groups (64)
	PromptsPerGroup int     // --gsp-prompts-per-group (16)
	SystemPromptLen int     // --gsp-system-prompt-len (2048)
	QuestionLen     int     // --gsp-question-len (128)
	OutputLen       int     // --gsp-output-len (256)
	RangeRatio      float64 // --gsp-range-ratio (1.0): lengths drawn from [len·r, len]
	NumTurns        int     // --gsp-num-turns (1)
	Ordered         bool    // --gsp-ordered: keep group order (default: shuffled)
	RoutingKey      bool    // --gsp-send-routing-key: one X-SMG-Routing-Key per group
	Seed            uint64
	MinID, Vocab    int          // token ids drawn from [MinID, Vocab), as Random's
	Count           TokenCounter // text built to the lengths on this tokenizer (Random's)
}

// Defaults of bench_serving's generated-shared-prefix options.
const (
	DefaultGSPNumGroups       = 64
	DefaultGSPPromptsPerGroup = 16
	DefaultGSPSystemPromptLen = 2048
	DefaultGSPQuestionLen     = 128
	DefaultGSPOutputLen       = 256
	DefaultGSPRangeRatio      = 1.0
	DefaultGSPNumTurns        = 1
)

// GeneratedSharedPrefix builds the dataset, reproducible from Seed: every
// prompt of a group starts with the same system prompt (token ids and
// text alike), then "\n\n" and its own question; the requests are shuffled
// unless Ordered.
func GeneratedSharedPrefix(o SharedPrefixOptions) ([]Prompt, error) {
	switch {
	case o.NumGroups <= 0 || o.PromptsPerGroup <= 0:
		return nil, fmt.Errorf("--gsp-num-groups and --gsp-prompts-per-group must be positive, got %d and %d", o.NumGroups, o.PromptsPerGroup)
	case o.SystemPromptLen <= 0 || o.QuestionLen <= 0 || o.OutputLen <= 0:
		return nil, fmt.Errorf("--gsp-system-prompt-len, --gsp-question-len and --gsp-output-len must be positive, got %d, %d and %d", o.SystemPromptLen, o.QuestionLen, o.OutputLen)
	case o.RangeRatio <= 0 || o.RangeRatio > 1:
		return nil, fmt.Errorf("--gsp-range-ratio must be in (0, 1], got %g", o.RangeRatio)
	case o.NumTurns <= 0:
		return nil, fmt.Errorf("--gsp-num-turns must be positive, got %d", o.NumTurns)
	}
	s, err := newSynth(o.Seed, 0x7473642d67737021, o.MinID, o.Vocab, o.Count)
	if err != nil {
		return nil, err
	}
	out := make([]Prompt, 0, o.NumGroups*o.PromptsPerGroup)
	for g := range o.NumGroups {
		var sys sysPrompt
		sys.ids, sys.text = s.piece(s.upTo(o.SystemPromptLen, o.RangeRatio))
		key := ""
		if o.RoutingKey {
			key = fmt.Sprintf("gsp-%d-group-%d", o.Seed, g)
		}
		for range o.PromptsPerGroup {
			p := s.conversation(sys, o.QuestionLen, o.OutputLen, o.NumTurns, o.RangeRatio)
			p.RoutingKey = key
			out = append(out, p)
		}
	}
	if !o.Ordered {
		s.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out, nil
}

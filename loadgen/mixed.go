package loadgen

import (
	"fmt"
	"math"
)

// The classes of a mixed dataset's requests.
const (
	ClassChat = "chat" // a short chat turn after a shared system prompt
	ClassRAG  = "rag"  // a long prompt: retrieved documents, then a question
)

// MixedOptions shape the mixed dataset: short chat turns that share a
// system prompt (as generated-shared-prefix's, several turns a
// conversation if asked) beside long RAG prompts, each unique. It is the
// mix where aggregated engines and prefill/decode disaggregation differ:
// the long prompts' prefill is what slows the short turns' decode when
// both share an engine.
type MixedOptions struct {
	N         int     // requests in all (--num-prompts), every chat turn one
	LongShare float64 // share of the N that are RAG prompts (--mixed-long-share)

	SystemPrompts   int // distinct system prompts the chat turns share
	SystemPromptLen int // tokens of each
	ChatLen         int // tokens of a chat question (after the system prompt)
	ChatOutputLen   int
	ChatTurns       int // turns per conversation (each sends the conversation so far)
	RAGLen          int // tokens of a RAG prompt
	RAGOutputLen    int
	// RangeRatio draws every length from [len·r, len] (1: exact), as
	// generated-shared-prefix's.
	RangeRatio float64
	Seed       uint64
	// Token ids come from [MinID, Vocab) and text is built to the lengths
	// on Count's tokenizer, as Random's.
	MinID, Vocab int
	Count        TokenCounter
}

// Defaults of the mixed dataset: chat turns of about 200 tokens (a
// 150-token system prompt and a 50-token question) and RAG prompts of
// about 6,000, 30% of the requests.
const (
	DefaultMixedLongShare       = 0.3
	DefaultMixedSystemPrompts   = 4
	DefaultMixedSystemPromptLen = 150
	DefaultMixedChatLen         = 50
	DefaultMixedChatOutputLen   = 128
	DefaultMixedChatTurns       = 1
	DefaultMixedRAGLen          = 6000
	DefaultMixedRAGOutputLen    = 128
)

// Mixed builds the mixed dataset, reproducible from Seed: round(N ×
// LongShare) RAG prompts and the rest chat turns, grouped into
// conversations of ChatTurns (the last may be shorter), shuffled together.
// Every chat conversation's first turn starts with one of the system
// prompts (ids and text alike) and carries Class "chat"; RAG prompts carry
// "rag".
func Mixed(o MixedOptions) ([]Prompt, error) {
	switch {
	case o.N <= 0:
		return nil, fmt.Errorf("--num-prompts must be positive, got %d", o.N)
	case o.LongShare < 0 || o.LongShare > 1 || math.IsNaN(o.LongShare):
		return nil, fmt.Errorf("--mixed-long-share must be in [0, 1], got %g", o.LongShare)
	case o.SystemPrompts <= 0:
		return nil, fmt.Errorf("--mixed-system-prompts must be positive, got %d", o.SystemPrompts)
	case o.SystemPromptLen <= 0 || o.ChatLen <= 0 || o.RAGLen <= 0:
		return nil, fmt.Errorf("--mixed-system-prompt-len, --mixed-chat-len and --mixed-rag-len must be positive, got %d, %d and %d", o.SystemPromptLen, o.ChatLen, o.RAGLen)
	case o.ChatOutputLen <= 0 || o.RAGOutputLen <= 0:
		return nil, fmt.Errorf("--mixed-chat-output-len and --mixed-rag-output-len must be positive, got %d and %d", o.ChatOutputLen, o.RAGOutputLen)
	case o.ChatTurns <= 0:
		return nil, fmt.Errorf("--mixed-chat-turns must be positive, got %d", o.ChatTurns)
	case o.RangeRatio <= 0 || o.RangeRatio > 1:
		return nil, fmt.Errorf("--mixed-range-ratio must be in (0, 1], got %g", o.RangeRatio)
	}
	s, err := newSynth(o.Seed, 0x7473642d6d697865, o.MinID, o.Vocab, o.Count)
	if err != nil {
		return nil, err
	}
	long := int(math.Round(float64(o.N) * o.LongShare))
	short := o.N - long
	systems := make([]sysPrompt, o.SystemPrompts)
	for i := range systems {
		systems[i].ids, systems[i].text = s.piece(s.upTo(o.SystemPromptLen, o.RangeRatio))
	}
	out := make([]Prompt, 0, long+short)
	for c := 0; short > 0; c++ {
		turns := min(o.ChatTurns, short)
		short -= turns
		p := s.conversation(systems[c%len(systems)], o.ChatLen, o.ChatOutputLen, turns, o.RangeRatio)
		p.Class = ClassChat
		out = append(out, p)
	}
	for range long {
		ids, text := s.piece(s.upTo(o.RAGLen, o.RangeRatio))
		out = append(out, Prompt{Text: text, IDs: ids, InputLen: len(ids), OutputLen: s.upTo(o.RAGOutputLen, o.RangeRatio), Class: ClassRAG})
	}
	s.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

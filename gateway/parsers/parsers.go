// Package parsers turns one reply's text into what the OpenAI API returns:
// content, reasoning_content and tool_calls. It chains a reasoning parser
// (package reasoning) and a tool-call parser (package toolcall) chosen by
// name (the names, and a model family's defaults, are profiles/parsernames'),
// and builds and reads the json_schema that enforces tool_choice
// (toolchoice.go).
//
// Wiring into a front end, per request:
//
//	st, err := parsers.New(parsers.Config{Tool: tp, Reasoning: rp, PromptOpened: &opened, ...})
//	for each detokenized chunk: deltas := st.Push(chunk)   // map 1:1 to SSE deltas
//	at the end:                 deltas := st.Finish()
//	non-streaming:              res := delta.Collect(all deltas)
package parsers

import (
	"encoding/json"
	"fmt"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/gateway/parsers/reasoning"
	"github.com/tsd-project/tsd/gateway/parsers/toolcall"
	"github.com/tsd-project/tsd/profiles/parsernames"
)

// Config picks the parsers for one request.
type Config struct {
	Tool      string // tool-call parser name ("" or "passthrough": none)
	Reasoning string // reasoning parser name ("" or "passthrough": none)
	// PromptOpened: the template's generation prompt left the think
	// block open (reasoning.OpenedIn tells from that text). nil: the
	// reasoning family's default.
	PromptOpened *bool
	// Tools maps the request's tool names to their `parameters` schemas
	// (types XML-style argument values). May be nil.
	Tools map[string]json.RawMessage
	// HistoryCalls counts tool calls in earlier assistant messages (Kimi
	// K2 ids continue that count).
	HistoryCalls int
	// NewID makes call ids for formats that carry none (nil: call_ + 24
	// random hex digits).
	NewID func(name string, index int) string
	// ToolChoice, when constrained (required, or a named function), reads
	// the reply as the JSON its schema forced (toolcall.NewConstrained)
	// instead of through Tool.
	ToolChoice ToolChoice
}

func isHarmony(name string) bool { return parsernames.IsHarmony(name) }
func isInkling(name string) bool { return parsernames.IsInkling(name) }

// New makes the parser chain for one reply.
func New(c Config) (delta.Stream, error) {
	to := toolcall.Options{Tools: c.Tools, HistoryCalls: c.HistoryCalls, NewID: c.NewID}
	if c.ToolChoice.Constrained() {
		// The reasoning part first (harmony's analysis channel, or a think
		// block), then the forced JSON as calls, streamed as they decode.
		var r delta.Stream
		switch {
		case isHarmony(c.Reasoning):
			r = toolcall.NewHarmony(to)
		case isInkling(c.Reasoning):
			r = toolcall.NewInkling(to)
		default:
			var err error
			if r, err = reasoning.New(c.Reasoning, reasoning.Options{PromptOpened: c.PromptOpened}); err != nil {
				return nil, fmt.Errorf("make reply parsers: %w", err)
			}
		}
		return &runes{s: &chain{r: r, t: toolcall.NewConstrained(c.ToolChoice.Mode, c.ToolChoice.Name, to)}}, nil
	}
	if isHarmony(c.Tool) || isHarmony(c.Reasoning) {
		return &runes{s: toolcall.NewHarmony(to)}, nil
	}
	if isInkling(c.Tool) || isInkling(c.Reasoning) {
		return &runes{s: toolcall.NewInkling(to)}, nil
	}
	r, err := reasoning.New(c.Reasoning, reasoning.Options{PromptOpened: c.PromptOpened})
	if err != nil {
		return nil, fmt.Errorf("make reply parsers: %w", err)
	}
	t, err := toolcall.New(c.Tool, to)
	if err != nil {
		return nil, fmt.Errorf("make reply parsers: %w", err)
	}
	return &runes{s: &chain{r: r, t: t}}, nil
}

// runes holds back a chunk's incomplete trailing UTF-8 sequence, so no
// delta ever ends mid-rune (a caller's JSON encoder would mangle it).
type runes struct {
	s    delta.Stream
	tail string
}

func (r *runes) Push(chunk string) []delta.Delta {
	chunk = r.tail + chunk
	cut := len(chunk)
	// Step back over at most 3 continuation bytes to a lead byte.
	for i := len(chunk) - 1; i >= 0 && i >= len(chunk)-4; i-- {
		b := chunk[i]
		if b < 0x80 {
			break
		}
		if b >= 0xC0 { // a lead byte: is its sequence complete?
			need := 2
			switch {
			case b >= 0xF0:
				need = 4
			case b >= 0xE0:
				need = 3
			}
			if len(chunk)-i < need {
				cut = i
			}
			break
		}
	}
	r.tail = chunk[cut:]
	return r.s.Push(chunk[:cut])
}

func (r *runes) Finish() []delta.Delta {
	out := r.s.Push(r.tail)
	r.tail = ""
	return append(out, r.s.Finish()...)
}

// chain feeds the reasoning parser's content into the tool-call parser.
type chain struct {
	r, t delta.Stream
}

func (c *chain) pass(ds []delta.Delta) []delta.Delta {
	var out []delta.Delta
	for _, d := range ds {
		if d.Kind == delta.Content {
			out = append(out, c.t.Push(d.Text)...)
			continue
		}
		out = append(out, d)
	}
	return out
}

func (c *chain) Push(chunk string) []delta.Delta { return c.pass(c.r.Push(chunk)) }

func (c *chain) Finish() []delta.Delta {
	out := c.pass(c.r.Finish())
	return append(out, c.t.Finish()...)
}

// PromptOpened reports whether prompt leaves the reasoning parser's think
// block open (the reply starts as reasoning), for Config.PromptOpened.
// Callers pass the generation prompt the chat template appended, not the
// whole rendered prompt: a marker in the user's own text opens nothing
// (gateway/openai promptRendered). Harmony and Inkling need no such switch.
func PromptOpened(reasoningName, prompt string) bool {
	if isHarmony(reasoningName) || isInkling(reasoningName) {
		return false
	}
	return reasoning.OpenedIn(reasoningName, prompt)
}

// ToolSchemas maps each tool's name to its parameters, for Config.Tools.
func ToolSchemas(tools []Tool) map[string]json.RawMessage {
	if len(tools) == 0 {
		return nil
	}
	m := make(map[string]json.RawMessage, len(tools))
	for _, t := range tools {
		m[t.Name] = t.Parameters
	}
	return m
}

// SkipSpecialTokens is the skip_special_tokens the detokenizer must use
// for a chat request, as SMG derives it (its chat preparation stage):
// reasoning parsers that read control tokens (kimi_k3, inkling, and
// harmony here) always keep them; a tool_choice enforced by json_schema
// leaves the request's value (the output is plain JSON); any other request
// with tools (tool_choice not "none") keeps them, since the tool parser's
// markers may be special tokens; otherwise the request's value stands.
func SkipSpecialTokens(c Config, requested, hasTools bool, choice ToolChoice) bool {
	switch {
	case isHarmony(c.Tool) || isHarmony(c.Reasoning) || isInkling(c.Tool) || isInkling(c.Reasoning):
		return false
	case reasoningKeepsSpecial(c.Reasoning):
		return false
	case hasTools && choice.Constrained():
		return requested
	case hasTools && choice.Mode != "none":
		return false
	}
	return requested
}

func reasoningKeepsSpecial(name string) bool {
	canon, _ := reasoning.Canonical(name)
	return canon == "kimi_k3"
}

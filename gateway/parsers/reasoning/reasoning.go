// Package reasoning splits a reply's thinking from its answer, one parser
// per model family, named as SMG names them (see New). The thinking goes
// to Reasoning deltas (OpenAI-style `reasoning_content`), the rest to
// Content deltas for the tool-call parser.
//
// Every parser here is a think block: a start and an end marker. Whether
// the reply starts inside the block depends on the chat template: when
// the template's generation prompt already opened it (DeepSeek-R1,
// Qwen3-Thinking-2507, or any template with thinking enabled that writes
// the start marker itself) the model's first token is thinking.
// Options.PromptOpened says so per request; OpenedIn computes it from the
// generation prompt (never from the user's text, which may hold markers).
//
// Harmony's analysis channel (GPT-OSS) is parsed with its tool calls, by
// toolcall.NewHarmony; package parsers picks it for "gpt_oss".
package reasoning

import (
	"fmt"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/profiles/parsernames"
)

// family is one think-block format.
type family struct {
	start, end string
	// opened is the default when the request does not say: true for
	// families whose template always opens the block in the prompt.
	opened bool
}

// families, with the facts of each (SMG's reasoning_parser factory):
//
//	name            markers                             starts inside
//	deepseek_r1     <think> </think>                    yes (template opens <think>)
//	deepseek_v31    <think> </think>                    no  (thinking is a template kwarg)
//	qwen3           <think> </think>                    no  (Qwen3 writes <think> itself)
//	qwen3_thinking  <think> </think>                    yes (Qwen3-*-Thinking-2507 templates open it)
//	glm45           <think> </think>                    no  (GLM-4.5/4.6/4.7/5)
//	kimi            ◁think▷ ◁/think▷                     no  (Kimi-VL / K1.5 unicode markers)
//	kimi_thinking   <think> </think>                    yes (Kimi-K2-Thinking)
//	kimi_k25        <think> </think>                    no  (Kimi-K2.5)
//	kimi_k3         <|open|>think<|sep|> <|close|>think<|sep|>  no (XTML think channel)
var families = map[string]family{
	"deepseek_r1":    {"<think>", "</think>", true},
	"deepseek_v31":   {"<think>", "</think>", false},
	"qwen3":          {"<think>", "</think>", false},
	"qwen3_thinking": {"<think>", "</think>", true},
	"glm45":          {"<think>", "</think>", false},
	"kimi":           {"◁think▷", "◁/think▷", false},
	"kimi_thinking":  {"<think>", "</think>", true},
	"kimi_k25":       {"<think>", "</think>", false},
	"kimi_k3":        {"<|open|>think<|sep|>", "<|close|>think<|sep|>", false},
}

// Canonical resolves an alias to SMG's name; ok is false when no parser
// has the name. "passthrough" and "" are valid (no reasoning split). The
// names and aliases are profiles/parsernames' table, which
// TestFamiliesAreTheNameTable holds equal to families.
func Canonical(name string) (string, bool) { return parsernames.Reasoning(name) }

// Names lists every name New accepts, sorted.
func Names() []string { return parsernames.ReasoningNames() }

// Options are per-request facts.
type Options struct {
	// PromptOpened: the rendered prompt ends inside an open think block,
	// so the reply starts as reasoning. nil: the family's default.
	PromptOpened *bool
}

// New makes a reasoning parser for one reply.
func New(name string, o Options) (delta.Stream, error) {
	canon, ok := Canonical(name)
	if !ok {
		return nil, fmt.Errorf("reasoning parser %q: unknown (known: %s)", name, strings.Join(Names(), ", "))
	}
	if canon == "passthrough" {
		return passthrough{}, nil
	}
	f := families[canon]
	in := f.opened
	if o.PromptOpened != nil {
		in = *o.PromptOpened
	}
	t := &think{f: f, state: before}
	if in {
		t.state = inside
	}
	t.rs.Lead, t.cs.Lead = true, true
	return t, nil
}

// OpenedIn reports whether a rendered prompt leaves the family's think
// block open: its last start marker comes after its last end marker.
func OpenedIn(name, prompt string) bool {
	canon, ok := Canonical(name)
	if !ok || canon == "passthrough" {
		return false
	}
	f := families[canon]
	s := strings.LastIndex(prompt, f.start)
	return s >= 0 && s > strings.LastIndex(prompt, f.end)
}

type passthrough struct{}

func (passthrough) Push(c string) []delta.Delta {
	if c == "" {
		return nil
	}
	return []delta.Delta{{Kind: delta.Content, Text: c}}
}
func (passthrough) Finish() []delta.Delta { return nil }

type thinkState int

const (
	before thinkState = iota // the reply may still open a think block
	inside                   // thinking
	after                    // the answer
)

// think is one reply through a think-block family. Reasoning drops its
// leading whitespace and the whitespace before the end marker; the answer
// drops its leading whitespace (the template's "\n\n" after </think>).
type think struct {
	f       family
	state   thinkState
	buf     string
	started bool // inside: the start marker may still be repeated at the top
	rs, cs  delta.Spacer
}

func (t *think) Push(c string) []delta.Delta { t.buf += c; return t.run(false) }
func (t *think) Finish() []delta.Delta       { return t.run(true) }

func (t *think) run(final bool) []delta.Delta {
	var out []delta.Delta
	emit := func(k delta.Kind, s string) {
		if s != "" {
			out = append(out, delta.Delta{Kind: k, Text: s})
		}
	}
	for {
		switch t.state {
		case before, inside:
			if !t.started {
				// At the top (after whitespace) a start marker opens the
				// block; a model that repeats the prompt's marker has it
				// stripped.
				rest := strings.TrimLeft(t.buf, " \t\r\n")
				switch {
				case strings.HasPrefix(rest, t.f.start):
					t.buf, t.state, t.started = rest[len(t.f.start):], inside, true
				case !final && strings.HasPrefix(t.f.start, rest):
					return out // still may become the start marker
				default:
					t.started = true
					if t.state == before {
						t.state = after
					}
				}
				continue
			}
			if t.state == before {
				t.state = after
				continue
			}
			i := strings.Index(t.buf, t.f.end)
			if i >= 0 {
				emit(delta.Reasoning, t.rs.Feed(t.buf[:i]))
				t.rs.Flush(false)
				t.buf, t.state = t.buf[i+len(t.f.end):], after
				continue
			}
			if final {
				emit(delta.Reasoning, t.rs.Feed(t.buf))
				t.buf = ""
				return out
			}
			keep := delta.HeldPrefix(t.buf, t.f.end)
			emit(delta.Reasoning, t.rs.Feed(t.buf[:len(t.buf)-keep]))
			t.buf = t.buf[len(t.buf)-keep:]
			return out
		case after:
			emit(delta.Content, t.cs.Feed(t.buf))
			t.buf = ""
			if final {
				emit(delta.Content, t.cs.Flush(true))
			}
			return out
		}
	}
}

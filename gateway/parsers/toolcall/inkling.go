package toolcall

import (
	"encoding/json"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// Inkling (SMG "inkling", tool calls and reasoning together, like
// harmony): the reply is a sequence of typed TML messages,
//
//	<|message_model|><|content_thinking|>Plan.<|end_message|>
//	<|message_model|><|content_text|>I'll check.<|end_message|>
//	<|message_model|>search<|content_invoke_tool_json|>{"name":"search","args":{"q":"x"}}<|end_message|>
//	<|content_model_end_sampling|>
//
// as SMG's inkling parsers document. The header between <|message_model|>
// and the content type (an author or tool name) is protocol data and
// dropped; thinking is reasoning, text is content, a JSON invocation is a
// call ({"name", "args"}). A JSON invocation that does not parse, and a
// text-mode invocation (<|content_invoke_tool_text|>, which no OpenAI call
// can carry), stay content: SMG drops them, but a reply's text is never
// lost here.
const (
	inkMessage  = "<|message_model|>"
	inkText     = "<|content_text|>"
	inkThinking = "<|content_thinking|>"
	inkToolJSON = "<|content_invoke_tool_json|>"
	inkToolText = "<|content_invoke_tool_text|>"
	inkEnd      = "<|end_message|>"
	inkEndSamp  = "<|content_model_end_sampling|>"
)

var inkAll = []string{inkMessage, inkText, inkThinking, inkToolJSON, inkToolText, inkEnd, inkEndSamp}

type inkState int

const (
	inkOutside inkState = iota
	inkHeader
	inkBody
)

type inkling struct {
	o     Options
	buf   string
	state inkState
	kind  string          // the body's content marker
	body  strings.Builder // a tool body so far
	calls int
}

// NewInkling makes an Inkling TML parser (tool calls and reasoning).
func NewInkling(o Options) delta.Stream { return &inkling{o: o} }

func (p *inkling) Push(c string) []delta.Delta { p.buf += c; return p.run(false) }
func (p *inkling) Finish() []delta.Delta       { return p.run(true) }

func (p *inkling) run(final bool) []delta.Delta {
	var out []delta.Delta
	emit := func(k delta.Kind, s string) {
		if s != "" {
			out = append(out, delta.Delta{Kind: k, Text: s})
		}
	}
	for {
		i, m := delta.FirstOf(p.buf, inkAll...)
		var part string
		switch {
		case i >= 0:
			part = p.buf[:i]
		case final:
			part = p.buf
		default:
			keep := delta.HeldPrefix(p.buf, inkAll...)
			part = p.buf[:len(p.buf)-keep]
		}
		p.buf = p.buf[len(part):]
		switch p.state {
		case inkOutside:
			emit(delta.Content, part)
		case inkHeader: // an author name: dropped
		case inkBody:
			switch p.kind {
			case inkThinking:
				emit(delta.Reasoning, part)
			case inkToolJSON, inkToolText:
				p.body.WriteString(part)
			default:
				emit(delta.Content, part)
			}
		}
		if i < 0 {
			if final {
				out = append(out, p.endBody()...)
				p.buf = ""
			}
			return out
		}
		p.buf = p.buf[len(m):]
		out = append(out, p.endBody()...)
		switch {
		case m == inkMessage:
			p.state = inkHeader
		case m == inkEnd || m == inkEndSamp:
			p.state = inkOutside
		default: // a content type opens a body
			p.state, p.kind = inkBody, m
		}
	}
}

// endBody ends a tool body: a call when it parses, else its raw text as
// content.
func (p *inkling) endBody() []delta.Delta {
	if p.state != inkBody || (p.kind != inkToolJSON && p.kind != inkToolText) {
		return nil
	}
	raw := p.body.String()
	p.body.Reset()
	p.state = inkOutside
	if p.kind == inkToolJSON {
		var c struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		}
		if json.Unmarshal([]byte(delta.TrimSpace(raw)), &c) == nil && validName(c.Name) {
			args := "{}"
			ok := len(c.Args) == 0
			if !ok {
				args, ok = compactObject(string(c.Args))
			}
			if ok {
				i := p.calls
				p.calls++
				return []delta.Delta{
					{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: i, ID: p.o.id(c.Name, i), Name: c.Name}},
					{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: i, Arguments: args}},
				}
			}
		}
	}
	return []delta.Delta{{Kind: delta.Content, Text: p.kind + raw}}
}

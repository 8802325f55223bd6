package toolcall

import (
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// GPT-OSS harmony (SMG runs it as its own pipeline; here "harmony", alias
// "gpt_oss"): the reply is a sequence of messages, each a header and a
// body, as OpenAI's harmony response format documents:
//
//	<|channel|>analysis<|message|>Need the weather.<|end|>
//	<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//	<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>
//
// The analysis channel is reasoning, final (and commentary without a
// recipient, a preamble) is content, and a message to functions.NAME (the
// recipient may also sit before <|channel|>) is a call whose body is its
// JSON arguments. The stop tokens <|call|> and <|return|> may be missing
// (the engine stops on them); the reply's end closes the last message.
// Text outside any message is content.
const (
	hStart   = "<|start|>"
	hChannel = "<|channel|>"
	hMessage = "<|message|>"
	hEnd     = "<|end|>"
	hCall    = "<|call|>"
	hReturn  = "<|return|>"
)

type harmonyState int

const (
	hOutside harmonyState = iota
	hHeader
	hBody
)

type harmony struct {
	o       Options
	buf     string
	state   harmonyState
	header  string // raw header text, markers included
	channel string
	to      string
	body    strings.Builder // a call's body so far
	calls   int
}

// NewHarmony makes a harmony parser (tool calls and reasoning together).
func NewHarmony(o Options) delta.Stream { return &harmony{o: o} }

func (h *harmony) Push(c string) []delta.Delta { h.buf += c; return h.run(false) }
func (h *harmony) Finish() []delta.Delta       { return h.run(true) }

func (h *harmony) run(final bool) []delta.Delta {
	var out []delta.Delta
	emit := func(k delta.Kind, s string) {
		if s != "" {
			out = append(out, delta.Delta{Kind: k, Text: s})
		}
	}
	for {
		switch h.state {
		case hOutside:
			i, m := delta.FirstOf(h.buf, hStart, hChannel)
			if i < 0 {
				if final {
					emit(delta.Content, h.buf)
					h.buf = ""
					return out
				}
				keep := delta.HeldPrefix(h.buf, hStart, hChannel)
				emit(delta.Content, h.buf[:len(h.buf)-keep])
				h.buf = h.buf[len(h.buf)-keep:]
				return out
			}
			emit(delta.Content, h.buf[:i])
			h.header, h.buf, h.state = m, h.buf[i+len(m):], hHeader
		case hHeader:
			j := strings.Index(h.buf, hMessage)
			if j < 0 {
				if final {
					emit(delta.Content, h.header+h.buf) // a header that never opened a body
					h.buf, h.state = "", hOutside
					return out
				}
				return out
			}
			h.header += h.buf[:j]
			h.buf = h.buf[j+len(hMessage):]
			h.channel, h.to = harmonyHeader(h.header)
			h.body.Reset()
			h.state = hBody
		case hBody:
			i, m := delta.FirstOf(h.buf, hEnd, hCall, hReturn)
			var part string
			done := false
			switch {
			case i >= 0:
				part, h.buf, done = h.buf[:i], h.buf[i+len(m):], true
			case final:
				part, h.buf, done = h.buf, "", true
			default:
				keep := delta.HeldPrefix(h.buf, hEnd, hCall, hReturn)
				part, h.buf = h.buf[:len(h.buf)-keep], h.buf[len(h.buf)-keep:]
			}
			switch {
			case h.to != "":
				h.body.WriteString(part)
				if done {
					out = append(out, h.call()...)
				}
			case h.channel == "analysis":
				emit(delta.Reasoning, part)
			default:
				emit(delta.Content, part)
			}
			if !done {
				return out
			}
			h.state = hOutside
			if final && h.buf == "" {
				return out
			}
		}
	}
}

// call ends a message to a recipient: a call when its body is a JSON
// object, else the raw message as content.
func (h *harmony) call() []delta.Delta {
	name, body := strings.TrimPrefix(h.to, "functions."), h.body.String()
	args, ok := compactObject(body)
	if delta.TrimSpace(body) == "" {
		args, ok = "{}", true
	}
	if !ok || !validName(name) {
		return []delta.Delta{{Kind: delta.Content, Text: body}}
	}
	i := h.calls
	h.calls++
	return []delta.Delta{
		{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: i, ID: h.o.id(name, i), Name: name}},
		{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: i, Arguments: args}},
	}
}

// harmonyHeader reads the channel and the recipient (to=...) of a header
// such as "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json".
func harmonyHeader(h string) (channel, to string) {
	if _, after, ok := strings.Cut(h, hChannel); ok {
		channel = firstWord(after)
	}
	if _, after, ok := strings.Cut(h, "to="); ok {
		to = firstWord(after)
	}
	return channel, to
}

func firstWord(s string) string {
	s = delta.TrimSpace(s)
	if i := strings.IndexAny(s, " \t\r\n<"); i >= 0 {
		s = s[:i]
	}
	return s
}

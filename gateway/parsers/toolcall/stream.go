package toolcall

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// Streaming calls as they decode. A format with a next hook reports, from
// the open region's text since the previous call, where the next call's
// JSON arguments begin; the engine then emits the call's id and name and
// feeds the arguments through a delta.JSONStream, one fragment per push,
// until their brackets balance. Every decision depends on the text alone,
// so a reply parses to the same calls however it was chunked. Once a call
// is out it stays out: arguments cut by max_tokens are what arrived, and
// at the region's end the format's whole parse adds any calls the hook did
// not stream.

// maxCallHead bounds the text between calls (or before the first) that a
// next hook re-reads while it waits for a call's arguments to begin.
const maxCallHead = 4 << 10

// streamState is what a next hook found.
type streamState int

const (
	streamWait  streamState = iota // not decided yet: the region may still grow
	streamFound                    // the call is known; its arguments start at argsAt
	streamNever                    // the rest of the region is not streamed: parsed whole at its end
)

// streamCall is a call a next hook found: its id (when the text carries
// one), name, and the offset in rest of its arguments' "{" (-1: the
// region's open marker is that "{").
type streamCall struct {
	id, name string
	argsAt   int
}

// nextCall finds the next call in rest, the open region's text after the
// previous call's arguments (from the region's start for calls == 0).
type nextCall func(open, rest string, calls int) (streamCall, streamState)

// regionStream is the streaming state of the open region.
type regionStream struct {
	xml    xmlStream // XML-style formats (xmlstream.go)
	from   int       // region offset where the next call may start
	pos    int       // arguments read up to here (inArgs)
	inArgs bool
	index  int // the call being streamed
	json   delta.JSONStream
	calls  int // calls streamed from this region
	never  bool
}

// stream emits what the region holds up to limit: new calls' headers and
// argument fragments.
func (s *blockStream) stream(out []delta.Delta, limit int) []delta.Delta {
	if s.f.xml != nil {
		return s.streamXML(out, limit)
	}
	rs := &s.rs
	for s.f.next != nil && !rs.never {
		if !rs.inArgs {
			if rs.from > limit {
				return out
			}
			// A call's head (markers, name) is short: the hook reads at most
			// maxCallHead bytes of it, so it is not re-read at length on
			// every push, and a call it cannot place within them is parsed
			// whole (the same however the text was chunked).
			end, capped := limit, limit-rs.from > maxCallHead
			if capped {
				end = rs.from + maxCallHead
			}
			c, st := s.f.next(s.open, string(s.region[rs.from:end]), rs.calls)
			switch {
			case st == streamWait && capped:
				rs.never = true
				return out
			case st == streamWait:
				return out
			case st == streamNever:
				rs.never = true
				return out
			}
			if rs.calls == 0 {
				// The region is a call: the whitespace before it is not
				// content (as when a whole call parses).
				s.sp.Flush(false)
				s.pre = ""
			}
			s.seen = true
			rs.inArgs, rs.index, rs.json = true, s.calls, delta.JSONStream{}
			out = append(out, delta.Delta{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: s.calls, ID: s.callID(found{id: c.id, name: c.name}), Name: c.name}})
			s.calls++
			rs.pos = rs.from + c.argsAt
			if c.argsAt < 0 {
				frag, _, _ := rs.json.Feed(s.open)
				out = s.args(out, frag)
				rs.pos = rs.from
			}
		}
		if rs.pos > limit {
			return out
		}
		frag, n, done := rs.json.Feed(string(s.region[rs.pos:limit]))
		rs.pos += n
		out = s.args(out, frag)
		if !done {
			return out
		}
		rs.inArgs, rs.from = false, rs.pos
		rs.calls++
	}
	return out
}

func (s *blockStream) args(out []delta.Delta, frag string) []delta.Delta {
	if frag == "" {
		return out
	}
	return append(out, delta.Delta{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: s.rs.index, Arguments: frag}})
}

// endStream ends a region that streamed calls: a call still open was cut
// (its arguments end where the text did), and calls the whole parse finds
// beyond those streamed are emitted whole.
func (s *blockStream) endStream(out []delta.Delta, body string) []delta.Delta {
	rs := &s.rs
	if rs.inArgs {
		if s.f.xml != nil && rs.xml.state == xmlInCall {
			// Every parameter closed, only the function's close is
			// missing: the object closes with what it holds.
			out = s.args(out, map[bool]string{true: "{}", false: "}"}[rs.xml.params == 0])
		}
		rs.inArgs = false
		rs.calls++
	}
	if calls, ok := s.f.parse(s.open, body, &s.o); ok && len(calls) > rs.calls {
		for _, c := range calls[rs.calls:] {
			out = s.emitCall(out, c)
		}
	}
	s.pre = ""
	s.seen = true
	return out
}

// --- reading partial text ---

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// literal reads lit at s[i:].
func literal(s string, i int, lit string) (int, streamState) {
	rest := s[i:]
	switch {
	case strings.HasPrefix(rest, lit):
		return i + len(lit), streamFound
	case strings.HasPrefix(lit, rest):
		return i, streamWait
	}
	return i, streamNever
}

// jsonString reads the JSON string at s[i].
func jsonString(s string, i int) (string, int, streamState) {
	if i >= len(s) {
		return "", i, streamWait
	}
	if s[i] != '"' {
		return "", i, streamNever
	}
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			var v string
			if json.Unmarshal([]byte(s[i:j+1]), &v) != nil {
				return "", i, streamNever
			}
			return v, j + 1, streamFound
		}
	}
	return "", i, streamWait
}

// jsonValue skips the complete JSON value at s[i].
func jsonValue(s string, i int) (int, streamState) {
	if i >= len(s) {
		return i, streamWait
	}
	switch c := s[i]; {
	case c == '"':
		_, j, st := jsonString(s, i)
		return j, st
	case c == '{' || c == '[':
		var js delta.JSONStream
		_, n, done := js.Feed(s[i:])
		if !done {
			return i, streamWait
		}
		return i + n, streamFound
	}
	j := i
	for j < len(s) && !strings.ContainsRune(",}] \t\r\n", rune(s[j])) {
		j++
	}
	if j == len(s) {
		return i, streamWait
	}
	if !json.Valid([]byte(s[i:j])) {
		return i, streamNever
	}
	return j, streamFound
}

// objectRest skips what is left of an object after one of its values:
// further members, then "}".
func objectRest(s string, i int) (int, streamState) {
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			return i, streamWait
		}
		switch s[i] {
		case '}':
			return i + 1, streamFound
		case ',':
			i++
			continue
		}
		_, j, st := jsonString(s, i)
		if st != streamFound {
			return i, st
		}
		if j = skipSpace(s, j); j >= len(s) {
			return i, streamWait
		}
		if s[j] != ':' {
			return i, streamNever
		}
		if j, st = jsonValue(s, skipSpace(s, j+1)); st != streamFound {
			return i, st
		}
		i = j
	}
}

// callMembers reads a call object's members from s[i] (just inside its
// "{"): its "name", then its "arguments" (or "parameters") object, whose
// "{" it reports. Arguments before the name, or not an object (a JSON
// string holding one), are left to the whole parse.
func callMembers(s string, i int) (streamCall, streamState) {
	name := ""
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			return streamCall{}, streamWait
		}
		switch s[i] {
		case '}':
			return streamCall{}, streamNever // no arguments: the whole parse gives {}
		case ',':
			i++
			continue
		}
		key, j, st := jsonString(s, i)
		if st != streamFound {
			return streamCall{}, st
		}
		if j = skipSpace(s, j); j >= len(s) {
			return streamCall{}, streamWait
		}
		if s[j] != ':' {
			return streamCall{}, streamNever
		}
		if j = skipSpace(s, j+1); j >= len(s) {
			return streamCall{}, streamWait
		}
		switch key {
		case "name":
			v, k, st := jsonString(s, j)
			if st != streamFound {
				return streamCall{}, st
			}
			if !validName(v) {
				return streamCall{}, streamNever
			}
			name, i = v, k
		case "arguments", "parameters":
			if name == "" || s[j] != '{' {
				return streamCall{}, streamNever
			}
			if st := argsStart(s, j); st != streamFound {
				return streamCall{}, st
			}
			return streamCall{name: name, argsAt: j}, streamFound
		default:
			k, st := jsonValue(s, j)
			if st != streamFound {
				return streamCall{}, st
			}
			i = k
		}
	}
}

// nextJSONCall streams {"name": ..., "arguments"|"parameters": {...}}
// call objects: one per region (list 0, hermes/qwen), or a list of them
// separated by list (';' Llama, ',' a JSON array). A region opened by a
// "{" marker starts inside its first object.
func nextJSONCall(list byte) nextCall {
	return func(open, rest string, calls int) (streamCall, streamState) {
		i := 0
		switch {
		case calls == 0 && open == "{":
		case calls == 0:
			if i = skipSpace(rest, 0); i >= len(rest) {
				return streamCall{}, streamWait
			}
			if rest[i] != '{' {
				return streamCall{}, streamNever
			}
			i++
		default:
			var st streamState
			if i, st = objectRest(rest, 0); st != streamFound {
				return streamCall{}, st
			}
			sep := list
			if open == "[" {
				sep = ','
			}
			if sep == 0 {
				return streamCall{}, streamNever
			}
			if i = skipSpace(rest, i); i >= len(rest) {
				return streamCall{}, streamWait
			}
			if rest[i] != sep {
				return streamCall{}, streamNever
			}
			if i = skipSpace(rest, i+1); i >= len(rest) {
				return streamCall{}, streamWait
			}
			if rest[i] != '{' {
				return streamCall{}, streamNever
			}
			i++
		}
		return callMembers(rest, i)
	}
}

// nextMarkedCall streams calls written between markers around a JSON
// arguments object (DeepSeek, Kimi K2): after, what must follow a call's
// arguments before the next; head reads a call's opening up to its
// arguments, returning the call and the offset of what follows the head.
func nextMarkedCall(after []string, head func(rest string, i int) (streamCall, int, streamState)) nextCall {
	return func(_, rest string, calls int) (streamCall, streamState) {
		i := 0
		if calls > 0 {
			for _, lit := range after {
				var st streamState
				if i, st = literal(rest, skipSpace(rest, i), lit); st != streamFound {
					return streamCall{}, st
				}
			}
		}
		if i = skipSpace(rest, i); i >= len(rest) {
			return streamCall{}, streamWait
		}
		c, j, st := head(rest, i)
		if st != streamFound {
			return streamCall{}, st
		}
		if j = skipSpace(rest, j); j >= len(rest) {
			return streamCall{}, streamWait
		}
		if rest[j] != '{' {
			return streamCall{}, streamNever
		}
		if st := argsStart(rest, j); st != streamFound {
			return streamCall{}, st
		}
		c.argsAt = j
		return c, streamFound
	}
}

// argsStart decides whether the object at s[j] (its "{") is worth
// committing a call for: it is "{}" or opens with a string key and ":".
// Text that is not JSON at all ("{nope}") is left to the whole parse,
// which keeps it as content; arguments that go wrong later stay in the
// call as the model wrote them.
func argsStart(s string, j int) streamState {
	i := skipSpace(s, j+1)
	if i >= len(s) {
		return streamWait
	}
	if s[i] == '}' {
		return streamFound
	}
	_, k, st := jsonString(s, i)
	if st != streamFound {
		return st
	}
	if k = skipSpace(s, k); k >= len(s) {
		return streamWait
	}
	if s[k] != ':' {
		return streamNever
	}
	return streamFound
}

// upTo reads s[i:] up to marker m, returning the text before it and the
// offset after it.
func upTo(s string, i int, m string) (string, int, streamState) {
	k := strings.Index(s[i:], m)
	if k < 0 {
		return "", i, streamWait
	}
	return s[i : i+k], i + k + len(m), streamFound
}

// DeepSeek V3: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>
func deepseekV3Head(rest string, i int) (streamCall, int, streamState) {
	i, st := literal(rest, i, dsCallBegin)
	if st != streamFound {
		return streamCall{}, i, st
	}
	if _, i, st = upTo(rest, i, dsSep); st != streamFound {
		return streamCall{}, i, st
	}
	name, i, st := upTo(rest, i, "\n")
	if st != streamFound {
		return streamCall{}, i, st
	}
	if name = delta.TrimSpace(name); !validName(name) {
		return streamCall{}, i, streamNever
	}
	if i, st = literal(rest, skipSpace(rest, i), "```json"); st != streamFound {
		return streamCall{}, i, st
	}
	return streamCall{name: name}, i, streamFound
}

// DeepSeek V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
func deepseekV31Head(rest string, i int) (streamCall, int, streamState) {
	i, st := literal(rest, i, dsCallBegin)
	if st != streamFound {
		return streamCall{}, i, st
	}
	name, i, st := upTo(rest, i, dsSep)
	if st != streamFound {
		return streamCall{}, i, st
	}
	if name = delta.TrimSpace(name); !validName(name) {
		return streamCall{}, i, streamNever
	}
	return streamCall{name: name}, i, streamFound
}

// Kimi K2: <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>
func kimiK2Head(rest string, i int) (streamCall, int, streamState) {
	i, st := literal(rest, i, kimiCall)
	if st != streamFound {
		return streamCall{}, i, st
	}
	head, i, st := upTo(rest, i, kimiArgs)
	if st != streamFound {
		return streamCall{}, i, st
	}
	head = delta.TrimSpace(head)
	name, id := head, ""
	if k := strings.LastIndexByte(head, ':'); k >= 0 {
		if _, err := strconv.Atoi(head[k+1:]); err == nil {
			name = head[:k]
			if strings.HasPrefix(name, "functions.") {
				id = head
			}
		}
	}
	if name = strings.TrimPrefix(name, "functions."); !validName(name) {
		return streamCall{}, i, streamNever
	}
	return streamCall{id: id, name: name}, i, streamFound
}

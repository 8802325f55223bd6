// Package toolcall turns a model's reply text into content and OpenAI tool
// calls, one parser per model family (one file each), named as SMG names
// them (see New). Every parser streams: Push takes detokenized text in any
// chunking and holds back what might be the start of a marker. In the
// families whose arguments are a JSON object (stream.go: hermes/qwen,
// llama, json, DeepSeek V3/V3.1, Kimi K2, and the grammar-forced output of
// a constrained tool_choice) and in Qwen3-Coder's XML calls (xmlstream.go)
// a call goes out as it decodes: its id and name once known, then argument
// fragments as they arrive, as SMG streams them; a call cut short
// (max_tokens) keeps the arguments it got. The other families emit a call
// once it is complete. A call that does not
// parse before it was committed is kept as content, never dropped.
//
// The formats need the model's special tokens in the text (Kimi's
// <|tool_calls_section_begin|>, DeepSeek's <｜tool▁calls▁begin｜>, Llama's
// <|python_tag|>, harmony's <|channel|>): the caller detokenizes with
// special tokens kept for any request with tools, as SMG does
// (parsers.SkipSpecialTokens).
package toolcall

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/profiles/parsernames"
)

// Options are per-request facts a parser may use.
type Options struct {
	// Tools maps a tool name to its JSON-schema `parameters`, used to type
	// XML-style argument values (a property declared "string" stays a
	// string even when it reads as a number). May be nil.
	Tools map[string]json.RawMessage
	// HistoryCalls is how many tool calls earlier assistant messages of
	// the conversation hold (Kimi K2 ids count across the conversation).
	HistoryCalls int
	// NewID makes the id of call number index (0-based within this reply)
	// for formats whose text carries none. nil: "call_" + 24 random hex
	// digits, as SMG.
	NewID func(name string, index int) string
}

func (o *Options) id(name string, index int) string {
	if o.NewID != nil {
		return o.NewID(name, index)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// found is one parsed call before it gets its index.
type found struct {
	id   string // "" when the format carries none
	name string
	args string // compact JSON object
}

// format describes a family whose calls sit in delimited regions.
type format struct {
	opens []string // markers that open a call region anywhere
	// startOpens open a region only when nothing but whitespace came
	// before (Llama's bare JSON object).
	startOpens []string
	close      string   // closes a region; "" = the region runs to the end of the reply
	drop       []string // markers deleted from content (Kimi K3's response channel)
	// parse turns one region (its opening marker and body) into calls;
	// false keeps the region's raw text as content.
	parse func(open, body string, o *Options) ([]found, bool)
	// ids, when set, overrides how a call gets its id.
	ids func(f found, index int, o *Options) string
	// next, when set, streams calls as they decode (stream.go): it finds
	// the next call in the open region's text since the previous one.
	next nextCall
	// xml, when set, streams XML-style calls as they decode (xmlstream.go).
	xml *xmlMarkers
}

// blockStream runs a format over a streamed reply.
type blockStream struct {
	f        *format
	o        Options
	buf      string
	inRegion bool
	open     string
	seen     bool // non-whitespace content passed already
	calls    int
	sp       delta.Spacer
	pre      string   // whitespace held before the open region
	region   []byte   // the open region's text (buf is empty meanwhile)
	scanned  int      // bytes of region already searched for the close marker
	markers  []string // every marker the jail watches outside a region
	anywhere []string // opens and drops: markers found at any position
	rs       regionStream
}

func newBlock(f *format, o Options) *blockStream {
	s := &blockStream{f: f, o: o}
	s.anywhere = append(append([]string{}, f.opens...), f.drop...)
	s.markers = append(append([]string{}, s.anywhere...), f.startOpens...)
	return s
}

func (s *blockStream) Push(chunk string) []delta.Delta {
	if s.inRegion {
		s.region = append(s.region, chunk...) // a long call: no quadratic copying
	} else {
		s.buf += chunk
	}
	return s.run(false)
}

func (s *blockStream) Finish() []delta.Delta { return s.run(true) }

func (s *blockStream) content(out []delta.Delta, text string) []delta.Delta {
	if t := s.sp.Feed(text); t != "" {
		s.seen = true
		out = append(out, delta.Delta{Kind: delta.Content, Text: t})
	}
	return out
}

func onlySpace(s string) bool { return delta.TrimSpace(s) == "" }

// markedCalls parses a calls region made of begin…end blocks, one call
// each, read by one: anything but whitespace between the blocks, or a
// block one refuses, makes the region malformed, and so does a region
// with no call.
func markedCalls(body, begin, end string, one func(call string) (found, bool)) ([]found, bool) {
	var out []found
	rest := body
	for !onlySpace(rest) {
		rest = delta.TrimSpace(rest)
		if !strings.HasPrefix(rest, begin) {
			return nil, false
		}
		call, after, ok := strings.Cut(rest[len(begin):], end)
		if !ok {
			return nil, false
		}
		f, ok := one(call)
		if !ok {
			return nil, false
		}
		out = append(out, f)
		rest = after
	}
	return out, len(out) > 0
}

// findOpen is the earliest marker outside a region: an opener, a dropped
// marker, or (at the start of the reply) a start opener.
func (s *blockStream) findOpen() (int, string, bool) {
	i, m := delta.FirstOf(s.buf, s.anywhere...)
	if !s.seen {
		if j, sm := delta.FirstOf(s.buf, s.f.startOpens...); j >= 0 && onlySpace(s.buf[:j]) && (i < 0 || j <= i) {
			return j, sm, true
		}
	}
	if i >= 0 {
		for _, d := range s.f.drop {
			if d == m {
				return i, m, false
			}
		}
		return i, m, true
	}
	return -1, "", false
}

func (s *blockStream) run(final bool) []delta.Delta {
	var out []delta.Delta
	for {
		if !s.inRegion {
			i, m, opens := s.findOpen()
			if i >= 0 {
				out = s.content(out, s.buf[:i])
				s.buf = s.buf[i+len(m):]
				if opens {
					// Whitespace right before a call is not content, unless
					// the call turns out malformed.
					s.pre = s.sp.Flush(true)
					s.inRegion, s.open = true, m
					s.region = append(s.region[:0], s.buf...)
					s.buf = ""
					s.rs = regionStream{}
				}
				continue
			}
			if final {
				out = s.content(out, s.buf)
				if t := s.sp.Flush(s.calls == 0); t != "" {
					out = append(out, delta.Delta{Kind: delta.Content, Text: t})
				}
				s.buf = ""
				return out
			}
			keep := delta.HeldPrefix(s.buf, s.markers...)
			out = s.content(out, s.buf[:len(s.buf)-keep])
			s.buf = s.buf[len(s.buf)-keep:]
			return out
		}
		j := -1
		if s.f.close != "" {
			if j = bytes.Index(s.region[s.scanned:], []byte(s.f.close)); j >= 0 {
				j += s.scanned
			}
		}
		// Stream what is decided: up to the close marker, or (while it
		// may still come) short of a tail that could begin it.
		limit := len(s.region)
		switch {
		case j >= 0:
			limit = j
		case s.f.close != "" && !final:
			tail := s.region[max(0, len(s.region)-len(s.f.close)):]
			limit -= delta.HeldPrefix(string(tail), s.f.close)
		}
		out = s.stream(out, limit)
		if j < 0 && !final {
			if s.f.close != "" {
				// Next time, search only where a close marker could
				// still start (a long call streams in many chunks).
				s.scanned = max(0, len(s.region)-len(s.f.close)+1)
			}
			return out
		}
		streamed := s.rs.calls > 0 || s.rs.inArgs
		var body string
		switch {
		case j >= 0:
			body, s.buf = string(s.region[:j]), string(s.region[j+len(s.f.close):])
		case s.f.close == "" || streamed:
			body = string(s.region)
		default:
			// A region the reply never closed (cut by max_tokens, or
			// malformed) and nothing of it streamed: content.
			out = s.content(out, s.pre+s.open+string(s.region))
			s.region, s.inRegion, s.pre, s.scanned = s.region[:0], false, "", 0
			continue
		}
		s.region = s.region[:0]
		s.inRegion, s.scanned = false, 0
		if streamed {
			out = s.endStream(out, body)
			continue
		}
		// A region that opens again inside itself: what precedes the last
		// opener was an unclosed (malformed) call, kept as content.
		if k, m := lastOf(body, s.f.opens); k >= 0 {
			out = s.content(out, s.pre+s.open+body[:k])
			s.open, body, s.pre = m, body[k+len(m):], s.sp.Flush(true)
		}
		calls, ok := s.f.parse(s.open, body, &s.o)
		pre := s.pre
		s.pre = ""
		if !ok || len(calls) == 0 {
			out = s.content(out, pre+s.open+body+s.f.close)
			continue
		}
		s.sp.Flush(false)
		for _, c := range calls {
			out = s.emitCall(out, c)
		}
		s.seen = true
	}
}

// callID is the id call number s.calls gets.
func (s *blockStream) callID(c found) string {
	switch {
	case s.f.ids != nil:
		return s.f.ids(c, s.calls, &s.o)
	case c.id != "":
		return c.id
	}
	return s.o.id(c.name, s.calls)
}

// emitCall emits a whole call: its id and name, then its arguments.
func (s *blockStream) emitCall(out []delta.Delta, c found) []delta.Delta {
	out = append(out,
		delta.Delta{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: s.calls, ID: s.callID(c), Name: c.name}},
		delta.Delta{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: s.calls, Arguments: c.args}})
	s.calls++
	return out
}

func lastOf(s string, markers []string) (int, string) {
	at, which := -1, ""
	for _, m := range markers {
		if i := strings.LastIndex(s, m); i > at {
			at, which = i, m
		}
	}
	return at, which
}

// passthrough emits everything as content.
type passthrough struct{}

func (passthrough) Push(c string) []delta.Delta {
	if c == "" {
		return nil
	}
	return []delta.Delta{{Kind: delta.Content, Text: c}}
}
func (passthrough) Finish() []delta.Delta { return nil }

// registry maps SMG's canonical parser names to formats; the names and
// the aliases users type are profiles/parsernames' table, which
// TestRegistryIsTheNameTable holds equal to this one.
var registry = map[string]func() *format{}

func register(name string, f func() *format) { registry[name] = f }

// Canonical resolves an alias ("hermes", "kimi_k2", "glm45") to SMG's
// name; ok is false for a name no parser has.
func Canonical(name string) (string, bool) { return parsernames.Tool(name) }

// Names lists every parser name and alias New accepts, sorted.
func Names() []string { return parsernames.ToolNames() }

// New makes a parser for one reply. "" means passthrough.
func New(name string, o Options) (delta.Stream, error) {
	canon, ok := Canonical(name)
	switch {
	case name == "" || canon == "passthrough":
		return passthrough{}, nil
	case canon == "harmony":
		return NewHarmony(o), nil
	case canon == "inkling":
		return NewInkling(o), nil
	case !ok:
		return nil, fmt.Errorf("tool-call parser %q: unknown (known: %s)", name, strings.Join(Names(), ", "))
	}
	return newBlock(registry[canon](), o), nil
}

// --- JSON helpers shared by the formats ---

// compactObject validates raw as one JSON object and returns it compact
// (key order and escapes as the model wrote them).
func compactObject(raw string) (string, bool) {
	raw = delta.TrimSpace(raw)
	if !strings.HasPrefix(raw, "{") {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, []byte(raw)) != nil {
		return "", false
	}
	return b.String(), true
}

// marshal encodes v without HTML escaping (a "<" in an argument stays "<").
func marshal(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "null"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// argObject builds a JSON object from ordered keys and JSON values.
func argObject(keys, vals []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(marshal(k))
		b.WriteByte(':')
		b.WriteString(vals[i])
	}
	b.WriteByte('}')
	return b.String()
}

// typedValue is an XML-style argument value as JSON: a string when the
// tool's schema declares the property a string (or when it is not valid
// JSON), else the JSON value it reads as.
func typedValue(o *Options, tool, key, raw string) string {
	v := delta.TrimSpace(raw)
	if declaredType(o, tool, key) == "string" {
		return marshal(v)
	}
	var b bytes.Buffer
	if v != "" && json.Compact(&b, []byte(v)) == nil {
		return b.String()
	}
	return marshal(v)
}

// declaredType is the JSON-schema type of tool's property key, or "".
func declaredType(o *Options, tool, key string) string {
	if o == nil || o.Tools == nil {
		return ""
	}
	raw, ok := o.Tools[tool]
	if !ok {
		return ""
	}
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	switch t := s.Properties[key].Type.(type) {
	case string:
		return t
	case []any:
		if len(t) > 0 {
			if ts, ok := t[0].(string); ok {
				return ts
			}
		}
	}
	return ""
}

// validName is a function name as the formats allow: non-empty, no
// whitespace, no markup.
func validName(n string) bool {
	return n != "" && !strings.ContainsAny(n, " \t\r\n<>{}\"")
}

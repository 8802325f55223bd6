package toolcall

import (
	"bytes"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// Streaming XML-style calls (Qwen3-Coder's qwen_xml): the arguments are
// key/value elements, turned into a JSON object as they decode. A call
// commits once its name and first parameter key are known (or it closes
// with none); each parameter goes out as `{"key":` (or `,"key":`), then
// its value: a property the tool's schema declares a string streams as
// escaped text fragments (trimmed as the whole parse trims it), any other
// value is held until its close and written as the JSON it reads as. The
// object closes with the function. The fragments join to what the whole
// parse writes (argObject of typedValue).

// xmlMarkers are an XML-style format's element markers.
type xmlMarkers struct {
	funcOpen, funcNameEnd, funcClose  string // <function= NAME > ... </function>
	paramOpen, paramNameEnd, paramEnd string // <parameter= KEY > VALUE </parameter>
}

var qwenXMLMarkers = &xmlMarkers{funcOpen: "<function=", funcNameEnd: ">", funcClose: "</function>",
	paramOpen: "<parameter=", paramNameEnd: ">", paramEnd: "</parameter>"}

// xmlState is where a streamed XML call is.
type xmlState int

const (
	xmlBetween xmlState = iota // before a function (or between them)
	xmlInCall                  // between parameters
	xmlInValue                 // inside a parameter's value
)

// xmlStream is the open region's XML streaming state.
type xmlStream struct {
	state  xmlState
	name   string
	key    string
	params int
	str    bool         // the value streams as a string
	sp     delta.Spacer // trims a streamed string value
	opened bool         // the string value's opening quote is out
	held   bytes.Buffer // a non-string value until its close
}

// streamXML emits what the open region holds up to limit.
func (s *blockStream) streamXML(out []delta.Delta, limit int) []delta.Delta {
	rs, x, m := &s.rs, &s.rs.xml, s.f.xml
	for !rs.never {
		switch x.state {
		case xmlBetween:
			rest := string(s.region[rs.from:min(limit, rs.from+maxCallHead)])
			name, at, st := xmlHead(rest, m, limit-rs.from > maxCallHead)
			if st == streamWait {
				return out
			}
			if st == streamNever {
				rs.never = true
				return out
			}
			if rs.calls == 0 {
				s.sp.Flush(false)
				s.pre = ""
			}
			s.seen = true
			rs.inArgs, rs.index = true, s.calls
			out = append(out, delta.Delta{Kind: delta.ToolCall, Call: &delta.CallDelta{Index: s.calls, ID: s.callID(found{name: name}), Name: name}})
			s.calls++
			*x = xmlStream{state: xmlInCall, name: name}
			rs.pos = rs.from + at
		case xmlInCall:
			rest := string(s.region[rs.pos:limit])
			i := skipSpace(rest, 0)
			if j, st := literal(rest, i, m.funcClose); st == streamFound {
				out = s.args(out, map[bool]string{true: "{}", false: "}"}[x.params == 0])
				rs.pos += j
				rs.inArgs, rs.from = false, rs.pos
				rs.calls++
				x.state = xmlBetween
				continue
			} else if st == streamWait {
				return out
			}
			j, st := literal(rest, i, m.paramOpen)
			if st == streamWait {
				return out
			}
			var key string
			if st == streamFound {
				key, j, st = upTo(rest, j, m.paramNameEnd)
			}
			if st == streamWait {
				return out
			}
			if key = delta.TrimSpace(key); st == streamNever || key == "" {
				rs.never = true // malformed after the commit: the call keeps what it got
				return out
			}
			lead := ","
			if x.params == 0 {
				lead = "{"
			}
			out = s.args(out, lead+marshal(key)+":")
			x.params++
			x.key, x.str, x.opened = key, declaredType(&s.o, x.name, key) == "string", false
			x.sp = delta.Spacer{Lead: true}
			x.held.Reset()
			x.state = xmlInValue
			rs.pos += j
		case xmlInValue:
			rest := string(s.region[rs.pos:limit])
			end := strings.Index(rest, m.paramEnd)
			chunk := rest
			if end >= 0 {
				chunk = rest[:end]
			} else {
				chunk = rest[:len(rest)-delta.HeldPrefix(rest, m.paramEnd)]
				chunk = chunk[:wholeRunes(chunk)] // escaped text never ends mid-rune
			}
			rs.pos += len(chunk)
			if x.str {
				if t := x.sp.Feed(chunk); t != "" {
					out = s.args(out, x.quote()+strings.TrimSuffix(strings.TrimPrefix(marshal(t), `"`), `"`))
				}
			} else {
				x.held.WriteString(chunk)
			}
			if end < 0 {
				return out
			}
			rs.pos += len(m.paramEnd)
			if x.str {
				x.sp.Flush(false)
				out = s.args(out, x.quote()+`"`)
			} else {
				out = s.args(out, typedValue(&s.o, x.name, x.key, x.held.String()))
			}
			x.state = xmlInCall
		}
	}
	return out
}

// wholeRunes is the length of s up to its last complete UTF-8 sequence.
func wholeRunes(s string) int {
	for i := len(s) - 1; i >= 0 && i >= len(s)-4; i-- {
		if b := s[i]; b < 0x80 {
			return len(s)
		} else if b >= 0xC0 {
			need := 2
			switch {
			case b >= 0xF0:
				need = 4
			case b >= 0xE0:
				need = 3
			}
			if len(s)-i < need {
				return i
			}
			return len(s)
		}
	}
	return len(s)
}

// quote is the opening quote of a streamed string value, once.
func (x *xmlStream) quote() string {
	if x.opened {
		return ""
	}
	x.opened = true
	return `"`
}

// xmlHead reads a function's opening and decides whether to commit the
// call: its name is known and its first parameter key (or its close) is
// complete. It returns the name and the offset just after the opening.
// capped: rest is all of the head the stream may read.
func xmlHead(rest string, m *xmlMarkers, capped bool) (string, int, streamState) {
	name, at, st := func() (string, int, streamState) {
		i, st := literal(rest, skipSpace(rest, 0), m.funcOpen)
		if st != streamFound {
			return "", 0, st
		}
		name, at, st := upTo(rest, i, m.funcNameEnd)
		if st != streamFound {
			return "", 0, st
		}
		if name = delta.TrimSpace(name); !validName(name) {
			return "", 0, streamNever
		}
		j := skipSpace(rest, at)
		_, closed := literal(rest, j, m.funcClose)
		if closed == streamFound {
			return name, at, streamFound
		}
		k, st := literal(rest, j, m.paramOpen)
		if st != streamFound {
			if st == streamWait || closed == streamWait {
				return "", 0, streamWait
			}
			return "", 0, streamNever
		}
		key, _, st := upTo(rest, k, m.paramNameEnd)
		if st != streamFound {
			return "", 0, st
		}
		if delta.TrimSpace(key) == "" {
			return "", 0, streamNever
		}
		return name, at, streamFound
	}()
	if st == streamWait && capped {
		st = streamNever
	}
	return name, at, st
}

// Package delta holds the types every reply parser speaks: what a parser
// emits while a reply streams (Delta), what a whole reply parses to
// (Result), and the small text helpers the parsers share (the marker jail
// and whitespace holding). Parsers live in ../toolcall and ../reasoning;
// ../ (package parsers) chains them for one request.
package delta

import "strings"

// Kind says what a Delta carries.
type Kind int

const (
	// Content is ordinary reply text (OpenAI `content`).
	Content Kind = iota
	// Reasoning is thinking text (OpenAI-style `reasoning_content`).
	Reasoning
	// ToolCall is one tool-call delta (OpenAI `tool_calls[i]`).
	ToolCall
)

// Delta is one piece of a streamed reply. Text is set for Content and
// Reasoning; Call for ToolCall.
type Delta struct {
	Kind Kind
	Text string
	Call *CallDelta
}

// CallDelta maps 1:1 onto an OpenAI streaming `tool_calls` entry: the
// first delta of a call carries Index, ID and Name (Arguments may be
// empty); later deltas of the same Index carry only argument fragments,
// which concatenate to the call's JSON arguments.
type CallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Call is one complete tool call.
type Call struct {
	Index     int    `json:"index"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // a JSON object, as text
}

// Result is a whole reply after parsing.
type Result struct {
	Content   string `json:"content"`
	Reasoning string `json:"reasoning"`
	Calls     []Call `json:"calls"`
}

// Stream parses one reply incrementally. Push takes the next chunk of
// detokenized text (any split: mid-tag, mid-rune) and returns what can be
// decided so far; Finish flushes the rest at the end of the reply. Joining
// every delta of a reply gives the same Result whatever the chunking.
// A Stream is owned by one goroutine.
type Stream interface {
	Push(chunk string) []Delta
	Finish() []Delta
}

// Collect folds deltas into a Result (what a non-streaming response holds).
func Collect(ds []Delta) Result {
	var r Result
	var content, reasoning strings.Builder
	pos := map[int]int{} // call index -> position in r.Calls
	for _, d := range ds {
		switch d.Kind {
		case Content:
			content.WriteString(d.Text)
		case Reasoning:
			reasoning.WriteString(d.Text)
		case ToolCall:
			if d.Call == nil {
				continue
			}
			i, ok := pos[d.Call.Index]
			if !ok {
				i = len(r.Calls)
				pos[d.Call.Index] = i
				r.Calls = append(r.Calls, Call{Index: d.Call.Index})
			}
			c := &r.Calls[i]
			if d.Call.ID != "" {
				c.ID = d.Call.ID
			}
			if d.Call.Name != "" {
				c.Name = d.Call.Name
			}
			c.Arguments += d.Call.Arguments
		}
	}
	r.Content, r.Reasoning = content.String(), reasoning.String()
	return r
}

// Merge joins adjacent text deltas of the same kind, so a caller sends
// one SSE event per kind per Push rather than many small ones.
func Merge(ds []Delta) []Delta {
	out := ds[:0:0]
	for _, d := range ds {
		if d.Kind != ToolCall && d.Text == "" {
			continue
		}
		if n := len(out); n > 0 && d.Kind != ToolCall && out[n-1].Kind == d.Kind {
			out[n-1].Text += d.Text
			continue
		}
		out = append(out, d)
	}
	return out
}

// HeldPrefix is the length of the longest suffix of s that is a proper
// prefix of one of markers: the bytes a parser must hold back (the jail)
// because the next chunk may complete a marker.
func HeldPrefix(s string, markers ...string) int {
	best := 0
	for _, m := range markers {
		n := min(len(m)-1, len(s))
		for k := n; k > best; k-- {
			if strings.HasSuffix(s, m[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

// FirstOf finds the earliest occurrence in s of any marker; ties go to the
// longer marker. It returns the position and the marker, or -1.
func FirstOf(s string, markers ...string) (int, string) {
	at, which := -1, ""
	for _, m := range markers {
		if m == "" {
			continue
		}
		i := strings.Index(s, m)
		if i < 0 {
			continue
		}
		if at < 0 || i < at || (i == at && len(m) > len(which)) {
			at, which = i, m
		}
	}
	return at, which
}

// isSpace is the whitespace parsers trim around markers (ASCII only, so a
// byte test never splits a rune).
func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\r' || b == '\t' }

// TrimSpace trims the ASCII whitespace isSpace names.
func TrimSpace(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
}

// Spacer emits one text channel with two whitespace rules that do not
// depend on chunking: whitespace at the very start is dropped while Lead
// is set, and trailing whitespace is held until non-space text follows it
// (then it is emitted) or the channel ends (then Flush decides).
type Spacer struct {
	Lead bool   // still dropping leading whitespace
	held string // trailing whitespace not yet emitted
}

// Feed returns the text of s that can be emitted now.
func (w *Spacer) Feed(s string) string {
	if w.Lead {
		i := 0
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		s = s[i:]
		if s == "" {
			return ""
		}
		w.Lead = false
	}
	j := len(s)
	for j > 0 && isSpace(s[j-1]) {
		j--
	}
	if j == 0 {
		w.held += s
		return ""
	}
	out := w.held + s[:j]
	w.held = s[j:]
	return out
}

// Flush ends the channel: the held whitespace is returned when keep is
// set and dropped otherwise.
func (w *Spacer) Flush(keep bool) string {
	h := w.held
	w.held = ""
	if keep {
		return h
	}
	return ""
}

// Pending reports whether whitespace is being held.
func (w *Spacer) Pending() bool { return w.held != "" }

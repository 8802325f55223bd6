package delta

import "strings"

// JSONStream compacts one JSON object or array as it streams in, so a
// tool call's arguments can go out in fragments as they decode: Feed
// drops the whitespace outside strings (what json.Compact does to valid
// JSON) and says when the value's brackets balance. It checks structure
// only (strings, escapes, nesting), not grammar: a model's malformed
// arguments pass through as written, never dropped. The fragments depend
// only on the text, not on how it was cut into chunks.
type JSONStream struct {
	depth      int
	inStr, esc bool
	done       bool
}

// Feed reads s from its start: out is the compact text of what it read,
// n how many bytes it read (it stops right after the value's last byte),
// done whether the value is complete.
func (j *JSONStream) Feed(s string) (out string, n int, done bool) {
	var b strings.Builder
	for n < len(s) && !j.done {
		c := s[n]
		n++
		if j.inStr {
			b.WriteByte(c)
			switch {
			case j.esc:
				j.esc = false
			case c == '\\':
				j.esc = true
			case c == '"':
				j.inStr = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			j.inStr = true
		case '{', '[':
			j.depth++
		case '}', ']':
			if j.depth--; j.depth <= 0 {
				j.done = true
			}
		}
		b.WriteByte(c)
	}
	return b.String(), n, j.done
}

// Done reports whether the value is complete.
func (j *JSONStream) Done() bool { return j.done }

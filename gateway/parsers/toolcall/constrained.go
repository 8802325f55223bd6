package toolcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sort"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// NewConstrained parses the output a constrained tool_choice forces with
// its json_schema (package parsers, ToolChoiceSchema): for a named
// function (mode "function") the output is that function's arguments
// object; for "required" it is an array of {"name", "parameters"}
// objects. Calls stream as they decode like every JSON family here, so a
// call max_tokens cut keeps the arguments it got and is still a call (as
// OpenAI returns a forced call cut by length), also when the cut came
// before the call streamed: a prefix of the forced JSON is read as the
// calls it began (cutCalls), each named when its name is known (written
// whole, the one tool whose name begins with what was written, or the
// only tool offered) with its arguments as far as they came. Output that
// is not the forced JSON (an engine without a grammar backend) is content.
func NewConstrained(mode, name string, o Options) delta.Stream {
	if mode == "function" {
		return newBlock(&format{startOpens: []string{"{"},
			next: func(_, rest string, calls int) (streamCall, streamState) {
				if calls > 0 {
					return streamCall{}, streamNever
				}
				if st := argsStart("{"+rest, 0); st != streamFound {
					return streamCall{}, st
				}
				return streamCall{name: name, argsAt: -1}, streamFound
			},
			parse: func(open, body string, _ *Options) ([]found, bool) {
				if a, ok := compactObject(open + body); ok {
					return []found{{name: name, args: a}}, true
				}
				if raw := delta.TrimSpace(open + body); jsonPrefix(raw) {
					return []found{{name: name, args: raw}}, true // cut: the arguments as far as they came
				}
				return nil, false
			}}, o)
	}
	names := make([]string, 0, len(o.Tools))
	for n := range o.Tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return newBlock(&format{startOpens: []string{"["}, next: nextJSONCall(','), parse: func(open, body string, o *Options) ([]found, bool) {
		if json.Valid([]byte(open + body)) {
			return parseRequired(open, body, o) // whole: items without a name and parameters are skipped
		}
		return cutCalls(open+body, names)
	}}, o)
}

// jsonPrefix reports whether s is a JSON value or the beginning of one
// (what a cut leaves): its tokens are well formed up to where it ends.
func jsonPrefix(s string) bool {
	dec := json.NewDecoder(strings.NewReader(s))
	for {
		_, err := dec.Token()
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return true
		}
		return false
	}
}

// cutItem is one {"name", "parameters"} item of a "required" array as far
// as it came.
type cutItem struct {
	name     string // as written so far
	nameDone bool   // the name's string closed
	args     string // the parameters as far as they came; "" not begun
}

// cutCalls reads a prefix of a "required" array (max_tokens cut it):
// one call per item begun whose name is known (whole, the one tool whose
// name begins with the part written, or the only tool offered), with its
// arguments as far as they came; a cut before any item, with one tool
// offered, is a call of it with no arguments yet. ok is false when s is
// not such a prefix.
func cutCalls(s string, tools []string) ([]found, bool) {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '[' {
		return nil, false
	}
	i++
	var out []found
	begun := false
items:
	for {
		if i = skipSpace(s, i); i >= len(s) {
			break
		}
		switch s[i] {
		case ']':
			break items
		case ',':
			i++
			continue
		case '{':
		default:
			return nil, false
		}
		it, end, done, ok := readCutItem(s, i+1)
		if !ok {
			return nil, false
		}
		begun = true
		if n := cutName(it, tools); n != "" {
			out = append(out, found{name: n, args: it.args})
		}
		if !done {
			break
		}
		i = end
	}
	if !begun && len(tools) == 1 {
		out = append(out, found{name: tools[0]})
	}
	return out, true
}

// readCutItem reads an item's members from s[i] (after its "{"): the item
// as far as it came, where it ended, whether it closed, and false when s
// is not a prefix of an item.
func readCutItem(s string, i int) (it cutItem, end int, done, ok bool) {
	for {
		if i = skipSpace(s, i); i >= len(s) {
			return it, i, false, true
		}
		switch s[i] {
		case '}':
			return it, i + 1, true, true
		case ',':
			i++
			continue
		}
		key, j, st := jsonString(s, i)
		switch st {
		case streamNever:
			return it, i, false, false
		case streamWait:
			return it, len(s), false, true // cut inside a key
		}
		if j = skipSpace(s, j); j >= len(s) {
			return it, j, false, true
		}
		if s[j] != ':' {
			return it, j, false, false
		}
		if j = skipSpace(s, j+1); j >= len(s) {
			return it, j, false, true
		}
		switch key {
		case "name":
			v, k, st := jsonString(s, j)
			switch st {
			case streamNever:
				return it, j, false, false
			case streamWait:
				it.name = s[j+1:] // cut inside the name
				return it, len(s), false, true
			}
			it.name, it.nameDone, i = v, true, k
		case "arguments", "parameters":
			k, st := jsonValue(s, j)
			switch st {
			case streamNever:
				return it, j, false, false
			case streamWait:
				it.args = s[j:]
				return it, len(s), false, true
			}
			it.args = s[j:k]
			if a, ok := compactObject(it.args); ok {
				it.args = a
			}
			i = k
		default:
			k, st := jsonValue(s, j)
			switch st {
			case streamNever:
				return it, j, false, false
			case streamWait:
				return it, len(s), false, true
			}
			i = k
		}
	}
}

// cutName is the name of a cut item's call: the one written, else the
// one tool whose name begins with what was written (all of them when
// nothing was), else "" (not known).
func cutName(it cutItem, tools []string) string {
	if it.nameDone {
		if validName(it.name) {
			return it.name
		}
		return ""
	}
	known := ""
	for _, t := range tools {
		if strings.HasPrefix(t, it.name) {
			if known != "" {
				return "" // more than one tool begins so
			}
			known = t
		}
	}
	return known
}

// parseRequired reads a whole "required" array: one call per item with
// both a name and parameters (items without them are skipped, as SMG
// reads them).
func parseRequired(open, body string, _ *Options) ([]found, bool) {
	var items []json.RawMessage
	if json.Unmarshal([]byte(open+body), &items) != nil {
		return nil, false
	}
	var out []found
	for _, it := range items {
		var c struct {
			Name       *string         `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if json.Unmarshal(it, &c) != nil || c.Name == nil || c.Parameters == nil {
			continue
		}
		var b bytes.Buffer
		args := "{}"
		if json.Compact(&b, c.Parameters) == nil {
			args = b.String()
		}
		out = append(out, found{name: *c.Name, args: args})
	}
	return out, len(out) > 0
}

package toolcall

import (
	"bytes"
	"encoding/json"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// NewConstrained parses the output a constrained tool_choice forces with
// its json_schema (package parsers, ToolChoiceSchema): for a named
// function (mode "function") the output is that function's arguments
// object; for "required" it is an array of {"name", "parameters"}
// objects. Calls stream as they decode like every JSON family here, so a
// call max_tokens cut keeps the arguments it got and is still a call (as
// OpenAI returns a forced call cut by length). Output that is not the
// forced JSON (an engine without a grammar backend) is content.
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
				a, ok := compactObject(open + body)
				if !ok {
					return nil, false
				}
				return []found{{name: name, args: a}}, true
			}}, o)
	}
	return newBlock(&format{startOpens: []string{"["}, next: nextJSONCall(','), parse: parseRequired}, o)
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

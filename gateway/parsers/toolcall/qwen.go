package toolcall

import (
	"encoding/json"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// Qwen 2.5 / Qwen3 (SMG "qwen"; "hermes" is the same Hermes-style
// format): each call is one JSON object in its own region,
//
//	<tool_call>
//	{"name": "get_weather", "arguments": {"city": "Paris"}}
//	</tool_call>
//
// as the Qwen3 chat template's tool instructions ask. "parameters" is
// accepted for "arguments", and arguments written as a JSON string holding
// an object are unwrapped.
func qwenFormat() *format {
	return &format{opens: []string{"<tool_call>"}, close: "</tool_call>", parse: parseJSONCall, next: nextJSONCall(0)}
}

func parseJSONCall(_, body string, _ *Options) ([]found, bool) {
	c, ok := jsonCall(delta.TrimSpace(body))
	if !ok {
		return nil, false
	}
	return []found{c}, true
}

// jsonCall reads {"name": ..., "arguments"|"parameters": {...}}.
func jsonCall(raw string) (found, bool) {
	var m map[string]json.RawMessage
	if !strings.HasPrefix(raw, "{") || json.Unmarshal([]byte(raw), &m) != nil {
		return found{}, false
	}
	var name string
	if json.Unmarshal(m["name"], &name) != nil || !validName(name) {
		return found{}, false
	}
	args, ok := m["arguments"]
	if !ok {
		args, ok = m["parameters"]
	}
	if !ok {
		return found{name: name, args: "{}"}, true
	}
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = json.RawMessage(s)
	}
	a, ok := compactObject(string(args))
	if !ok {
		return found{}, false
	}
	return found{name: name, args: a}, true
}

// Qwen3-Coder and Qwen3.5 (SMG "qwen_xml", also "qwen_coder"): XML-style
// calls, as their chat templates render tool calls,
//
//	<tool_call>
//	<function=get_weather>
//	<parameter=city>
//	Paris
//	</parameter>
//	</function>
//	</tool_call>
//
// Values are trimmed; a value is JSON when it reads as JSON and the tool's
// schema does not declare the property a string.
func qwenXMLFormat() *format {
	return &format{opens: []string{"<tool_call>"}, close: "</tool_call>", parse: parseQwenXML, xml: qwenXMLMarkers}
}

func parseQwenXML(_, body string, o *Options) ([]found, bool) {
	var out []found
	rest := body
	for {
		i := strings.Index(rest, "<function=")
		if i < 0 {
			break
		}
		if !onlySpace(rest[:i]) {
			return nil, false
		}
		rest = rest[i+len("<function="):]
		j := strings.Index(rest, ">")
		if j < 0 {
			return nil, false
		}
		name := delta.TrimSpace(rest[:j])
		rest = rest[j+1:]
		end := strings.Index(rest, "</function>")
		if end < 0 || !validName(name) {
			return nil, false
		}
		fn := rest[:end]
		rest = rest[end+len("</function>"):]
		var keys, vals []string
		for {
			k := strings.Index(fn, "<parameter=")
			if k < 0 {
				if !onlySpace(fn) {
					return nil, false
				}
				break
			}
			if !onlySpace(fn[:k]) {
				return nil, false
			}
			fn = fn[k+len("<parameter="):]
			g := strings.Index(fn, ">")
			if g < 0 {
				return nil, false
			}
			key := delta.TrimSpace(fn[:g])
			fn = fn[g+1:]
			e := strings.Index(fn, "</parameter>")
			if e < 0 || key == "" {
				return nil, false
			}
			keys = append(keys, key)
			vals = append(vals, typedValue(o, name, key, fn[:e]))
			fn = fn[e+len("</parameter>"):]
		}
		out = append(out, found{name: name, args: argObject(keys, vals)})
	}
	if len(out) == 0 || !onlySpace(rest) {
		return nil, false
	}
	return out, true
}

func init() {
	register("qwen", qwenFormat)
	register("qwen_xml", qwenXMLFormat)
	register("qwen_coder", qwenXMLFormat)
}

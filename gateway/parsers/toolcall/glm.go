package toolcall

import (
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// GLM-4.5/4.6 (SMG "glm45_moe") and GLM-4.7/GLM-5 (SMG "glm47_moe"), as
// their chat templates render a call:
//
//	<tool_call>get_weather
//	<arg_key>city</arg_key>
//	<arg_value>Paris</arg_value>
//	</tool_call>
//
// GLM-4.7 drops the newlines (`<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>`);
// one parser reads both. Values are typed as in qwen_xml.
func glmFormat() *format {
	return &format{opens: []string{"<tool_call>"}, close: "</tool_call>", parse: parseGLM}
}

func parseGLM(_, body string, o *Options) ([]found, bool) {
	k := strings.Index(body, "<arg_key>")
	head := body
	if k >= 0 {
		head = body[:k]
	}
	name := delta.TrimSpace(head)
	if !validName(name) {
		return nil, false
	}
	var keys, vals []string
	rest := ""
	if k >= 0 {
		rest = body[k:]
	}
	for !onlySpace(rest) {
		rest = delta.TrimSpace(rest)
		if !strings.HasPrefix(rest, "<arg_key>") {
			return nil, false
		}
		rest = rest[len("<arg_key>"):]
		e := strings.Index(rest, "</arg_key>")
		if e < 0 {
			return nil, false
		}
		key := delta.TrimSpace(rest[:e])
		rest = delta.TrimSpace(rest[e+len("</arg_key>"):])
		if key == "" || !strings.HasPrefix(rest, "<arg_value>") {
			return nil, false
		}
		rest = rest[len("<arg_value>"):]
		e = strings.Index(rest, "</arg_value>")
		if e < 0 {
			return nil, false
		}
		keys = append(keys, key)
		vals = append(vals, typedValue(o, name, key, rest[:e]))
		rest = rest[e+len("</arg_value>"):]
	}
	return []found{{name: name, args: argObject(keys, vals)}}, true
}

func init() {
	register("glm45_moe", glmFormat)
	register("glm47_moe", glmFormat)
}

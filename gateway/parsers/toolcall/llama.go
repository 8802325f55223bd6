package toolcall

import (
	"encoding/json"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// Llama 3.x JSON tool calling (SMG "llama"): the reply is the call, a JSON
// object {"name": ..., "parameters": {...}} (Meta's Llama 3.1/3.2 model
// card and chat template), optionally after the <|python_tag|> special
// token; several calls are separated by ";". A bare object is a call only
// when it opens the reply; "arguments" is accepted for "parameters".
func llamaFormat() *format {
	return &format{opens: []string{"<|python_tag|>"}, startOpens: []string{"{"}, next: nextJSONCall(';'),
		parse: func(open, body string, _ *Options) ([]found, bool) {
			if open == "{" {
				body = "{" + body
			}
			return jsonCallList(body)
		}}
}

// jsonCallList reads one or more call objects separated by ";" or
// whitespace.
func jsonCallList(body string) ([]found, bool) {
	var out []found
	dec := json.NewDecoder(strings.NewReader(body))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		c, ok := jsonCall(string(raw))
		if !ok {
			return nil, false
		}
		out = append(out, c)
		rest := delta.TrimSpace(body[dec.InputOffset():])
		if rest == "" {
			return out, true
		}
		if !strings.HasPrefix(rest, ";") {
			return nil, false
		}
		rest = delta.TrimSpace(rest[1:])
		if rest == "" {
			return out, true
		}
		body = rest
		dec = json.NewDecoder(strings.NewReader(body))
	}
}

// Generic JSON (SMG "json", which SMG maps to llama-3.1, gemma, glm-4 and
// API-style model names): the reply is one call object or an array of
// them, {"name": ..., "arguments"|"parameters": {...}}.
func jsonFormat() *format {
	return &format{startOpens: []string{"{", "["}, next: nextJSONCall(';'),
		parse: func(open, body string, _ *Options) ([]found, bool) {
			body = open + body
			if open == "[" {
				var items []json.RawMessage
				if json.Unmarshal([]byte(body), &items) != nil {
					return nil, false
				}
				var out []found
				for _, it := range items {
					c, ok := jsonCall(string(it))
					if !ok {
						return nil, false
					}
					out = append(out, c)
				}
				return out, len(out) > 0
			}
			return jsonCallList(body)
		}}
}

func init() {
	register("llama", llamaFormat)
	register("json", jsonFormat)
}

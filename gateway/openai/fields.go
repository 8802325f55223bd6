package openai

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/tsd-project/tsd/gateway/front"
)

// The tables of accepted fields beyond the request structs (a field a
// struct declares is implemented, so accepted): what the clients we test
// with (openai npm, Vercel AI SDK, LangChain) send that changes nothing
// here, and what is refused by name rather than silently ignored. A
// feature that lands adds its struct field and drops its Refused row.

// ignoredFields are accepted and have no effect; each says why that is
// harmless.
var ignoredFields = map[string]string{
	"user":                "an end-user id for the provider's abuse tracking; nothing to track here",
	"safety_identifier":   "the successor of user",
	"metadata":            "tags for stored completions; nothing is stored",
	"store":               "nothing is stored for distillation or evals",
	"service_tier":        "one tier here",
	"prompt_cache_key":    "a routing hint for the provider's prefix cache",
	"parallel_tool_calls": "tool calls are parsed from whatever the model emits",
	// tool_choice is checked for shape here (checkTools); honouring
	// required/named is the tool-call wiring's, which declares it in
	// chatRequest (and so makes this row moot).
	"tool_choice": "auto is what the model does anyway",
}

// refusedFields are OpenAI (or SGLang/vLLM) parameters the gateway does
// not implement; a request naming one gets a 400 saying so.
var refusedFields = map[string]string{
	"logit_bias":             "the gateway does not apply logit biases",
	"continue_final_message": "continuing the final assistant message is not implemented",
	"priority":               "request priorities are not implemented (every request is served in arrival order)",
	"functions":              "the deprecated functions API is not implemented; use tools",
	"function_call":          "the deprecated functions API is not implemented; use tool_choice",
	"audio":                  "audio output is not supported",
	"modalities":             "only text output is supported",
	"prediction":             "predicted outputs are not supported",
	"web_search_options":     "web search is not supported",
	"reasoning_effort":       "reasoning effort is not wired to the chat template; use chat_template_kwargs",
	"verbosity":              "verbosity is not supported",
	"regex":                  "regex-constrained decoding is not wired yet",
	"ebnf":                   "grammar-constrained decoding is not wired yet",
	"json_schema":            "json_schema as a top-level field is not wired yet; use response_format",
	"structural_tag":         "structural tags are not wired yet",
	"guided_json":            "guided decoding is not wired yet; use response_format",
	"guided_regex":           "guided decoding is not wired yet",
	"guided_grammar":         "guided decoding is not wired yet",
	"guided_choice":          "guided decoding is not wired yet",
	"lora_path":              "LoRA adapters are not supported",
	"return_hidden_states":   "hidden states are not returned",
}

var requestFields = &front.Fields{
	Ignored: ignoredFields,
	Refused: refusedFields,
	Nested: map[string]*front.Fields{
		// include_obfuscation pads chunks against side channels; padding
		// nothing here is harmless.
		"stream_options": {Ignored: map[string]string{"include_obfuscation": "no padding is added"}},
	},
}

// fieldsFor is the field table of a request type; nil (no check) for the
// gateway-local routes (/v1/tokenize, /v1/detokenize).
func fieldsFor(v any) *front.Fields {
	switch v.(type) {
	case *chatRequest, *completionRequest:
		return requestFields
	}
	return nil
}

// decodeBody reads a request body through the front door's decoder:
// errors name the field as the client sent it, unknown and unsupported
// fields are refused by name, and chat's tool fields are checked for
// shape.
func decodeBody(r *http.Request, v any) *apiError {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return front.ReadError(err)
	}
	if e := front.DecodeBytes(b, v, fieldsFor(v)); e != nil {
		return e
	}
	if _, ok := v.(*chatRequest); ok {
		return checkTools(b)
	}
	return nil
}

// checkTools refuses tools that are not an array and a tool_choice that
// asks for tools when there are none (OpenAI answers both with a 400).
func checkTools(b []byte) *apiError {
	var top struct {
		Tools      json.RawMessage `json:"tools"`
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	if json.Unmarshal(b, &top) != nil {
		return nil
	}
	tools := bytes.TrimSpace(top.Tools)
	hasTools := false
	if len(tools) > 0 && string(tools) != "null" {
		if tools[0] != '[' {
			return badRequest("tools", "invalid type for field 'tools': expected array of tool objects")
		}
		var list []json.RawMessage
		if json.Unmarshal(tools, &list) != nil {
			return badRequest("tools", "invalid type for field 'tools': expected array of tool objects")
		}
		for _, t := range list {
			if t := bytes.TrimSpace(t); len(t) == 0 || t[0] != '{' {
				return badRequest("tools", "invalid type for an item of 'tools': expected object")
			}
		}
		hasTools = len(list) > 0
	}
	choice := bytes.TrimSpace(top.ToolChoice)
	if !hasTools && len(choice) > 0 && string(choice) != "null" && string(choice) != `"none"` {
		return badRequest("tool_choice", "tool_choice is only allowed when tools are given")
	}
	return nil
}

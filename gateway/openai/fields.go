package openai

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// The tables of accepted fields beyond the request structs (a field a
// struct declares is implemented, so accepted): what the clients we test
// with (openai npm, Vercel AI SDK, LangChain) send that changes nothing
// here, and what is refused by name rather than silently ignored. A
// feature that lands adds its struct field and drops its Refused row.

// ignoredFields are accepted and have no effect; each says why that is
// harmless.
var ignoredFields = map[string]string{
	"user":              "an end-user id for the provider's abuse tracking; nothing to track here",
	"safety_identifier": "the successor of user",
	"metadata":          "tags for stored completions; nothing is stored",
	"store":             "nothing is stored for distillation or evals",
	"service_tier":      "one tier here",
	"prompt_cache_key":  "a routing hint for the provider's prefix cache",
}

// refusedFields are OpenAI (or SGLang/vLLM) parameters the gateway does
// not implement; a request naming one gets a 400 saying so.
var refusedFields = map[string]string{
	"logit_bias":             "the gateway does not apply logit biases",
	"continue_final_message": "continuing the final assistant message is not implemented",
	"functions":              "the deprecated functions API is not implemented; use tools",
	"function_call":          "the deprecated functions API is not implemented; use tool_choice",
	"audio":                  "audio output is not supported",
	"modalities":             "only text output is supported",
	"prediction":             "predicted outputs are not supported",
	"web_search_options":     "web search is not supported",
	"verbosity":              "verbosity is not supported",
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

// responsesFields is /v1/responses' table, as strict as chat's: the
// struct (responsesRequest) declares what is implemented, these rows what
// is accepted without effect, refused by name, or accepted only with
// some values.
var responsesFields = &front.Fields{
	Ignored: map[string]string{
		"safety_identifier":      "an end-user id for the provider's abuse tracking; nothing to track here",
		"prompt_cache_key":       "a routing hint for the provider's prefix cache",
		"prompt_cache_retention": "how long the provider keeps a prefix cached; the engines' cache keeps what fits",
		"max_tool_calls":         "it caps calls to built-in tools, and the gateway has none (function calls are the client's)",
	},
	Refused: map[string]string{
		"conversation": "conversations are not stored here; continue a response with previous_response_id",
		"prompt":       "reusable prompt templates live on OpenAI's side; send input and instructions",
	},
	Values: map[string]front.Allowed{
		"background": {Values: []string{"false"},
			Why: "background responses are not implemented: a response is generated while the request waits (send background false, or leave it out)"},
		"service_tier": {Values: []string{`"auto"`, `"default"`}, Why: "there is one service tier here (auto or default)"},
		"truncation": {Values: []string{`"disabled"`},
			Why: "input items are never dropped to fit the context (truncation disabled, the default): a request that does not fit is a 400 naming its length"},
	},
	Nested: map[string]*front.Fields{
		"stream_options": {},
		"text": {Values: map[string]front.Allowed{
			"verbosity": {Values: []string{`"medium"`}, Why: "verbosity is not supported (the model answers at its own length)"},
		}},
		"reasoning": {},
	},
}

// includeLogprobs is the include value that turns on output logprobs.
const includeLogprobs = "message.output_text.logprobs"

// responsesInclude is every include value the Responses API defines:
// "" implemented, else why it is refused by name.
var responsesInclude = map[string]string{
	includeLogprobs:                         "",
	"reasoning.encrypted_content":           "reasoning is returned in plain text in its reasoning item, never encrypted (keep it with store, or continue with previous_response_id)",
	"message.input_image.image_url":         "input image URLs are not echoed back",
	"file_search_call.results":              "file search is not a tool here",
	"web_search_call.results":               "web search is not a tool here",
	"web_search_call.action.sources":        "web search is not a tool here",
	"code_interpreter_call.outputs":         "the code interpreter is not a tool here",
	"computer_call_output.output.image_url": "computer use is not a tool here",
}

// maxTopLogprobs is OpenAI's ceiling on chat's and Responses'
// top_logprobs; maxCompletionLogprobs on the legacy completions' logprobs.
const (
	maxTopLogprobs        = tokenapi.MaxTopLogprobs
	maxCompletionLogprobs = 5
)

// fieldsFor is the field table of a request type; nil (no check) for the
// gateway-local routes (/v1/tokenize, /v1/detokenize).
func fieldsFor(v any) *front.Fields {
	switch v.(type) {
	case *chatRequest, *completionRequest:
		return requestFields
	case *responsesRequest:
		return responsesFields
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
	if c, ok := v.(*chatRequest); ok {
		return checkTools(c.Tools, c.ToolChoice)
	}
	return nil
}

// checkTools refuses tools that are not an array and a tool_choice that
// asks for tools when there are none (OpenAI answers both with a 400):
// the request's own fields, decoded already, not a second parse of the
// body.
func checkTools(rawTools, rawChoice json.RawMessage) *apiError {
	tools := bytes.TrimSpace(rawTools)
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
	choice := bytes.TrimSpace(rawChoice)
	if !hasTools && len(choice) > 0 && string(choice) != "null" && string(choice) != `"none"` {
		return badRequest("tool_choice", "tool_choice needs tools: it is only allowed when tools are given")
	}
	return nil
}

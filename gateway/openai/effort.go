package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Reasoning effort (chat's reasoning_effort, Responses' reasoning.effort)
// has no engine field: it maps onto the chat template's own switch, when
// the template has one.

// efforts are the values OpenAI documents.
var efforts = []string{"none", "minimal", "low", "medium", "high"}

// effortKwargs decides the chat_template_kwargs a reasoning effort asks
// for, from the variables the template reads (uses): a template with
// reasoning_effort (gpt-oss) gets the effort itself; one with an on/off
// switch, enable_thinking (Qwen3) or thinking (DeepSeek V3.1), gets it
// off for none and minimal and on otherwise; a template with neither
// cannot honour an effort, which is an error the client sees. "" asks for
// nothing.
func effortKwargs(effort string, uses func(name string) bool) (map[string]any, error) {
	if effort == "" {
		return nil, nil
	}
	known := false
	for _, e := range efforts {
		known = known || e == effort
	}
	if !known {
		return nil, fmt.Errorf("reasoning effort %q is not one of %s", effort, strings.Join(efforts, ", "))
	}
	if uses("reasoning_effort") {
		return map[string]any{"reasoning_effort": effort}, nil
	}
	think := effort != "none" && effort != "minimal"
	for _, sw := range []string{"enable_thinking", "thinking"} {
		if uses(sw) {
			return map[string]any{sw: think}, nil
		}
	}
	return nil, fmt.Errorf("the model's chat template has no reasoning switch (reasoning_effort, enable_thinking or thinking), so a reasoning effort cannot be honoured; leave it out")
}

// mergeKwargs adds kw under the request's own chat_template_kwargs, whose
// keys win (the client said exactly what the template gets).
func mergeKwargs(raw json.RawMessage, kw map[string]any) (json.RawMessage, error) {
	if len(kw) == 0 {
		return raw, nil
	}
	merged := map[string]any{}
	for k, v := range kw {
		merged[k] = v
	}
	if t := bytes.TrimSpace(raw); len(t) > 0 && string(t) != "null" {
		var own map[string]any
		if err := json.Unmarshal(t, &own); err != nil {
			return nil, fmt.Errorf("chat_template_kwargs must be a JSON object")
		}
		for k, v := range own {
			merged[k] = v
		}
	}
	b, err := json.Marshal(merged)
	return b, err
}

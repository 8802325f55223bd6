package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

// What OpenAI answers with a 400 is a 400 here too, naming the field,
// never a 200 that silently reads the request another way: a user's (or
// system's) null content, a text part with no text, a null stop string,
// the deprecated function role, a tool name with spaces.
func TestOpenAIRefusals(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, agentFake(t, "hello"), Options{Model: "demo", ToolCallParser: "qwen", ReasoningParser: "qwen3"})
	tool := func(name string) string {
		return `[{"type":"function","function":{"name":"` + name + `","parameters":{"type":"object"}}}]`
	}
	for _, tc := range []struct {
		what, body, param string
	}{
		{"user content null", `{"messages":[{"role":"user","content":null}]}`, "messages[0].content"},
		{"user content missing", `{"messages":[{"role":"user"}]}`, "messages[0].content"},
		{"system content null", `{"messages":[{"role":"system","content":null},{"role":"user","content":"x"}]}`, "messages[0].content"},
		{"a text part with no text", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text"},
		{"a text part with null text", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":null}]}]}`, "messages[0].content[1].text"},
		{"stop [null]", `{"messages":[{"role":"user","content":"x"}],"stop":[null]}`, "stop[0]"},
		{"stop with a null", `{"messages":[{"role":"user","content":"x"}],"stop":["a",null]}`, "stop[1]"},
		{"the function role", `{"messages":[{"role":"user","content":"x"},{"role":"function","name":"f","content":"1"}]}`, "messages[1].role"},
		{"a tool name with spaces", `{"messages":[{"role":"user","content":"x"}],"tools":` + tool("get weather") + `}`, "tools[0].function.name"},
		{"a tool name of markup", `{"messages":[{"role":"user","content":"x"}],"tools":` + tool("<f>") + `}`, "tools[0].function.name"},
		{"a tool name over 64 characters", `{"messages":[{"role":"user","content":"x"}],"tools":` + tool(strings.Repeat("f", 65)) + `}`, "tools[0].function.name"},
	} {
		resp, b := post(t, srv.URL+"/v1/chat/completions", tc.body)
		var e struct {
			Error struct{ Param string } `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != 400 || e.Error.Param != tc.param {
			t.Errorf("%s: %d %s, want a 400 naming %s", tc.what, resp.StatusCode, b, tc.param)
		}
	}
	// What OpenAI takes stays taken.
	for _, body := range []string{
		`{"messages":[{"role":"user","content":""}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"1"}]}`,
		`{"messages":[{"role":"user","content":"x"}],"stop":["a",""]}`,
		`{"messages":[{"role":"user","content":"x"}],"stop":null}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":` + tool("get_weather-v2") + `}`,
	} {
		if resp, b := post(t, srv.URL+"/v1/chat/completions", body); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
}

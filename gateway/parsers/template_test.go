package parsers

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/gateway/tokenizer/testcache"
)

// The parsers read back what the models' own chat templates write: an
// assistant turn with tool calls, rendered by the real template (fetched
// into the test cache, skipped when offline), parses to the same calls.
func TestModelTemplatesRoundTrip(t *testing.T) {
	args := []string{`{"city":"東京","days":3,"opts":{"unit":"c","tags":["a \"b\""]}}`, `{}`}
	objCalls := `[{"id":"call_0","type":"function","function":{"name":"get_weather","arguments":` + args[0] + `}},` +
		`{"id":"call_1","type":"function","function":{"name":"get_time","arguments":` + args[1] + `}}]`
	// DeepSeek-V3's template concatenates arguments, so they must be strings.
	strCalls := `[{"id":"call_0","type":"function","function":{"name":"get_weather","arguments":` + quote(args[0]) + `}},` +
		`{"id":"call_1","type":"function","function":{"name":"get_time","arguments":` + quote(args[1]) + `}}]`
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},` +
		`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]`
	for _, c := range []struct {
		pkg, tool, reasoning, end string
		assistant, content        string
	}{
		// Qwen3 renders the content, then each call as a JSON line in <tool_call> tags.
		{testcache.Qwen3, "qwen", "qwen3", "<|im_end|>", `{"role":"assistant","content":"Let me check.","tool_calls":` + objCalls + `}`, "Let me check."},
		// DeepSeek-V3 renders calls only for an assistant turn without content.
		{testcache.DeepSeekV3, "deepseek", "passthrough", "<｜end▁of▁sentence｜>", `{"role":"assistant","content":null,"tool_calls":` + strCalls + `}`, ""},
	} {
		t.Run(c.tool, func(t *testing.T) {
			tok, err := tokenizer.Load(testcache.TokenizerDir(t, c.pkg))
			if err != nil {
				t.Fatal(err)
			}
			user := `{"role":"user","content":"Weather and time in Tokyo?"}`
			prompt, err := tok.ApplyChatTemplate(tokenizer.ChatInput{Messages: json.RawMessage("[" + user + "]"), Tools: json.RawMessage(tools), AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			full, err := tok.ApplyChatTemplate(tokenizer.ChatInput{Tools: json.RawMessage(tools),
				Messages: json.RawMessage("[" + user + "," + c.assistant + "]")})
			if err != nil {
				t.Fatal(err)
			}
			reply, ok := strings.CutPrefix(full, prompt)
			if !ok {
				t.Fatalf("the rendered turn does not extend the generation prompt:\n%q\n%q", prompt, full)
			}
			if i := strings.LastIndex(reply, c.end); i >= 0 {
				reply = reply[:i] // the engine stops on the end-of-turn token
			}
			got, err := Parse(Config{Tool: c.tool, Reasoning: c.reasoning}, reply)
			if err != nil {
				t.Fatal(err)
			}
			if got.Content != c.content || len(got.Calls) != 2 {
				t.Fatalf("reply %q parsed to %+v", reply, got)
			}
			for i, name := range []string{"get_weather", "get_time"} {
				var g, w any
				if err := json.Unmarshal([]byte(got.Calls[i].Arguments), &g); err != nil {
					t.Fatal(err)
				}
				_ = json.Unmarshal([]byte(args[i]), &w)
				if got.Calls[i].Name != name || !reflect.DeepEqual(g, w) {
					t.Errorf("call %d = %+v, want %s %s", i, got.Calls[i], name, args[i])
				}
			}
		})
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

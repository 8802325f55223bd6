package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/profiles"
)

const demoTok = "tokenizer/testdata/demo"

// agentTools is a weather tool in chat's shape.
const agentTools = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city","unit"]}}}]`

// agentCluster is a 1P1D deployment on ts-fake that spells scripted
// replies in the demo tokenizer's vocabulary, behind the OpenAI front end
// with Qwen3's parsers (gateway.tool_call_parser qwen, reasoning_parser
// qwen3).
func agentCluster(t *testing.T) *cluster {
	t.Helper()
	rules := []map[string]string{ // tried in order
		{"match": "tool\n18 degrees", "reply": "<think>Got it.</think>It is 18 °C in Paris."},
		{"match": "Weather in Paris?", "reply": "<think>The user wants the weather; I call the tool.</think>\n\n" +
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"},
		{"match": "", "reply": "Plain answer."},
	}
	b, _ := json.Marshal(rules)
	path := filepath.Join(t.TempDir(), "replies.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(demoTok)
	if err != nil {
		t.Fatal(err)
	}
	mount := func(e tokenapi.Engine, mux *http.ServeMux) {
		openai.New(e, tok, openai.Options{ToolCallParser: "qwen", ReasoningParser: "qwen3"}).Register(mux)
	}
	// The demo tokenizer ends a turn with id 1002 (generation_config.json).
	extra := []string{"--fake-replies", path, "--tokenizer", demoTok, "--fake-eos-id", "1002", "--reasoning-parser", "qwen3"}
	rs := []role{{name: "p", kind: profiles.KindPrefill, extra: extra}, {name: "d", kind: profiles.KindDecode, extra: extra}}
	c := newCluster(t, Options{Mount: mount}, rs...)
	c.waitRegistered("p", "d")
	return c
}

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type e2eCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string  `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

type e2eMsg struct {
	Content          *string   `json:"content"`
	ReasoningContent *string   `json:"reasoning_content"`
	ToolCalls        []e2eCall `json:"tool_calls"`
}

func chatOnce(t *testing.T, base, body string) (e2eMsg, string) {
	t.Helper()
	st, b := postJSON(t, base+"/v1/chat/completions", body)
	if st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	var r struct {
		Choices []struct {
			Message      e2eMsg `json:"message"`
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("%v %s", err, b)
	}
	return r.Choices[0].Message, r.Choices[0].FinishReason
}

// chatStream folds a streamed chat as the openai SDK does.
func chatStream(t *testing.T, base, body string) (content, reasoning string, calls []e2eCall, finish string) {
	t.Helper()
	st, b := postJSON(t, base+"/v1/chat/completions", body)
	if st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta        e2eMsg  `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("%v: %s", err, d)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content += *ch.Delta.Content
			}
			if ch.Delta.ReasoningContent != nil {
				reasoning += *ch.Delta.ReasoningContent
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == nil {
					t.Fatalf("tool call delta without index: %s", d)
				}
				if *tc.Index == len(calls) {
					a := ""
					if tc.Function.Arguments != nil {
						a = *tc.Function.Arguments
					}
					tc.Function.Arguments = &a
					calls = append(calls, tc)
					continue
				}
				if tc.Function.Arguments != nil {
					a := *calls[*tc.Index].Function.Arguments + *tc.Function.Arguments
					calls[*tc.Index].Function.Arguments = &a
				}
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return content, reasoning, calls, finish
}

func argsEqual(t *testing.T, got, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal([]byte(got), &a); err != nil {
		t.Fatalf("arguments %q: %v", got, err)
	}
	_ = json.Unmarshal([]byte(want), &b)
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	if string(x) != string(y) {
		t.Fatalf("arguments %s, want %s", x, y)
	}
}

// Through real HTTP and a PD pair of ts-fake engines: a Qwen3-style
// reply (<think> then <tool_call>) becomes reasoning_content and
// tool_calls, streamed and not; the tool result in the history answers
// the next turn; tool_choice required and named produce valid calls via
// the json_schema the engine honours; response_format json_schema
// returns a schema instance.
func TestAgentChatE2E(t *testing.T) {
	t.Parallel()
	c := agentCluster(t)
	ask := `{"model":"fake","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":` + agentTools + `%s}`
	m, finish := chatOnce(t, c.base, fmt.Sprintf(ask, ""))
	if finish != "tool_calls" || m.ReasoningContent == nil || *m.ReasoningContent != "The user wants the weather; I call the tool." || len(m.ToolCalls) != 1 || m.Content != nil {
		t.Fatalf("%s %+v", finish, m)
	}
	call := m.ToolCalls[0]
	if call.Function.Name != "get_weather" || call.ID == "" || call.Type != "function" {
		t.Fatalf("%+v", call)
	}
	argsEqual(t, *call.Function.Arguments, `{"city":"Paris","unit":"c"}`)

	content, reasoning, calls, finish := chatStream(t, c.base, fmt.Sprintf(ask, `,"stream":true`))
	if finish != "tool_calls" || reasoning != "The user wants the weather; I call the tool." || strings.TrimSpace(content) != "" || len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].ID == "" {
		t.Fatalf("%q %q %+v %s", content, reasoning, calls, finish)
	}
	argsEqual(t, *calls[0].Function.Arguments, `{"city":"Paris","unit":"c"}`)

	// The next turn: the assistant's call and the tool's result in the history.
	hist, _ := json.Marshal([]any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": call.ID, "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": *call.Function.Arguments}}}},
		map[string]any{"role": "tool", "tool_call_id": call.ID, "content": "18 degrees"},
	})
	m, finish = chatOnce(t, c.base, `{"messages":`+string(hist)+`,"tools":`+agentTools+`}`)
	if finish != "stop" || m.Content == nil || *m.Content != "It is 18 °C in Paris." || *m.ReasoningContent != "Got it." {
		t.Fatalf("%s %+v", finish, m)
	}

	for _, choice := range []string{`"required"`, `{"type":"function","function":{"name":"get_weather"}}`} {
		q := `{"messages":[{"role":"user","content":"Anything"}],"tools":` + agentTools + `,"tool_choice":` + choice + `%s}`
		m, finish = chatOnce(t, c.base, fmt.Sprintf(q, ""))
		if finish != "tool_calls" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" {
			t.Fatalf("%s: %s %+v", choice, finish, m)
		}
		argsEqual(t, *m.ToolCalls[0].Function.Arguments, `{"city":"","unit":"c"}`)
		_, _, calls, finish = chatStream(t, c.base, fmt.Sprintf(q, `,"stream":true`))
		if finish != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" {
			t.Fatalf("%s streamed: %s %+v", choice, finish, calls)
		}
	}

	m, _ = chatOnce(t, c.base, `{"messages":[{"role":"user","content":"Anything"}],"response_format":{"type":"json_schema","json_schema":{"name":"r","strict":true,"schema":{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":3}},"required":["ok","n"]}}}}`)
	if m.Content == nil || *m.Content != `{"ok":false,"n":3}` {
		t.Fatalf("%+v", m)
	}
}

// /v1/responses through real HTTP: a function_call item, then
// previous_response_id with the call's output, streamed.
func TestAgentResponsesE2E(t *testing.T) {
	t.Parallel()
	c := agentCluster(t)
	tools := `[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}},"required":["city","unit"]}}]`
	st, b := postJSON(t, c.base+"/v1/responses", `{"model":"fake","input":"Weather in Paris?","tools":`+tools+`}`)
	if st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	var r struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Output []struct {
			Type   string `json:"type"`
			Name   string `json:"name"`
			CallID string `json:"call_id"`
		} `json:"output"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	var callID string
	for _, it := range r.Output {
		if it.Type == "function_call" && it.Name == "get_weather" {
			callID = it.CallID
		}
	}
	if r.Status != "completed" || len(r.Output) != 2 || r.Output[0].Type != "reasoning" || callID == "" {
		t.Fatalf("%s", b)
	}
	st, b = postJSON(t, c.base+"/v1/responses", fmt.Sprintf(`{"model":"fake","stream":true,"previous_response_id":%q,"tools":%s,"input":[{"type":"function_call_output","call_id":%q,"output":"18 degrees"}]}`, r.ID, tools, callID))
	if st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	text, completed := "", false
	for _, line := range strings.Split(string(b), "\n") {
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
		}
		_ = json.Unmarshal([]byte(d), &ev)
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			completed = true
		}
	}
	if !completed || text != "It is 18 °C in Paris." {
		t.Fatalf("text %q completed %v:\n%s", text, completed, b)
	}
}

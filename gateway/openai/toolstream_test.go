package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

// longTool has arguments long enough to span many tokens.
const longTool = `[{"type":"function","function":{"name":"book_trip","parameters":{"type":"object","properties":` +
	`{"origin":{"type":"string"},"destination":{"type":"string"},"travellers":{"type":"integer"},"notes":{"type":"string"}},` +
	`"required":["origin","destination","travellers","notes"]}}}]`

const forceBook = `,"tool_choice":{"type":"function","function":{"name":"book_trip"}}`

// A forced tool call cut by max_tokens comes back as the partial call in
// tool_calls with finish_reason "length", as OpenAI returns it (it used to
// be raw JSON in content with no tool_calls): chat whole and streamed,
// and /v1/responses (an incomplete function_call item).
func TestForcedCallCutByLength(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, agentFake(t, "x"), Options{Model: "demo", ToolCallParser: "qwen"})
	base := `{"messages":[{"role":"user","content":"Book it."}],"tools":` + longTool
	full := chatAgent(t, srv.URL, base+forceBook+`}`)
	if full.FinishReason != "tool_calls" || len(full.Message.ToolCalls) != 1 {
		t.Fatalf("uncut: %+v", full)
	}
	whole := full.Message.ToolCalls[0].Function.Arguments

	c := chatAgent(t, srv.URL, base+forceBook+`,"max_tokens":6}`)
	if c.FinishReason != "length" || c.Message.Content != nil || len(c.Message.ToolCalls) != 1 {
		t.Fatalf("cut: finish %q content %v calls %+v", c.FinishReason, c.Message.Content, c.Message.ToolCalls)
	}
	tc := c.Message.ToolCalls[0]
	if tc.Function.Name != "book_trip" || tc.ID == "" || tc.Type != "function" || tc.Function.Arguments == "" ||
		!strings.HasPrefix(whole, tc.Function.Arguments) || tc.Function.Arguments == whole {
		t.Fatalf("cut call %+v, whole arguments %s", tc, whole)
	}
	s := streamAgent(t, srv.URL, base+forceBook+`,"max_tokens":6,"stream":true}`)
	if s.finish != "length" || s.content != "" || len(s.calls) != 1 || s.calls[0].args != tc.Function.Arguments {
		t.Fatalf("streamed cut %+v, want arguments %q", s, tc.Function.Arguments)
	}

	r := createResp(t, srv.URL, `{"input":"Book it.","max_output_tokens":6,"tools":[{"type":"function","name":"book_trip","parameters":`+
		`{"type":"object","properties":{"origin":{"type":"string"},"notes":{"type":"string"}},"required":["origin","notes"]}}],`+
		`"tool_choice":{"type":"function","name":"book_trip"}}`)
	if r.Status != "incomplete" || len(r.Output) != 1 || r.Output[0].Type != "function_call" || r.Output[0].Status != "incomplete" ||
		r.Output[0].Name != "book_trip" || r.Output[0].Arguments == "" {
		t.Fatalf("responses cut %+v", r)
	}
}

// Streamed tool-call arguments arrive in fragments as they decode (SMG
// streams them so; they used to come in one piece per call), under
// tool_choice auto (the qwen parser), required and a named function, in
// chat streams and in Responses streams.
func TestToolArgumentsStreamInFragments(t *testing.T) {
	t.Parallel()
	reply := "<tool_call>\n{\"name\": \"book_trip\", \"arguments\": {\"origin\": \"Paris\", \"destination\": \"Tokyo\", \"travellers\": 2, \"notes\": \"window seats please\"}}\n</tool_call>"
	srv := newTestServer(t, agentFake(t, reply), Options{Model: "demo", ToolCallParser: "qwen"})
	base := `{"messages":[{"role":"user","content":"Book it."}],"stream":true,"tools":` + longTool
	for _, choice := range []string{``, `,"tool_choice":"required"`, forceBook} {
		resp, b := post(t, srv.URL+"/v1/chat/completions", base+choice+`}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", choice, resp.StatusCode, b)
		}
		frags, args := 0, ""
		for _, ev := range events(t, b) {
			var c struct {
				Choices []struct {
					Delta struct {
						ToolCalls []struct {
							Function struct {
								Arguments string `json:"arguments"`
							} `json:"function"`
						} `json:"tool_calls"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if json.Unmarshal([]byte(ev), &c) != nil {
				continue
			}
			for _, ch := range c.Choices {
				for _, tc := range ch.Delta.ToolCalls {
					if tc.Function.Arguments != "" {
						frags++
						args += tc.Function.Arguments
					}
				}
			}
		}
		if frags < 4 || !json.Valid([]byte(args)) {
			t.Errorf("tool_choice %q: %d argument fragments, joined %s", choice, frags, args)
		}
	}

	resp, b := post(t, srv.URL+"/v1/responses", `{"input":"Book it.","stream":true,"tools":[{"type":"function","name":"book_trip","parameters":`+
		`{"type":"object","properties":{"origin":{"type":"string"},"notes":{"type":"string"}},"required":["origin","notes"]}}],"tool_choice":"required"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	deltas, done := 0, ""
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			Type      string `json:"type"`
			Arguments string `json:"arguments"`
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(d), &ev) == nil {
			switch ev.Type {
			case "response.function_call_arguments.delta":
				deltas++
			case "response.function_call_arguments.done":
				done = ev.Arguments
			}
		}
	}
	if deltas < 4 || !json.Valid([]byte(done)) {
		t.Fatalf("responses: %d argument deltas, done %q", deltas, done)
	}
}

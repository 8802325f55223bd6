package openai

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/gateway/tokenapi"
)

const weatherTools = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},` +
	`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"]}}}]`

// qwenReply is a Qwen3 reply: a think block, then two hermes-style calls.
const qwenReply = "<think>The user wants weather and time.</think>\n\n" +
	"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
	"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>"

// agentFake answers a json_schema-constrained request with an instance
// of the schema (as a grammar-constrained engine must), else reply.
func agentFake(t *testing.T, reply string) *fakeEngine {
	tk := demoTokenizer(t)
	eng := newFake(tk, reply)
	eng.reply = func(r tokenapi.Request) string {
		if r.Sampling.JSONSchema != nil {
			inst, err := fakemodel.SchemaInstance(*r.Sampling.JSONSchema)
			if err != nil {
				return "bad schema: " + err.Error()
			}
			return inst
		}
		return reply
	}
	return eng
}

type agentChoice struct {
	Message struct {
		Content          *string `json:"content"`
		ReasoningContent string  `json:"reasoning_content"`
		Reasoning        string  `json:"reasoning"`
		ToolCalls        []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

func chatAgent(t *testing.T, url, body string) agentChoice {
	t.Helper()
	resp, b := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var r struct{ Choices []agentChoice }
	if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("%v %s", err, b)
	}
	return r.Choices[0]
}

// streamedCall is a tool call folded from stream deltas the way the
// openai SDK accumulates them (by index; id/type/name once, arguments
// concatenated).
type streamedCall struct{ id, typ, name, args string }

type streamed struct {
	content, reasoning string
	calls              []streamedCall
	finish             string
}

func streamAgent(t *testing.T, url, body string) streamed {
	t.Helper()
	resp, b := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var out streamed
	for _, ev := range events(t, b) {
		if ev == "[DONE]" {
			break
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
					ToolCalls        []struct {
						Index    *int   `json:"index"`
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string  `json:"name"`
							Arguments *string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("%v: %s", err, ev)
		}
		for _, ch := range c.Choices {
			d := ch.Delta
			if d.Content != nil {
				out.content += *d.Content
			}
			if d.ReasoningContent != nil {
				out.reasoning += *d.ReasoningContent
			}
			for _, tc := range d.ToolCalls {
				if tc.Index == nil {
					t.Fatalf("tool call delta without index: %s", ev)
				}
				i := *tc.Index
				if i == len(out.calls) {
					if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
						t.Fatalf("first delta of call %d lacks id/type/name: %s", i, ev)
					}
					out.calls = append(out.calls, streamedCall{id: tc.ID, typ: tc.Type, name: tc.Function.Name})
				} else if i > len(out.calls) {
					t.Fatalf("call index %d skips ahead: %s", i, ev)
				}
				if tc.Function.Arguments != nil {
					out.calls[i].args += *tc.Function.Arguments
				}
			}
			if ch.FinishReason != nil {
				out.finish = *ch.FinishReason
			}
		}
	}
	return out
}

func sameJSONText(t *testing.T, got, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal([]byte(got), &a); err != nil {
		t.Fatalf("arguments %q: %v", got, err)
	}
	_ = json.Unmarshal([]byte(want), &b)
	ga, _ := json.Marshal(a)
	wb, _ := json.Marshal(b)
	if string(ga) != string(wb) {
		t.Fatalf("arguments %s, want %s", ga, wb)
	}
}

// A Qwen3 reply's think block lands in reasoning_content and its two
// <tool_call>s in tool_calls with finish_reason tool_calls, streamed (in
// the delta shape the openai SDK accumulates) and not.
func TestChatToolCallsQwen(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, qwenReply)
	srv := newTestServer(t, eng, Options{Model: "demo", ToolCallParser: "qwen", ReasoningParser: "qwen3"})
	body := `{"model":"demo","messages":[{"role":"user","content":"Weather and time in Paris?"}],"tools":` + weatherTools + `%s}`
	c := chatAgent(t, srv.URL, strings.Replace(body, "%s", "", 1))
	m := c.Message
	if c.FinishReason != "tool_calls" || m.ReasoningContent != "The user wants weather and time." || m.Reasoning != m.ReasoningContent || m.Content != nil || len(m.ToolCalls) != 2 {
		t.Fatalf("%+v", c)
	}
	if m.ToolCalls[0].Function.Name != "get_weather" || m.ToolCalls[1].Function.Name != "get_time" || m.ToolCalls[0].Type != "function" || m.ToolCalls[0].ID == "" || m.ToolCalls[0].ID == m.ToolCalls[1].ID {
		t.Fatalf("%+v", m.ToolCalls)
	}
	sameJSONText(t, m.ToolCalls[0].Function.Arguments, `{"city":"Paris"}`)
	sameJSONText(t, m.ToolCalls[1].Function.Arguments, `{"tz":"CET"}`)
	// The template saw the tools.
	if reqs := eng.requests(); !strings.Contains(eng.tok.Decode(reqs[0].InputIDs, false), "Tools you may call:") {
		t.Fatal("the prompt does not offer the tools")
	}

	s := streamAgent(t, srv.URL, strings.Replace(body, "%s", `,"stream":true`, 1))
	if s.finish != "tool_calls" || s.reasoning != "The user wants weather and time." || strings.TrimSpace(s.content) != "" || len(s.calls) != 2 {
		t.Fatalf("%+v", s)
	}
	if s.calls[0].name != "get_weather" || s.calls[1].name != "get_time" {
		t.Fatalf("%+v", s.calls)
	}
	sameJSONText(t, s.calls[0].args, `{"city":"Paris"}`)
	sameJSONText(t, s.calls[1].args, `{"tz":"CET"}`)

	// parallel_tool_calls false keeps the first call only.
	c = chatAgent(t, srv.URL, strings.Replace(body, "%s", `,"parallel_tool_calls":false`, 1))
	if len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" {
		t.Fatalf("%+v", c)
	}
	// tool_choice none: the tools are not offered and nothing is parsed.
	c = chatAgent(t, srv.URL, strings.Replace(body, "%s", `,"tool_choice":"none"`, 1))
	if len(c.Message.ToolCalls) != 0 || c.Message.Content == nil || !strings.Contains(*c.Message.Content, "<tool_call>") || c.FinishReason != "stop" {
		t.Fatalf("%+v", c)
	}
	reqs := eng.requests()
	if strings.Contains(eng.tok.Decode(reqs[len(reqs)-1].InputIDs, false), "Tools you may call:") {
		t.Fatal("tool_choice none still offers the tools")
	}
	// separate_reasoning false leaves the think block in content.
	c = chatAgent(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"separate_reasoning":false}`)
	if c.Message.ReasoningContent != "" || !strings.HasPrefix(*c.Message.Content, "<think>") {
		t.Fatalf("%+v", c)
	}
}

// Without parsers configured (passthrough) a reply is content, byte for byte.
func TestChatPassthroughKeepsContent(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, agentFake(t, qwenReply), Options{Model: "demo"})
	c := chatAgent(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"tools":`+weatherTools+`}`)
	if c.Message.Content == nil || *c.Message.Content != qwenReply || c.FinishReason != "stop" || len(c.Message.ToolCalls) != 0 {
		t.Fatalf("%+v", c)
	}
}

// tool_choice required and named are enforced by a json_schema sent to
// the engine; the constrained output is read back into calls.
func TestChatToolChoiceConstrained(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, "plain words")
	srv := newTestServer(t, eng, Options{Model: "demo", ToolCallParser: "qwen", ReasoningParser: "qwen3"})
	for _, tc := range []struct{ choice, name, args string }{
		{`"required"`, "get_weather", `{"city":""}`},
		{`{"type":"function","function":{"name":"get_time"}}`, "get_time", `{"tz":""}`},
	} {
		body := `{"messages":[{"role":"user","content":"x"}],"tools":` + weatherTools + `,"tool_choice":` + tc.choice + `%s}`
		c := chatAgent(t, srv.URL, strings.Replace(body, "%s", "", 1))
		if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != tc.name {
			t.Fatalf("%s: %+v", tc.choice, c)
		}
		sameJSONText(t, c.Message.ToolCalls[0].Function.Arguments, tc.args)
		reqs := eng.requests()
		if reqs[len(reqs)-1].Sampling.JSONSchema == nil {
			t.Fatalf("%s: no json_schema sent", tc.choice)
		}
		s := streamAgent(t, srv.URL, strings.Replace(body, "%s", `,"stream":true`, 1))
		if s.finish != "tool_calls" || len(s.calls) != 1 || s.calls[0].name != tc.name {
			t.Fatalf("%s streamed: %+v", tc.choice, s)
		}
		sameJSONText(t, s.calls[0].args, tc.args)
	}
}

// A forced call (tool_choice required, or a named function) cut by
// max_tokens anywhere — before its name, inside it, inside its arguments
// — comes back as the call with the arguments it got and finish_reason
// length, never as raw JSON in content: the name is known when one tool
// is offered or one is named. Streamed the same.
func TestChatForcedToolCallCutByLength(t *testing.T) {
	t.Parallel()
	oneTool := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	for _, tc := range []struct {
		what, tools, choice, name, whole string
	}{
		{"required, one tool offered", oneTool, `"required"`, "get_weather", `{"city":""}`},
		{"a named function", weatherTools, `{"type":"function","function":{"name":"get_time"}}`, "get_time", `{"tz":""}`},
	} {
		eng := agentFake(t, "")
		eng.perEvent = 1
		srv := newTestServer(t, eng, Options{Model: "demo", ToolCallParser: "qwen", ReasoningParser: "qwen3"})
		body := `{"messages":[{"role":"user","content":"x"}],"tools":` + tc.tools + `,"tool_choice":` + tc.choice + `,"max_tokens":%d%s}`
		full := chatAgent(t, srv.URL, fmt.Sprintf(body, 200, ""))
		if full.FinishReason != "tool_calls" || len(full.Message.ToolCalls) != 1 {
			t.Fatalf("%s uncut: %+v", tc.what, full)
		}
		sameJSONText(t, full.Message.ToolCalls[0].Function.Arguments, tc.whole)
		cuts := 0
		for max := 1; ; max++ {
			c := chatAgent(t, srv.URL, fmt.Sprintf(body, max, ""))
			if c.FinishReason != "length" {
				break // the whole call fits from here on
			}
			cuts++
			if len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != tc.name || c.Message.Content != nil && *c.Message.Content != "" {
				t.Fatalf("%s cut at %d tokens: %+v", tc.what, max, c)
			}
			args := c.Message.ToolCalls[0].Function.Arguments
			if !strings.HasPrefix(tc.whole, strings.ReplaceAll(args, " ", "")) && !strings.HasPrefix(strings.ReplaceAll(args, " ", ""), "{") {
				t.Fatalf("%s cut at %d tokens: arguments %q are not a part of %s", tc.what, max, args, tc.whole)
			}
			s := streamAgent(t, srv.URL, fmt.Sprintf(body, max, `,"stream":true`))
			if s.finish != "length" || len(s.calls) != 1 || s.calls[0].name != tc.name || s.calls[0].args != args || s.content != "" {
				t.Fatalf("%s cut at %d tokens, streamed: %+v; the whole answer had %q", tc.what, max, s, args)
			}
		}
		if cuts < 5 {
			t.Fatalf("%s: only %d cuts tried", tc.what, cuts)
		}
	}
}

// response_format json_schema and json_object, and SGLang's regex/ebnf,
// reach the engine as its one constraint.
func TestChatResponseFormat(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, "free text")
	srv := newTestServer(t, eng, Options{Model: "demo"})
	schema := `{"type":"object","properties":{"answer":{"type":"integer","minimum":4}},"required":["answer"],"additionalProperties":false}`
	c := chatAgent(t, srv.URL, `{"messages":[{"role":"user","content":"2+2?"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,"schema":`+schema+`}}}`)
	if c.Message.Content == nil || *c.Message.Content != `{"answer":4}` {
		t.Fatalf("%+v", c)
	}
	last := func() tokenapi.Sampling { r := eng.requests(); return r[len(r)-1].Sampling }
	if sp := last(); sp.JSONSchema == nil || *sp.JSONSchema != schema {
		t.Fatalf("json_schema %v", sp.JSONSchema)
	}
	c = chatAgent(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`)
	if *c.Message.Content != `{}` || *last().JSONSchema != `{"type":"object"}` {
		t.Fatalf("%+v", c)
	}
	chatAgent(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"regex":"[ab]+"}`)
	if sp := last(); sp.Regex == nil || *sp.Regex != "[ab]+" || sp.JSONSchema != nil {
		t.Fatalf("%+v", sp)
	}
	chatAgent(t, srv.URL, `{"messages":[{"role":"user","content":"x"}],"ebnf":"root ::= \"a\""}`)
	if sp := last(); sp.EBNF == nil {
		t.Fatalf("%+v", sp)
	}
	resp, b := post(t, srv.URL+"/v1/completions", `{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"a","schema":`+schema+`}}}`)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `{\"answer\":4}`) {
		t.Fatalf("completions: %d %s", resp.StatusCode, b)
	}
}

func TestChatAgentErrors(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, agentFake(t, "x"), Options{Model: "demo", ToolCallParser: "qwen"})
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, c := range []struct{ body, param, msg string }{
		{`{` + msgs + `,"tools":"get_weather"}`, "tools", "array"},
		{`{` + msgs + `,"tools":[{"type":"retrieval"}]}`, "tools[0].type", "not supported"},
		{`{` + msgs + `,"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name", "name"},
		{`{` + msgs + `,"tool_choice":"required"}`, "tool_choice", "needs tools"},
		{`{` + msgs + `,"tool_choice":"auto"}`, "tool_choice", "needs tools"},
		{`{` + msgs + `,"tools":` + weatherTools + `,"tool_choice":"sometimes"}`, "tool_choice", "sometimes"},
		{`{` + msgs + `,"tools":` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"nope"}}}`, "tool_choice", "nope"},
		{`{` + msgs + `,"response_format":{"type":"xml"}}`, "response_format.type", "xml"},
		{`{` + msgs + `,"response_format":{"type":"json_schema"}}`, "response_format.json_schema", "json_schema"},
		{`{` + msgs + `,"response_format":{"type":"json_object"},"regex":"a"}`, "regex", "cannot both"},
		{`{` + msgs + `,"tools":` + weatherTools + `,"tool_choice":"required","response_format":{"type":"json_object"}}`, "response_format", "cannot both"},
	} {
		resp, b := post(t, srv.URL+"/v1/chat/completions", c.body)
		wantError(t, resp, b, 400, c.msg)
		var e errResp
		_ = json.Unmarshal(b, &e)
		if e.Error.Param == nil || *e.Error.Param != c.param {
			t.Errorf("%s: param %v, want %s", c.body, e.Error.Param, c.param)
		}
	}
}

// A reply's parse does not depend on how the engine chunked it, through
// the front end's own layer too (parallel_tool_calls, a constrained
// tool_choice held to the end): streamed at random cuts, the deltas fold
// to what the non-streaming response holds.
func TestReplyParserChunking(t *testing.T) {
	t.Parallel()
	s := &Server{opts: Options{ToolCallParser: "qwen", ReasoningParser: "qwen3"}}
	for _, c := range []struct {
		name, reply string
		fields      agentFields
	}{
		{"auto", qwenReply, agentFields{}},
		{"serial", qwenReply, agentFields{ParallelToolCalls: new(bool)}},
		{"required", `<think>pick</think>[{"name":"get_time","parameters":{"tz":"UTC"}},{"name":"get_weather","parameters":{"city":"Oslo"}}]`, agentFields{ToolChoice: json.RawMessage(`"required"`)}},
		{"named", `{"tz":"UTC"}`, agentFields{ToolChoice: json.RawMessage(`{"type":"function","function":{"name":"get_time"}}`)}},
		{"unparsable", `not json`, agentFields{ToolChoice: json.RawMessage(`"required"`)}},
		{"required cut in the arguments", `[{"name":"get_time","parameters":{"tz":"UTC"}},{"name":"get_weather","parameters":{"city":"Os`, agentFields{ToolChoice: json.RawMessage(`"required"`)}},
		{"required cut in a name", `<think>pick</think>[{"name":"get_time","parameters":{"tz":"UTC"}},{"name":"get_w`, agentFields{ToolChoice: json.RawMessage(`"required"`)}},
		{"named cut", `{"tz":"UT`, agentFields{ToolChoice: json.RawMessage(`{"type":"function","function":{"name":"get_time"}}`)}},
	} {
		p := &plan{}
		ag, e := s.planAgent(&c.fields, json.RawMessage(weatherTools), json.RawMessage(`[]`), p)
		if e != nil {
			t.Fatalf("%s: %v", c.name, e)
		}
		whole, _, e := ag.parseWhole(c.reply, "stop")
		if e != nil {
			t.Fatal(e)
		}
		rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
		for trial := 0; trial < 200; trial++ {
			r, _ := ag.newReply()
			var ds []delta.Delta
			for i := 0; i < len(c.reply); {
				n := min(1+rng.IntN(12), len(c.reply)-i)
				ds = append(ds, r.push(c.reply[i:i+n])...)
				i += n
			}
			ds = append(ds, r.finish()...)
			got := delta.Collect(ds)
			content := ""
			if whole.Content != nil {
				content = *whole.Content
			}
			if got.Content != content || len(got.Calls) != len(whole.ToolCalls) {
				t.Fatalf("%s trial %d: streamed %+v, whole %+v", c.name, trial, got, whole)
			}
			for i, call := range got.Calls {
				if call.Name != whole.ToolCalls[i].Function.Name || call.Arguments != whole.ToolCalls[i].Function.Arguments {
					t.Fatalf("%s trial %d call %d: %+v vs %+v", c.name, trial, i, call, whole.ToolCalls[i])
				}
			}
		}
		if c.name == "serial" && len(whole.ToolCalls) != 1 || strings.HasPrefix(c.name, "required") && len(whole.ToolCalls) != 2 || c.name == "unparsable" && len(whole.ToolCalls) != 0 ||
			c.name == "named cut" && len(whole.ToolCalls) != 1 {
			t.Fatalf("%s: %+v", c.name, whole)
		}
	}
}

// With n > 1 every choice has its own parser: both stream their calls
// under their own index, and each non-streaming choice is parsed.
func TestChatToolCallsN(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, agentFake(t, qwenReply), Options{Model: "demo", ToolCallParser: "qwen", ReasoningParser: "qwen3"})
	body := `{"messages":[{"role":"user","content":"x"}],"tools":` + weatherTools + `,"n":2%s}`
	resp, b := post(t, srv.URL+"/v1/chat/completions", strings.Replace(body, "%s", "", 1))
	var r struct{ Choices []agentChoice }
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || len(r.Choices) != 2 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for i, c := range r.Choices {
		if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 2 {
			t.Fatalf("choice %d: %+v", i, c)
		}
	}
	resp, b = post(t, srv.URL+"/v1/chat/completions", strings.Replace(body, "%s", `,"stream":true`, 1))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	calls := map[int]map[int]string{} // choice -> call index -> name
	finish := map[int]string{}
	for _, ev := range events(t, b) {
		if ev == "[DONE]" {
			break
		}
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					ToolCalls []struct {
						Index    int `json:"index"`
						Function struct {
							Name string `json:"name"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		_ = json.Unmarshal([]byte(ev), &c)
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				if calls[ch.Index] == nil {
					calls[ch.Index] = map[int]string{}
				}
				if tc.Function.Name != "" {
					calls[ch.Index][tc.Index] = tc.Function.Name
				}
			}
			if ch.FinishReason != nil {
				finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	for i := 0; i < 2; i++ {
		if finish[i] != "tool_calls" || calls[i][0] != "get_weather" || calls[i][1] != "get_time" {
			t.Fatalf("choice %d: finish %q calls %v", i, finish[i], calls[i])
		}
	}
}

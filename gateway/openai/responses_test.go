package openai

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
)

const respTools = `[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},` +
	`{"type":"function","name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"]}}]`

type respItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Status    string `json:"status"`
	Role      string `json:"role"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Summary []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"summary"`
}

type respBody struct {
	ID                 string     `json:"id"`
	Object             string     `json:"object"`
	Status             string     `json:"status"`
	Model              string     `json:"model"`
	Output             []respItem `json:"output"`
	PreviousResponseID *string    `json:"previous_response_id"`
	Usage              struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func createResp(t *testing.T, url, body string) respBody {
	t.Helper()
	resp, b := post(t, url+"/v1/responses", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var r respBody
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return r
}

// A Qwen3 reply through /v1/responses: a reasoning item, then one
// function_call item per call; the next request continues it with
// previous_response_id and function_call_output items, and the prompt
// holds the whole conversation.
func TestResponsesTools(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, qwenReply)
	eng.reply = func(r tokenapi.Request) string {
		// The continuation (it holds the tool results) gets the answer.
		if strings.Contains(eng.tok.Decode(r.InputIDs, false), "sunny") {
			return "It is sunny at noon."
		}
		return qwenReply
	}
	srv := newTestServer(t, eng, Options{Model: "demo", ToolCallParser: "qwen", ReasoningParser: "qwen3"})
	r := createResp(t, srv.URL, `{"model":"demo","input":"Weather and time in Paris?","instructions":"Be brief.","tools":`+respTools+`}`)
	if r.Object != "response" || r.Status != "completed" || !strings.HasPrefix(r.ID, "resp_") || len(r.Output) != 3 {
		t.Fatalf("%+v", r)
	}
	rs, c1, c2 := r.Output[0], r.Output[1], r.Output[2]
	if rs.Type != "reasoning" || len(rs.Summary) != 1 || rs.Summary[0].Text != "The user wants weather and time." {
		t.Fatalf("reasoning item %+v", rs)
	}
	if c1.Type != "function_call" || c1.Name != "get_weather" || c1.CallID == "" || c1.Status != "completed" || c2.Name != "get_time" {
		t.Fatalf("calls %+v %+v", c1, c2)
	}
	sameJSONText(t, c1.Arguments, `{"city":"Paris"}`)
	if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
		t.Fatalf("usage %+v", r.Usage)
	}
	if p := eng.tok.Decode(eng.requests()[0].InputIDs, false); !strings.Contains(p, "Be brief.") || !strings.Contains(p, "Tools you may call:") {
		t.Fatalf("prompt %q", p)
	}

	next := fmt.Sprintf(`{"model":"demo","previous_response_id":%q,"tools":%s,"input":[`+
		`{"type":"function_call_output","call_id":%q,"output":"sunny"},{"type":"function_call_output","call_id":%q,"output":"12:00"}]}`,
		r.ID, respTools, c1.CallID, c2.CallID)
	r2 := createResp(t, srv.URL, next)
	if len(r2.Output) != 1 || r2.Output[0].Type != "message" || r2.Output[0].Role != "assistant" || r2.Output[0].Content[0].Type != "output_text" ||
		r2.Output[0].Content[0].Text != "It is sunny at noon." || r2.PreviousResponseID == nil || *r2.PreviousResponseID != r.ID {
		t.Fatalf("%+v", r2)
	}
	reqs := eng.requests()
	p := eng.tok.Decode(reqs[len(reqs)-1].InputIDs, false)
	for _, want := range []string{"Weather and time in Paris?", "call get_weather", "call get_time", "<|im_start|>tool\nsunny", "<|im_start|>tool\n12:00"} {
		if !strings.Contains(p, want) {
			t.Fatalf("continued prompt lacks %q:\n%s", want, p)
		}
	}
	if strings.Contains(p, "Be brief.") {
		t.Fatalf("instructions of the previous response carried over:\n%s", p)
	}
	// GET returns the stored response; an unknown id is a 404 / 400 in OpenAI's shape.
	resp, b := get(t, srv.URL+"/v1/responses/"+r2.ID)
	if resp.StatusCode != 200 || !strings.Contains(string(b), r2.ID) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b = get(t, srv.URL+"/v1/responses/resp_nope")
	wantError(t, resp, b, 404, "resp_nope")
	resp, b = post(t, srv.URL+"/v1/responses", `{"input":"x","previous_response_id":"resp_gone"}`)
	wantError(t, resp, b, 400, "resp_gone")
	// store false: not kept.
	r3 := createResp(t, srv.URL, `{"input":"x","store":false}`)
	resp, b = get(t, srv.URL+"/v1/responses/"+r3.ID)
	wantError(t, resp, b, 404, r3.ID)
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return resp, []byte(b.String())
}

type respEvent struct {
	name string
	data map[string]json.RawMessage
}

func respEvents(t *testing.T, body []byte) []respEvent {
	t.Helper()
	var out []respEvent
	name := ""
	for _, line := range strings.Split(string(body), "\n") {
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]json.RawMessage
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			var typ string
			_ = json.Unmarshal(d["type"], &typ)
			if typ != name {
				t.Fatalf("event %q carries type %q", name, typ)
			}
			var seq int
			if err := json.Unmarshal(d["sequence_number"], &seq); err != nil || seq != len(out) {
				t.Fatalf("event %d has sequence_number %s", len(out), d["sequence_number"])
			}
			out = append(out, respEvent{name, d})
		}
	}
	return out
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// Streamed, /v1/responses sends the event sequence SDKs fold: created,
// in_progress, per item added → deltas → done, completed with the whole
// response; folding the deltas gives the final response's output.
func TestResponsesStreaming(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, "<think>Hmm.</think>Paris is sunny.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>")
	srv := newTestServer(t, eng, Options{Model: "demo", ToolCallParser: "qwen", ReasoningParser: "qwen3"})
	resp, b := post(t, srv.URL+"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_text","text":"Weather?"}]}],"tools":`+respTools+`,"stream":true}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	evs := respEvents(t, b)
	var names []string
	reasoning, text, args := "", "", ""
	for _, e := range evs {
		names = append(names, e.name)
		switch e.name {
		case "response.reasoning_summary_text.delta":
			reasoning += str(e.data["delta"])
		case "response.output_text.delta":
			text += str(e.data["delta"])
		case "response.function_call_arguments.delta":
			args += str(e.data["delta"])
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	// Deltas may come in several events: compare with repeats folded.
	var folded []string
	for _, n := range names {
		if len(folded) > 0 && folded[len(folded)-1] == n && strings.HasSuffix(n, ".delta") {
			continue
		}
		folded = append(folded, n)
	}
	if strings.Join(folded, " ") != strings.Join(want, " ") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(folded, "\n"), strings.Join(want, "\n"))
	}
	var final respBody
	if err := json.Unmarshal(evs[len(evs)-1].data["response"], &final); err != nil {
		t.Fatal(err)
	}
	if final.Status != "completed" || len(final.Output) != 3 || final.Output[0].Summary[0].Text != reasoning || reasoning != "Hmm." ||
		final.Output[1].Content[0].Text != text || strings.TrimSpace(text) != "Paris is sunny." || final.Output[2].Arguments != args {
		t.Fatalf("final %+v; folded reasoning %q text %q args %q", final, reasoning, text, args)
	}
	sameJSONText(t, args, `{"city":"Paris"}`)
	// The streamed response is stored like any other.
	if r, b := get(t, srv.URL+"/v1/responses/"+final.ID); r.StatusCode != 200 {
		t.Fatalf("%d %s", r.StatusCode, b)
	}
}

// tool_choice and text.format map onto the chat constraints.
func TestResponsesConstrained(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, agentFake(t, "free"), Options{Model: "demo"})
	r := createResp(t, srv.URL, `{"input":"x","tools":`+respTools+`,"tool_choice":{"type":"function","name":"get_time"}}`)
	if len(r.Output) != 1 || r.Output[0].Type != "function_call" || r.Output[0].Name != "get_time" {
		t.Fatalf("%+v", r)
	}
	r = createResp(t, srv.URL, `{"input":"x","text":{"format":{"type":"json_schema","name":"n","strict":true,"schema":{"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]}}}}`)
	if len(r.Output) != 1 || r.Output[0].Content[0].Text != `{"a":false}` {
		t.Fatalf("%+v", r)
	}
	// A reference to an earlier reasoning item is skipped, as reasoning is.
	r = createResp(t, srv.URL, `{"input":[{"type":"item_reference","id":"rs_1"},{"type":"message","role":"user","content":"x"}]}`)
	if r.Status != "completed" {
		t.Fatalf("%+v", r)
	}
	for _, c := range []struct{ body, msg string }{
		{`{}`, "input"},
		{`{"input":[{"type":"web_search_call"}]}`, "web_search_call"},
		{`{"input":[{"type":"item_reference","id":"msg_1"}]}`, "msg_1"},
		{`{"input":"x","tools":[{"type":"web_search"}]}`, "web_search"},
		{`{"input":"x","model":"other"}`, "other"},
	} {
		resp, b := post(t, srv.URL+"/v1/responses", c.body)
		status := 400
		if c.msg == "other" {
			status = 404
		}
		wantError(t, resp, b, status, c.msg)
	}
}

// The store drops the least recently used response past its count or
// byte bound, and never holds more than either.
func TestResponseStoreBounds(t *testing.T) {
	t.Parallel()
	s := newResponseStore(3, 1000)
	mk := func(id string, n int) *storedResponse {
		return &storedResponse{id: id, body: []byte(strings.Repeat("x", n))}
	}
	for _, id := range []string{"a", "b", "c"} {
		s.put(mk(id, 10))
	}
	s.get("a") // a is now the most recent
	s.put(mk("d", 10))
	if _, ok := s.get("b"); ok {
		t.Fatal("b (least recently used) survived")
	}
	for _, id := range []string{"a", "c", "d"} {
		if _, ok := s.get(id); !ok {
			t.Fatalf("%s dropped", id)
		}
	}
	s.put(mk("big", 900)) // bytes: evicts the oldest until it fits
	n, bytes := s.stats()
	if bytes > 1000 || n > 3 {
		t.Fatalf("%d responses, %d bytes", n, bytes)
	}
	if _, ok := s.get("big"); !ok {
		t.Fatal("big not kept")
	}
	s.put(mk("huge", 2000))
	if _, ok := s.get("huge"); ok {
		t.Fatal("a response over the byte bound was kept")
	}
	s.put(mk("big", 5)) // replacing an id re-counts its bytes
	if _, b := s.stats(); b > 1000 {
		t.Fatal(b)
	}
	if !s.delete("big") || s.delete("big") {
		t.Fatal("delete")
	}
}

func TestModelByID(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, agentFake(t, "x"), Options{Model: "Qwen/Qwen3-8B"})
	resp, b := get(t, srv.URL+"/v1/models/Qwen/Qwen3-8B")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"Qwen/Qwen3-8B"`) || !strings.Contains(string(b), `"object":"model"`) {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b = get(t, srv.URL+"/v1/models/gpt-4")
	wantError(t, resp, b, 404, "gpt-4")
	var e errResp
	if json.Unmarshal(b, &e); e.Error.Code != "model_not_found" {
		t.Fatalf("%s", b)
	}
}

// stats reports the count and bytes the store holds.
func (s *responseStore) stats() (int, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len(), s.bytes
}

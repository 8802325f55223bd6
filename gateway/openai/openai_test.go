package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const reply = "Hello! How are you today? STOP here."

func post(t *testing.T, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// events splits an SSE body into its data payloads.
func events(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	if len(out) == 0 || out[len(out)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", body)
	}
	return out
}

type errResp struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func wantError(t *testing.T, resp *http.Response, body []byte, status int, msgPart string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	var e errResp
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Fatalf("not an OpenAI error object: %s", body)
	}
	if !strings.Contains(e.Error.Message, msgPart) {
		t.Fatalf("message %q does not mention %q", e.Error.Message, msgPart)
	}
}

type chatResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Logprobs *struct {
			Content []struct {
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
				Bytes   []int   `json:"bytes"`
			} `json:"content"`
		} `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
		MatchedStop  any    `json:"matched_stop"`
	} `json:"choices"`
	Usage Usage `json:"usage"`
}

// Non-streaming chat renders the template, counts usage and reports EOS as stop.
func TestChatNonStreaming(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello! How are you today?")
	srv := newTestServer(t, eng, Options{Model: "demo"})
	resp, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]}],"temperature":0.5,"top_k":5,"seed":7,"logprobs":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var cr chatResp
	if err := json.Unmarshal(body, &cr); err != nil {
		t.Fatal(err)
	}
	c := cr.Choices[0]
	if cr.Object != "chat.completion" || cr.Model != "demo" || c.Message.Role != "assistant" || c.Message.Content != "Hello! How are you today?" || c.FinishReason != "stop" {
		t.Fatalf("%s", body)
	}
	reqs := eng.requests()
	prompt := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n"
	want, _ := tk.Encode(prompt, false)
	if len(reqs) != 1 || !slicesEqual(reqs[0].InputIDs, want) {
		t.Fatalf("engine got %v, want %v", reqs[0].InputIDs, want)
	}
	sp := reqs[0].Sampling
	if sp.Temperature == nil || *sp.Temperature != 0.5 || sp.TopK == nil || *sp.TopK != 5 || sp.Seed == nil || *sp.Seed != 7 || !reqs[0].ReturnLogprob {
		t.Fatalf("sampling %+v", sp)
	}
	toks, _ := tk.Encode("Hello! How are you today?", false)
	if cr.Usage.PromptTokens != len(want) || cr.Usage.CompletionTokens != len(toks)+1 || cr.Usage.TotalTokens != len(want)+len(toks)+1 {
		t.Fatalf("usage %+v", cr.Usage)
	}
	if c.MatchedStop != nil {
		t.Fatalf("EOS reported as matched_stop %v", c.MatchedStop)
	}
	if c.Logprobs == nil || len(c.Logprobs.Content) != len(toks)+1 || c.Logprobs.Content[0].Logprob != -0.5 || len(c.Logprobs.Content[0].Bytes) == 0 {
		t.Fatalf("logprobs %s", body)
	}
}

// Streaming chat: role first, content deltas, finish chunk, usage chunk, [DONE].
func TestChatStreaming(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello! 你好 😀 done.")
	srv := newTestServer(t, eng, Options{})
	resp, body := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Fatalf("content type %q", ct)
	}
	evs := events(t, body)
	var text strings.Builder
	var finish string
	var usageSeen bool
	for i, e := range evs[:len(evs)-1] {
		var ch chatChunk
		if err := json.Unmarshal([]byte(e), &ch); err != nil {
			t.Fatalf("chunk %q: %v", e, err)
		}
		if ch.Object != "chat.completion.chunk" {
			t.Fatalf("object %q", ch.Object)
		}
		if ch.Usage != nil {
			usageSeen = true
			if len(ch.Choices) != 0 || ch.Usage.CompletionTokens == 0 || i != len(evs)-2 {
				t.Fatalf("usage chunk %s", e)
			}
			continue
		}
		c := ch.Choices[0]
		if i == 0 && c.Delta.Role != "assistant" {
			t.Fatalf("first chunk %s", e)
		}
		if c.Delta.Content != nil {
			if strings.ContainsRune(*c.Delta.Content, '\ufffd') {
				t.Fatalf("broken UTF-8 in %s", e)
			}
			text.WriteString(*c.Delta.Content)
		}
		if c.FinishReason != nil {
			finish = *c.FinishReason
		}
	}
	if text.String() != "Hello! 你好 😀 done." || finish != "stop" || !usageSeen {
		t.Fatalf("text %q finish %q usage %v", text.String(), finish, usageSeen)
	}
}

// n=2 fans out two engine requests with distinct rids and seeds; choices interleave by index.
func TestChatN2(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hi there.")
	srv := newTestServer(t, eng, Options{})
	for _, stream := range []bool{false, true} {
		_, body := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"n":2,"seed":100,"stream":`+map[bool]string{false: "false", true: "true"}[stream]+`}`)
		texts := map[int]string{}
		finishes := map[int]string{}
		if stream {
			for _, e := range events(t, body)[:len(events(t, body))-1] {
				var ch chatChunk
				_ = json.Unmarshal([]byte(e), &ch)
				c := ch.Choices[0]
				if c.Delta.Content != nil {
					texts[c.Index] += *c.Delta.Content
				}
				if c.FinishReason != nil {
					finishes[c.Index] = *c.FinishReason
				}
			}
		} else {
			var cr chatResp
			_ = json.Unmarshal(body, &cr)
			for _, c := range cr.Choices {
				texts[c.Index], finishes[c.Index] = c.Message.Content, c.FinishReason
			}
		}
		if len(texts) != 2 || texts[0] != "Hi there." || texts[1] != "Hi there." || finishes[0] != "stop" || finishes[1] != "stop" {
			t.Fatalf("stream=%v texts %v finishes %v", stream, texts, finishes)
		}
	}
	reqs := eng.requests()
	if len(reqs) != 4 || reqs[0].RID == reqs[1].RID {
		t.Fatalf("requests %d", len(reqs))
	}
	seeds := map[int64]bool{}
	for _, r := range reqs[:2] {
		seeds[*r.Sampling.Seed] = true
	}
	if !seeds[100] || !seeds[101] {
		t.Fatalf("seeds %v", seeds)
	}
}

// A multi-token stop string is cut by the jail, reported, and aborts the engine request.
func TestStopStringAborts(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, reply)
	eng.perEvent = 1
	srv := newTestServer(t, eng, Options{})
	for _, stream := range []string{"false", "true"} {
		_, body := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"stop":["STOP"],"stream":`+stream+`}`)
		if !strings.Contains(string(body), `"matched_stop":"STOP"`) {
			t.Fatalf("stream=%s: %s", stream, body)
		}
		content := ""
		if stream == "false" {
			var cr chatResp
			_ = json.Unmarshal(body, &cr)
			content = cr.Choices[0].Message.Content
			if cr.Choices[0].FinishReason != "stop" {
				t.Fatalf("%s", body)
			}
		} else {
			evs := events(t, body)
			for _, e := range evs[:len(evs)-1] {
				var ch chatChunk
				_ = json.Unmarshal([]byte(e), &ch)
				if c := ch.Choices[0]; c.Delta.Content != nil {
					content += *c.Delta.Content
				}
			}
		}
		if content != "Hello! How are you today? " {
			t.Fatalf("stream=%s: content %q", stream, content)
		}
		select {
		case <-eng.aborted:
		case <-time.After(10 * time.Second):
			t.Fatal("engine request was not aborted after the local stop")
		}
	}
}

// A stop string that is one token goes to the engine as a stop token id.
func TestSingleTokenStop(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello! How are you today?")
	srv := newTestServer(t, eng, Options{})
	_, body := post(t, srv.URL+"/v1/completions", `{"prompt":"Hi","stop":"!","stop_token_ids":[5]}`)
	excl, _ := tk.Encode("!", false)
	r := eng.requests()[0]
	if !slicesEqual(r.Sampling.StopTokenIDs, []int32{5, excl[0]}) {
		t.Fatalf("stop ids %v", r.Sampling.StopTokenIDs)
	}
	var cr completionResponse
	_ = json.Unmarshal(body, &cr)
	if cr.Choices[0].Text != "Hello" || *cr.Choices[0].FinishReason != "stop" || cr.Choices[0].MatchedStop != "!" {
		t.Fatalf("%s", body)
	}
	// A stop token id the client asked for is reported as that id.
	toks, _ := tk.Encode("Hello! How are you today?", false)
	_, body = post(t, srv.URL+"/v1/completions", fmt.Sprintf(`{"prompt":"Hi","stop_token_ids":[%d]}`, toks[2]))
	cr = completionResponse{}
	_ = json.Unmarshal(body, &cr)
	if cr.Choices[0].Text != tk.Decode(toks[:2], false) || cr.Choices[0].MatchedStop != float64(toks[2]) {
		t.Fatalf("%s", body)
	}
}

// max_tokens ends with finish_reason length; BOS-less demo prompt counts.
func TestCompletionsLengthEchoBatch(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello! How are you today?")
	srv := newTestServer(t, eng, Options{})
	_, body := post(t, srv.URL+"/v1/completions", `{"prompt":["Once upon","a time"],"n":2,"max_tokens":2,"echo":true}`)
	var cr completionResponse
	if err := json.Unmarshal(body, &cr); err != nil {
		t.Fatal(err)
	}
	two, _ := tk.Encode("Hello! How are you today?", false)
	wantText := tk.Decode(two[:2], false)
	if len(cr.Choices) != 4 {
		t.Fatalf("%s", body)
	}
	for i, c := range cr.Choices {
		prefix := []string{"Once upon", "a time"}[i/2]
		if c.Index != i || c.Text != prefix+wantText || *c.FinishReason != "length" {
			t.Fatalf("choice %d: %+v", i, c)
		}
	}
	p1, _ := tk.Encode("Once upon", true)
	p2, _ := tk.Encode("a time", true)
	if cr.Usage.PromptTokens != len(p1)+len(p2) || cr.Usage.CompletionTokens != 8 {
		t.Fatalf("usage %+v", cr.Usage)
	}
	// Token-id prompts and streaming with logprobs.
	_, body = post(t, srv.URL+"/v1/completions", `{"prompt":[10,20,30],"max_tokens":3,"stream":true,"logprobs":0}`)
	var got strings.Builder
	lps := 0
	evs := events(t, body)
	for _, e := range evs[:len(evs)-1] {
		var ch completionResponse
		if err := json.Unmarshal([]byte(e), &ch); err != nil {
			t.Fatal(err)
		}
		got.WriteString(ch.Choices[0].Text)
		if ch.Choices[0].Logprobs != nil {
			lps += len(ch.Choices[0].Logprobs.TokenLogprobs)
		}
	}
	if got.String() != tk.Decode(two[:3], false) || lps != 3 {
		t.Fatalf("streamed %q with %d logprobs", got.String(), lps)
	}
}

// Bad requests get OpenAI error objects with useful messages.
func TestErrors(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "ok")
	srv := newTestServer(t, eng, Options{Model: "demo"})
	chat, cmpl := srv.URL+"/v1/chat/completions", srv.URL+"/v1/completions"
	for _, c := range []struct {
		url, body string
		status    int
		msg       string
	}{
		{chat, `{`, 400, "invalid JSON"},
		{chat, `{"messages":[]}`, 400, "non-empty"},
		{chat, `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "unknown role"},
		{chat, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:"}}]}]}`, 400, "this model takes no images"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs must be between 0 and 20"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, 400, "top_logprobs needs logprobs=true"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"temperature":3}`, 400, "temperature"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"n":0}`, 400, "n must be"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "max_tokens"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"stop":7}`, 400, "stop"},
		{chat, `{"model":"other","messages":[{"role":"user","content":"x"}]}`, 404, "other"},
		{cmpl, `{"prompt":"x","logprobs":6}`, 400, "logprobs must be between 0 and 5"},
		{cmpl, `{"prompt":[]}`, 400, "prompt"},
		{cmpl, `{"prompt":[99999]}`, 400, "out of range"},
		{cmpl, `{}`, 400, "prompt is required"},
	} {
		resp, body := post(t, c.url, c.body)
		wantError(t, resp, body, c.status, c.msg)
	}
}

// Bearer auth at the front door (the key comes from gateway.api_key_env,
// gateway/auth_test.go); engine-not-ready and start failures map to 503.
func TestAuthAndAvailability(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "ok")
	srv := serveEngine(t, eng, tk, Options{}, "sekret")
	body := `{"prompt":"x"}`
	resp, b := post(t, srv.URL+"/v1/completions", body)
	wantError(t, resp, b, 401, "API key")
	resp, b = post(t, srv.URL+"/v1/completions", body, "Authorization", "Bearer wrong")
	wantError(t, resp, b, 401, "API key")
	resp, b = post(t, srv.URL+"/v1/completions", body, "Authorization", "Bearer sekret")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}

	down := newFake(tk, "ok")
	down.notReady = true
	resp, b = post(t, newTestServer(t, down, Options{}).URL+"/v1/completions", body)
	wantError(t, resp, b, 503, "no prefill/decode engine")

	broken := newFake(tk, "ok")
	broken.startErr = errors.New("no decode worker")
	srv2 := newTestServer(t, broken, Options{})
	resp, b = post(t, srv2.URL+"/v1/completions", body)
	wantError(t, resp, b, 503, "no decode worker")
	resp, b = post(t, srv2.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true}`)
	wantError(t, resp, b, 503, "no decode worker")

	// Errors that carry their own status (gateway.RequestError) keep it.
	typed := newFake(tk, "ok")
	typed.startErr = &statusErr{status: 429, code: "too_many", msg: "queue full"}
	resp, b = post(t, newTestServer(t, typed, Options{}).URL+"/v1/completions", body)
	wantError(t, resp, b, 429, "queue full")
	if resp.Header.Get("X-SMG-Error-Code") != "too_many" {
		t.Fatalf("code header %q", resp.Header.Get("X-SMG-Error-Code"))
	}
}

type statusErr struct {
	status    int
	code, msg string
}

func (e *statusErr) Error() string      { return e.msg }
func (e *statusErr) HTTPStatus() int    { return e.status }
func (e *statusErr) ErrorCode() string  { return e.code }
func (e *statusErr) ErrorParam() string { return "" }

// A failure mid-stream becomes an error event followed by [DONE].
func TestMidStreamError(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello! How are you today?")
	eng.failAt = 4
	srv := newTestServer(t, eng, Options{})
	resp, body := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d", resp.StatusCode)
	}
	evs := events(t, body)
	last := evs[len(evs)-2]
	var e errResp
	if err := json.Unmarshal([]byte(last), &e); err != nil || !strings.Contains(e.Error.Message, "engine died") {
		t.Fatalf("last event %s", last)
	}
	resp, body = post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
	wantError(t, resp, body, 502, "engine died")
}

// A client that disconnects mid-stream aborts the engine request.
func TestDisconnectAborts(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "la ")
	eng.endless = true
	srv := newTestServer(t, eng, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // first event arrived: generation is running
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-eng.aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("engine request not aborted after client disconnect")
	}
}

// Chat template kwargs and tools reach the template.
func TestTemplateKwargsAndTools(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "ok")
	srv := newTestServer(t, eng, Options{})
	_, body := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}],
	"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"chat_template_kwargs":{"enable_thinking":false}}`)
	if !strings.Contains(string(body), `"finish_reason":"stop"`) {
		t.Fatalf("%s", body)
	}
	got := tk.Decode(eng.requests()[0].InputIDs, false)
	want := "<|im_start|>system\nTools you may call:\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}<|im_end|>\n" +
		"<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n\ncall f {\"a\": 1}<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n(no thinking)\n"
	if got != want {
		t.Fatalf("prompt\n got  %q\n want %q", got, want)
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// /v1/tokenize and /v1/detokenize use the gateway's tokenizer without an engine.
func TestTokenizeDetokenize(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "ok")
	eng.notReady = true
	srv := newTestServer(t, eng, Options{})
	_, body := post(t, srv.URL+"/v1/tokenize", `{"prompt":"Hello world"}`)
	var tr struct {
		Tokens []int32 `json:"tokens"`
		Count  int     `json:"count"`
	}
	_ = json.Unmarshal(body, &tr)
	want, _ := tk.Encode("Hello world", true)
	if !slicesEqual(tr.Tokens, want) || tr.Count != len(want) {
		t.Fatalf("%s", body)
	}
	_, body = post(t, srv.URL+"/v1/tokenize", `{"messages":[{"role":"user","content":"x"}]}`)
	_ = json.Unmarshal(body, &tr)
	if tk.Decode(tr.Tokens, false) != "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("%s", body)
	}
	_, body = post(t, srv.URL+"/v1/detokenize", fmt.Sprintf(`{"tokens":%s}`, mustJSON(want)))
	if string(body) != "{\"text\":\"Hello world\"}\n" {
		t.Fatalf("%s", body)
	}
	resp, body := post(t, srv.URL+"/v1/detokenize", `{"tokens":[-1]}`)
	wantError(t, resp, body, 400, "out of range")
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Completions without max_tokens stop at OpenAI's default of 16 tokens.
func TestCompletionsDefaultMaxTokens(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, strings.Repeat("one two three four five ", 10))
	srv := newTestServer(t, eng, Options{})
	_, body := post(t, srv.URL+"/v1/completions", `{"prompt":"Count"}`)
	var cr completionResponse
	_ = json.Unmarshal(body, &cr)
	if *cr.Choices[0].FinishReason != "length" || cr.Usage.CompletionTokens != 16 || *eng.requests()[0].Sampling.MaxNewTokens != 16 {
		t.Fatalf("%s", body)
	}
}

// Many concurrent requests share the tokenizer, template and word cache safely.
func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello! How are you today?")
	srv := newTestServer(t, eng, Options{})
	errs := make(chan error, 24)
	for i := 0; i < 24; i++ {
		go func() {
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"request %d with some words"}],"stream":%v,"n":2}`, i, i%2 == 0)
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || strings.Count(string(b), "Hello") == 0 {
				errs <- fmt.Errorf("request %d: %d %s", i, resp.StatusCode, b)
				return
			}
			errs <- nil
		}()
	}
	for i := 0; i < 24; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

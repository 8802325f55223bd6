package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// cachedUsage is the part of a usage object these tests read.
type cachedUsage struct {
	PromptTokens        int             `json:"prompt_tokens"`
	PromptTokensDetails json.RawMessage `json:"prompt_tokens_details"`
}

func cachedOf(t *testing.T, raw json.RawMessage) int {
	t.Helper()
	var d struct {
		CachedTokens *int `json:"cached_tokens"`
	}
	if err := json.Unmarshal(raw, &d); err != nil || d.CachedTokens == nil {
		t.Fatalf("prompt_tokens_details %s: no cached_tokens (%v)", raw, err)
	}
	return *d.CachedTokens
}

// usage.prompt_tokens_details.cached_tokens carries the engine's cached
// prompt tokens in chat and completions, streamed (the usage chunk) and
// not, and is 0 — present — when nothing was cached; n samples of one
// prompt count it once, as they count the prompt.
func TestUsageCachedTokens(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello there.")
	eng.cached = func(r tokenapi.Request) int {
		if strings.HasSuffix(r.RID, "-1") {
			return len(r.InputIDs) / 4 // a second sample (or prompt) found less
		}
		return len(r.InputIDs) / 2
	}
	srv := newTestServer(t, eng, Options{Model: "demo"})
	zero := newTestServer(t, newFake(tk, "Hello there."), Options{Model: "demo"})

	usageOf := func(t *testing.T, body []byte) cachedUsage {
		t.Helper()
		var r struct {
			Usage *cachedUsage `json:"usage"`
		}
		if err := json.Unmarshal(body, &r); err != nil || r.Usage == nil {
			t.Fatalf("no usage in %s (%v)", body, err)
		}
		return *r.Usage
	}
	streamUsage := func(t *testing.T, body []byte) cachedUsage {
		t.Helper()
		for _, e := range events(t, body) {
			if strings.Contains(e, `"usage"`) && !strings.Contains(e, `"usage":null`) {
				return usageOf(t, []byte(e))
			}
		}
		t.Fatalf("no usage chunk in %s", body)
		return cachedUsage{}
	}
	for _, c := range []struct {
		name, path, body string
		stream           bool
		want             func(prompt int) int // from the usage's prompt tokens
	}{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`, false, func(p int) int { return p / 2 }},
		{"chat stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}`, true, func(p int) int { return p / 2 }},
		{"chat n=2: the least of the samples", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"n":2}`, false, func(p int) int { return p / 4 }},
		{"completions", "/v1/completions", `{"prompt":"Hello there friend"}`, false, func(p int) int { return p / 2 }},
		{"completions stream", "/v1/completions", `{"prompt":"Hello there friend","stream":true,"stream_options":{"include_usage":true}}`, true, func(p int) int { return p / 2 }},
		{"completions two prompts: summed", "/v1/completions", `{"prompt":["Hello there friend","Hello there friend"]}`, false, func(p int) int { return p / 2 / 2 * 2 }},
	} {
		for _, s := range []struct {
			url  string
			want func(int) int
		}{{srv.URL, c.want}, {zero.URL, func(int) int { return 0 }}} {
			resp, body := post(t, s.url+c.path, c.body)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
			}
			var u cachedUsage
			if c.stream {
				u = streamUsage(t, body)
			} else {
				u = usageOf(t, body)
			}
			if got, want := cachedOf(t, u.PromptTokensDetails), s.want(u.PromptTokens); got != want || got > u.PromptTokens || want == 0 && s.url == srv.URL {
				t.Errorf("%s: cached_tokens %d of %d prompt tokens, want %d", c.name, got, u.PromptTokens, want)
			}
		}
	}
}

// Responses reports the same count as usage.input_tokens_details.cached_tokens.
func TestResponsesCachedTokens(t *testing.T) {
	t.Parallel()
	eng := newFake(demoTokenizer(t), "Hello there.")
	eng.cached = func(tokenapi.Request) int { return 4 }
	srv := newTestServer(t, eng, Options{Model: "demo"})
	for _, stream := range []bool{false, true} {
		body := `{"input":"Hi","store":false}`
		if stream {
			body = `{"input":"Hi","store":false,"stream":true}`
		}
		resp, b := post(t, srv.URL+"/v1/responses", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if !strings.Contains(string(b), `"input_tokens_details":{"cached_tokens":4}`) {
			t.Errorf("stream %v: no cached_tokens 4 in %s", stream, b)
		}
	}
}

// SMG's X-SMG-Routing-Key header reaches the engine request on every
// OpenAI route (manual and consistent_hashing route by it).
func TestRoutingKeyHeader(t *testing.T) {
	t.Parallel()
	eng := newFake(demoTokenizer(t), "ok")
	srv := newTestServer(t, eng, Options{Model: "demo"})
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"n":2}`},
		{"/v1/completions", `{"prompt":["a","b"]}`},
		{"/v1/responses", `{"input":"Hi","store":false}`},
	} {
		if resp, b := post(t, srv.URL+c.path, c.body, tokenapi.RoutingKeyHeader, "session-9"); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, b)
		}
	}
	if _, b := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`); len(b) == 0 {
		t.Fatal("no answer")
	}
	reqs := eng.requests()
	if len(reqs) != 6 {
		t.Fatalf("%d engine requests", len(reqs))
	}
	for i, r := range reqs[:5] {
		if r.RoutingKey != "session-9" {
			t.Errorf("request %d (%s): routing key %q", i, r.RID, r.RoutingKey)
		}
	}
	if reqs[5].RoutingKey != "" {
		t.Errorf("no header, routing key %q", reqs[5].RoutingKey)
	}
}

// Reasoning the reasoning parser split off is counted: chat usage has
// completion_tokens_details.reasoning_tokens and Responses usage
// output_tokens_details.reasoning_tokens, streamed and not, the tokens
// of the think block's text (0 — present — when the reply has none), at
// most the completion's tokens.
func TestUsageReasoningTokens(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	const thought = "The capital of France is Paris, as everyone knows."
	ids, err := tk.Encode(thought, false)
	if err != nil {
		t.Fatal(err)
	}
	want := len(ids)
	think := newTestServer(t, newFake(tk, "<think>"+thought+"</think>Paris."), Options{Model: "demo", ReasoningParser: "qwen3"})
	plain := newTestServer(t, newFake(tk, "Paris."), Options{Model: "demo", ReasoningParser: "qwen3"})
	type details struct {
		Completion int `json:"completion_tokens"`
		Chat       *struct {
			Reasoning *int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
		Output int `json:"output_tokens"`
		Resp   *struct {
			Reasoning *int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	}
	find := func(t *testing.T, b []byte, stream bool) details {
		t.Helper()
		docs := []string{string(b)}
		if stream {
			docs = nil
			for _, l := range strings.Split(string(b), "\n") {
				if d, ok := strings.CutPrefix(l, "data: "); ok {
					docs = append(docs, d)
				}
			}
		}
		for _, d := range docs {
			var v struct {
				Usage    *details `json:"usage"`
				Response *struct {
					Usage *details `json:"usage"`
				} `json:"response"`
			}
			if json.Unmarshal([]byte(d), &v) != nil {
				continue
			}
			if v.Usage != nil {
				return *v.Usage
			}
			if v.Response != nil && v.Response.Usage != nil {
				return *v.Response.Usage
			}
		}
		t.Fatalf("no usage in %s", b)
		return details{}
	}
	for _, stream := range []bool{false, true} {
		for _, tc := range []struct {
			url  string
			want int
		}{{think.URL, want}, {plain.URL, 0}} {
			chat := `{"messages":[{"role":"user","content":"x"}],"stream":` + map[bool]string{true: `true,"stream_options":{"include_usage":true}`, false: "false"}[stream] + `}`
			resp, b := post(t, tc.url+"/v1/chat/completions", chat)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			d := find(t, b, stream)
			if d.Chat == nil || d.Chat.Reasoning == nil || *d.Chat.Reasoning != tc.want || *d.Chat.Reasoning > d.Completion {
				t.Errorf("chat stream=%v: completion_tokens_details %+v of %d tokens, want reasoning_tokens %d\n%s", stream, d.Chat, d.Completion, tc.want, b)
			}
			resp, b = post(t, tc.url+"/v1/responses", `{"input":"x","store":false,"stream":`+map[bool]string{true: "true", false: "false"}[stream]+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			d = find(t, b, stream)
			if d.Resp == nil || d.Resp.Reasoning == nil || *d.Resp.Reasoning != tc.want {
				t.Errorf("responses stream=%v: output_tokens_details %+v, want reasoning_tokens %d", stream, d.Resp, tc.want)
			}
		}
	}
}

package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// echo with logprobs: the prompt's logprobs (from the engine's first
// event) come first, the first one null, then the sampled tokens'; the
// engine is asked for prompt logprobs from position 0.
func TestCompletionsEchoLogprobs(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello! How are you today?")
	srv := newTestServer(t, eng, Options{})
	prompt, _ := tk.Encode("Once upon", true)
	check := func(lps []*float64, toks []string) {
		t.Helper()
		if len(lps) != len(prompt)+2 || len(toks) != len(lps) {
			t.Fatalf("%d logprobs for %d prompt tokens + 2", len(lps), len(prompt))
		}
		for i, v := range lps {
			switch {
			case i == 0 && v != nil:
				t.Errorf("position 0: %v, want null", *v)
			case i > 0 && i < len(prompt) && (v == nil || *v != -0.25):
				t.Errorf("prompt position %d: %v", i, v)
			case i >= len(prompt) && (v == nil || *v != -0.5):
				t.Errorf("output %d: %v", i-len(prompt), v)
			}
		}
		for i, id := range prompt {
			if want, _ := (&Server{tok: tk}).tokenText(id); toks[i] != want {
				t.Errorf("token %d = %q, want %q", i, toks[i], want)
			}
		}
	}
	_, body := post(t, srv.URL+"/v1/completions", `{"prompt":"Once upon","max_tokens":2,"echo":true,"logprobs":1}`)
	var cr completionResponse
	if err := json.Unmarshal(body, &cr); err != nil || len(cr.Choices) != 1 || cr.Choices[0].Logprobs == nil {
		t.Fatalf("%s: %v", body, err)
	}
	check(cr.Choices[0].Logprobs.TokenLogprobs, cr.Choices[0].Logprobs.Tokens)
	if r := eng.requests(); r[len(r)-1].LogprobStartLen != 0 || !r[len(r)-1].ReturnLogprob {
		t.Fatalf("request %+v", r[len(r)-1])
	}

	_, body = post(t, srv.URL+"/v1/completions", `{"prompt":"Once upon","max_tokens":2,"echo":true,"logprobs":0,"stream":true}`)
	var lps []*float64
	var toks []string
	evs := events(t, body)
	for _, e := range evs[:len(evs)-1] {
		var ch completionResponse
		if err := json.Unmarshal([]byte(e), &ch); err != nil {
			t.Fatal(err)
		}
		if l := ch.Choices[0].Logprobs; l != nil {
			lps = append(lps, l.TokenLogprobs...)
			toks = append(toks, l.Tokens...)
		}
	}
	check(lps, toks)

	// Without echo no prompt logprobs are asked for.
	post(t, srv.URL+"/v1/completions", `{"prompt":"Once upon","max_tokens":2,"logprobs":1}`)
	if r := eng.requests(); r[len(r)-1].LogprobStartLen != -1 {
		t.Fatalf("request %+v", r[len(r)-1])
	}
}

// top_logprobs (chat 0-20) and logprobs N (completions 0-5) return the
// engine's top alternatives per token, whole and streamed (they used to
// be refused past 1); the engine is asked for exactly that many.
func TestTopLogprobs(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "Hello! How are you today?")
	srv := newTestServer(t, eng, Options{})
	type alt struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	type lp struct {
		Token       string  `json:"token"`
		Logprob     float64 `json:"logprob"`
		TopLogprobs []alt   `json:"top_logprobs"`
	}
	checkChat := func(what string, lps []lp, n int) {
		t.Helper()
		if len(lps) == 0 {
			t.Fatalf("%s: no logprobs", what)
		}
		for i, l := range lps {
			if len(l.TopLogprobs) != n || (n > 0 && (l.TopLogprobs[0].Token != l.Token || l.TopLogprobs[0].Logprob != l.Logprob)) {
				t.Fatalf("%s: token %d %+v", what, i, l)
			}
			for j := 1; j < n; j++ {
				if l.TopLogprobs[j].Logprob != -0.5-float64(j) || l.TopLogprobs[j].Bytes == nil {
					t.Fatalf("%s: token %d alternative %d %+v", what, i, j, l.TopLogprobs[j])
				}
			}
		}
	}
	for _, n := range []int{0, 1, 3, 20} {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":%d`, n)
		resp, b := post(t, srv.URL+"/v1/chat/completions", body+`}`)
		var cr struct {
			Choices []struct {
				Logprobs struct {
					Content []lp `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &cr) != nil {
			t.Fatalf("top %d: %d %s", n, resp.StatusCode, b)
		}
		checkChat(fmt.Sprintf("chat top %d", n), cr.Choices[0].Logprobs.Content, n)
		if r := eng.requests(); r[len(r)-1].TopLogprobsNum != n || !r[len(r)-1].ReturnLogprob {
			t.Fatalf("top %d: engine asked %+v", n, r[len(r)-1])
		}
		resp, b = post(t, srv.URL+"/v1/chat/completions", body+`,"stream":true}`)
		var streamed []lp
		for _, ev := range events(t, b) {
			var c struct {
				Choices []struct {
					Logprobs *struct {
						Content []lp `json:"content"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			if json.Unmarshal([]byte(ev), &c) == nil && len(c.Choices) > 0 && c.Choices[0].Logprobs != nil {
				streamed = append(streamed, c.Choices[0].Logprobs.Content...)
			}
		}
		if resp.StatusCode != 200 || len(streamed) != len(cr.Choices[0].Logprobs.Content) {
			t.Fatalf("stream top %d: %d logprobs, whole %d", n, len(streamed), len(cr.Choices[0].Logprobs.Content))
		}
		checkChat(fmt.Sprintf("chat stream top %d", n), streamed, n)
	}

	resp, b := post(t, srv.URL+"/v1/completions", `{"prompt":"Once upon","max_tokens":4,"logprobs":3}`)
	var cr completionResponse
	if resp.StatusCode != 200 || json.Unmarshal(b, &cr) != nil {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	l := cr.Choices[0].Logprobs
	for i, m := range l.TopLogprobs {
		if len(m) != 3 || m[l.Tokens[i]] != -0.5 {
			t.Fatalf("completions token %d %q: top %v", i, l.Tokens[i], m)
		}
	}
	if r := eng.requests(); r[len(r)-1].TopLogprobsNum != 3 {
		t.Fatalf("completions: engine asked %+v", r[len(r)-1])
	}
}

// An engine that answers a top-logprob request without alternatives
// (upstream TokenSpeed today) is a 400 top_logprobs_unsupported, before
// anything was streamed, never a silently short answer.
func TestTopLogprobsUnsupportedEngine(t *testing.T) {
	t.Parallel()
	eng := newFake(demoTokenizer(t), "Hello there.")
	eng.noTop = true
	srv := newTestServer(t, eng, Options{})
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2}`,
		`{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2,"stream":true}`,
		`{"prompt":"x","logprobs":2}`,
	} {
		url := srv.URL + "/v1/chat/completions"
		if strings.Contains(body, "prompt") {
			url = srv.URL + "/v1/completions"
		}
		resp, b := post(t, url, body)
		wantError(t, resp, b, 400, "returned no top logprobs")
		var e errResp
		_ = json.Unmarshal(b, &e)
		if e.Error.Code != "top_logprobs_unsupported" {
			t.Errorf("%s: code %q", body, e.Error.Code)
		}
	}
	// Plain logprobs still work on such an engine.
	if resp, b := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

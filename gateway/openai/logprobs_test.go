package openai

import (
	"encoding/json"
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

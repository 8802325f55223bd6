package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

// /v1/responses is as strict as chat: unknown fields refused by name,
// each of background, service_tier, truncation, include, top_logprobs,
// reasoning.effort and text.verbosity either implemented or refused by
// name (all used to be answered 200), and no refused request reaches the
// engine.
func TestResponsesStrictFields(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, "Hello there.")
	srv := newTestServer(t, eng, Options{Model: "demo"})
	for _, c := range []struct {
		body, code, param, msg string
	}{
		{`{"input":"x","frobnicate":1}`, "unknown_parameter", "frobnicate", "unrecognized request argument 'frobnicate'"},
		{`{"input":"x","background":true}`, "unsupported_value", "background", "background responses are not implemented"},
		{`{"input":"x","service_tier":"flex"}`, "unsupported_value", "service_tier", "one service tier"},
		{`{"input":"x","truncation":"auto"}`, "unsupported_value", "truncation", "never dropped"},
		{`{"input":"x","include":["reasoning.encrypted_content"]}`, "unsupported_value", "include[0]", "never encrypted"},
		{`{"input":"x","include":["message.output_text.logprobs","bogus"]}`, "invalid_request", "include[1]", `"bogus"`},
		{`{"input":"x","include":["message.output_text.logprobs"],"top_logprobs":21}`, "invalid_request", "top_logprobs", "between 0 and 20"},
		{`{"input":"x","reasoning":{"effort":"high","budget":3}}`, "unknown_parameter", "reasoning.budget", "reasoning.budget"},
		{`{"input":"x","reasoning":{"effort":"extreme"}}`, "invalid_request", "reasoning.effort", `"extreme"`},
		{`{"input":"x","text":{"verbosity":"high"}}`, "unsupported_value", "text.verbosity", "verbosity"},
		{`{"input":"x","conversation":"conv_1"}`, "unsupported_parameter", "conversation", "previous_response_id"},
		{`{"input":"x","prompt":{"id":"pmpt_1"}}`, "unsupported_parameter", "prompt", "reusable prompt"},
		{`{"input":"x","stream":true,"stream_options":{"include_usage":true}}`, "unknown_parameter", "stream_options.include_usage", "stream_options.include_usage"},
	} {
		resp, b := post(t, srv.URL+"/v1/responses", c.body)
		wantError(t, resp, b, 400, c.msg)
		var e errResp
		_ = json.Unmarshal(b, &e)
		if e.Error.Code != c.code || e.Error.Param == nil || *e.Error.Param != c.param {
			t.Errorf("%s: code %q param %s, want %s %s", c.body, e.Error.Code, ptrStr(e.Error.Param), c.code, c.param)
		}
	}
	if n := len(eng.requests()); n != 0 {
		t.Fatalf("%d refused requests reached the engine", n)
	}
	// What maps is accepted and echoed as OpenAI does.
	r := createRespRaw(t, srv.URL, `{"input":"x","background":false,"service_tier":"auto","truncation":"disabled","max_tool_calls":3,`+
		`"safety_identifier":"u1","prompt_cache_key":"k","reasoning":{"summary":"auto"},"text":{"verbosity":"medium"},"stream_options":{"include_obfuscation":false}}`)
	for k, want := range map[string]string{"background": "false", "service_tier": `"default"`, "truncation": `"disabled"`, "top_logprobs": "0",
		"reasoning": `{"effort":null,"summary":"auto"}`} {
		if got := string(r[k]); got != want {
			t.Errorf("response %s = %s, want %s", k, got, want)
		}
	}
}

func createRespRaw(t *testing.T, url, body string) map[string]json.RawMessage {
	t.Helper()
	resp, b := post(t, url+"/v1/responses", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// reasoning.effort (and chat's reasoning_effort) maps onto the template's
// own switch: the demo template's enable_thinking, which
// chat_template_kwargs override; a template without one refuses it.
func TestReasoningEffortMapsToTemplate(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, "Hi.")
	srv := newTestServer(t, eng, Options{Model: "demo"})
	prompt := func() string {
		reqs := eng.requests()
		return eng.tok.Decode(reqs[len(reqs)-1].InputIDs, false)
	}
	createResp(t, srv.URL, `{"input":"x","reasoning":{"effort":"minimal"}}`)
	if p := prompt(); !strings.Contains(p, "(no thinking)") {
		t.Fatalf("effort minimal did not turn thinking off: %q", p)
	}
	createResp(t, srv.URL, `{"input":"x","reasoning":{"effort":"high"}}`)
	if p := prompt(); strings.Contains(p, "(no thinking)") {
		t.Fatalf("effort high turned thinking off: %q", p)
	}
	for _, c := range []struct {
		body string
		off  bool
	}{
		{`{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"none"}`, true},
		{`{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"low"}`, false},
		{`{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true}}`, false},
	} {
		if resp, b := post(t, srv.URL+"/v1/chat/completions", c.body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.body, resp.StatusCode, b)
		}
		if p := prompt(); strings.Contains(p, "(no thinking)") != c.off {
			t.Errorf("%s: prompt %q", c.body, p)
		}
	}

	plain := withTemplate(t, `{% for m in messages %}{{ m.content }}{% endfor %}`, "Hi.")
	srv2 := newTestServer(t, plain, Options{Model: "demo"})
	resp, b := post(t, srv2.URL+"/v1/responses", `{"input":"x","reasoning":{"effort":"low"}}`)
	wantError(t, resp, b, 400, "no reasoning switch")
	resp, b = post(t, srv2.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"low"}`)
	wantError(t, resp, b, 400, "no reasoning switch")
}

func TestEffortKwargs(t *testing.T) {
	has := func(names ...string) func(string) bool {
		return func(n string) bool {
			for _, x := range names {
				if x == n {
					return true
				}
			}
			return false
		}
	}
	for _, c := range []struct {
		effort string
		uses   func(string) bool
		want   string // JSON of the kwargs, or "error"
	}{
		{"", has(), "null"},
		{"high", has("reasoning_effort", "enable_thinking"), `{"reasoning_effort":"high"}`},
		{"minimal", has("reasoning_effort"), `{"reasoning_effort":"minimal"}`},
		{"none", has("enable_thinking"), `{"enable_thinking":false}`},
		{"minimal", has("enable_thinking"), `{"enable_thinking":false}`},
		{"low", has("enable_thinking"), `{"enable_thinking":true}`},
		{"medium", has("thinking"), `{"thinking":true}`},
		{"none", has("thinking"), `{"thinking":false}`},
		{"high", has(), "error"},
		{"max", has("reasoning_effort"), "error"},
	} {
		kw, err := effortKwargs(c.effort, c.uses)
		got := "error"
		if err == nil {
			b, _ := json.Marshal(kw)
			got = string(b)
		}
		if got != c.want {
			t.Errorf("effortKwargs(%q) = %s (%v), want %s", c.effort, got, err, c.want)
		}
	}
}

// An incomplete response's cut item is "incomplete" too (whole and
// streamed), as OpenAI reports it; it used to say "completed".
func TestResponsesIncompleteItem(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, agentFake(t, "One two three four five six seven."), Options{Model: "demo"})
	r := createResp(t, srv.URL, `{"input":"x","max_output_tokens":2}`)
	if r.Status != "incomplete" || len(r.Output) != 1 || r.Output[0].Status != "incomplete" {
		t.Fatalf("status %s, items %+v", r.Status, r.Output)
	}
	resp, b := post(t, srv.URL+"/v1/responses", `{"input":"x","max_output_tokens":2,"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var done, final string
	for _, line := range strings.Split(string(b), "\n") {
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type     string `json:"type"`
			Item     respItem
			Response respBody
		}
		_ = json.Unmarshal([]byte(d), &ev)
		switch ev.Type {
		case "response.output_item.done":
			done = ev.Item.Status
		case "response.incomplete":
			final = ev.Response.Output[0].Status
		}
	}
	if done != "incomplete" || final != "incomplete" {
		t.Fatalf("streamed item status %q, in response.incomplete %q", done, final)
	}
	// A reply that ends on its own is completed.
	r = createResp(t, srv.URL, `{"input":"x"}`)
	if r.Status != "completed" || r.Output[0].Status != "completed" {
		t.Fatalf("%+v", r)
	}
}

// include message.output_text.logprobs returns each token's logprob in
// output_text (whole and streamed deltas), with top_logprobs
// alternatives; top_logprobs alone returns none, as OpenAI.
func TestResponsesLogprobs(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, "Hello there.")
	srv := newTestServer(t, eng, Options{Model: "demo"})
	type lp struct {
		Token       string  `json:"token"`
		Logprob     float64 `json:"logprob"`
		TopLogprobs []struct {
			Token string `json:"token"`
		} `json:"top_logprobs"`
	}
	var r struct {
		Output []struct {
			Content []struct {
				Text     string `json:"text"`
				Logprobs []lp   `json:"logprobs"`
			} `json:"content"`
		} `json:"output"`
		TopLogprobs int `json:"top_logprobs"`
	}
	resp, b := post(t, srv.URL+"/v1/responses", `{"input":"x","include":["message.output_text.logprobs"],"top_logprobs":1}`)
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	c := r.Output[0].Content[0]
	toks := ""
	for _, l := range c.Logprobs {
		toks += l.Token
		if l.Logprob != -0.5 || len(l.TopLogprobs) != 1 || l.TopLogprobs[0].Token != l.Token {
			t.Fatalf("logprob %+v", l)
		}
	}
	if len(c.Logprobs) == 0 || !strings.HasPrefix(toks, c.Text) || r.TopLogprobs != 1 || !eng.requests()[0].ReturnLogprob {
		t.Fatalf("text %q, tokens %q (%d), top %d", c.Text, toks, len(c.Logprobs), r.TopLogprobs)
	}
	resp, b = post(t, srv.URL+"/v1/responses", `{"input":"x","include":["message.output_text.logprobs"],"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	deltaLPs := 0
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			Type     string `json:"type"`
			Logprobs []lp   `json:"logprobs"`
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(d), &ev) == nil && ev.Type == "response.output_text.delta" {
			deltaLPs += len(ev.Logprobs)
		}
	}
	if deltaLPs == 0 {
		t.Fatalf("no logprobs on the streamed deltas: %s", b)
	}
	if raw := createRespRaw(t, srv.URL, `{"input":"x","top_logprobs":3}`); string(raw["top_logprobs"]) != "3" {
		t.Fatalf("top_logprobs echoed as %s", raw["top_logprobs"])
	}
	if reqs := eng.requests(); reqs[len(reqs)-1].ReturnLogprob {
		t.Fatal("top_logprobs without include asked the engine for logprobs")
	}
}

package openai

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

var (
	fuzzOnce sync.Once
	fuzzMux  http.Handler
	fuzzEng  *fakeEngine
)

// Any request body gets a well-formed answer: a JSON object (error or
// completion) or an SSE stream ending in [DONE]; never a panic.
func FuzzRequests(f *testing.F) {
	fuzzOnce.Do(func() {
		tk := demoTokenizer(f)
		fuzzEng = newFake(tk, "Hi there. STOP")
		mux := http.NewServeMux()
		New(fuzzEng, tk, Options{}).Register(mux)
		fuzzMux = behindDoor(fuzzEng, "", mux)
	})
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"x"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"n":2,"stop":["STOP"]}`,
		`{"prompt":[[1,2],[3]],"echo":true,"max_tokens":3}`,
		`{"prompt":"x","logprobs":1,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"tool","content":null}],"tools":[{"a":1}],"chat_template_kwargs":{"enable_thinking":false}}`,
		`{"prompt":"x","stop":"","seed":-1,"top_k":0}`,
		`{"messages":[{"role":"user","content":"w"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required","stream":true}`,
		`{"messages":[{"role":"user","content":"w"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"messages":[{"role":"user","content":"j"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object","properties":{"a":{"type":"integer"}}},"strict":true}}}`,
		`{"messages":[{"role":"user","content":"r"}],"regex":"[a-z]+","ebnf":"root ::= \"a\""}`,
		`{"input":"hi","instructions":"be brief","stream":true}`,
		`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call_output","call_id":"c","output":"1"}],"tools":[{"type":"function","name":"f","parameters":{}}]}`,
		`{"input":"x","previous_response_id":"resp_missing","text":{"format":{"type":"json_object"}}}`,
	} {
		f.Add("/v1/chat/completions", s)
		f.Add("/v1/completions", s)
		f.Add("/v1/responses", s)
	}
	f.Fuzz(func(t *testing.T, path, body string) {
		switch path {
		case "/v1/chat/completions", "/v1/completions", "/v1/responses":
		default:
			path = "/v1/tokenize"
		}
		rec := httptest.NewRecorder()
		fuzzMux.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
		noPanics(t, fuzzEng)
		out := rec.Body.String()
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			if path == "/v1/responses" {
				// The Responses stream ends with its terminal event, not [DONE].
				if !strings.HasPrefix(out, "event: response.") || !strings.HasSuffix(out, "\n\n") {
					t.Fatalf("responses stream malformed: %q", out)
				}
				return
			}
			if !strings.HasSuffix(out, "data: [DONE]\n\n") {
				t.Fatalf("stream without [DONE]: %q", out)
			}
			return
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("status %d, body not a JSON object: %q", rec.Code, out)
		}
		if rec.Code != 200 {
			if _, ok := v["error"]; !ok {
				t.Fatalf("status %d without error object: %q", rec.Code, out)
			}
		}
	})
}

package openai

import (
	"strings"
	"testing"
)

// shortContext is an engine whose registrations report max_model_len 16.
type shortContext struct{ *fakeEngine }

func (shortContext) MaxModelLen() int { return 16 }

// Regression: a 30 MB prompt was tokenized (about 1.5 GB of memory) before
// anything knew it could not fit. A prompt text longer than max_model_len
// × 32 bytes is refused before tokenization, on every route that
// tokenizes; one that may fit goes on.
func TestPromptTextCheckedBeforeTokenizing(t *testing.T) {
	t.Parallel()
	tk := demoTokenizer(t)
	eng := newFake(tk, "ok")
	srv := serveEngine(t, shortContext{eng}, tk, Options{}, "")
	long := strings.Repeat("a", 16*32+1)
	for path, body := range map[string]string{
		"/v1/completions":      `{"prompt":"` + long + `","max_tokens":1}`,
		"/v1/chat/completions": `{"messages":[{"role":"user","content":"` + long + `"}],"max_tokens":1}`,
		"/v1/tokenize":         `{"prompt":"` + long + `"}`,
	} {
		resp, b := post(t, srv.URL+path, body)
		wantError(t, resp, b, 400, "max_model_len")
	}
	if n := len(eng.requests()); n != 0 {
		t.Fatalf("%d requests reached the engine", n)
	}
	if resp, b := post(t, srv.URL+"/v1/completions", `{"prompt":"hi","max_tokens":1}`); resp.StatusCode != 200 {
		t.Fatalf("short prompt: %d %s", resp.StatusCode, b)
	}
}

package probe

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/generate"
	"github.com/tsd-project/tsd/gateway/openai"
)

// The probe reports a chat reply in one line, falls back to /generate
// when the gateway serves no chat, sends the key named by APIKeyEnv, and
// says what went wrong otherwise.
func TestSend(t *testing.T) {
	hello := "Hello there, how are you?"
	chatOK := func(w http.ResponseWriter) {
		_ = json.NewEncoder(w).Encode(openai.ChatCompletion{Object: "chat.completion",
			Choices: []openai.ChatChoice{{Message: openai.Message{Role: "assistant", Content: &hello}, FinishReason: "stop"}},
			Usage:   openai.Usage{CompletionTokens: 7}})
	}
	genOK := func(w http.ResponseWriter) {
		_ = json.NewEncoder(w).Encode(generate.Response{OutputIDs: []int32{5, 6, 7}})
	}
	for _, c := range []struct {
		name       string
		chat, gen  func(http.ResponseWriter)
		key        string
		want, fail string
	}{
		{name: "chat", chat: chatOK, want: hello + " (7 tokens, stop)"},
		{name: "chat with key", chat: chatOK, key: "sekret", want: hello + " (7 tokens, stop)"},
		{name: "no chat: /generate", gen: genOK, want: "/generate: 3 tokens [5 6 7]"},
		{name: "chat refused", chat: func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"no engine"}}`+"\n")
		}, fail: `test request: HTTP 503: {"error":{"message":"no engine"}}`},
		{name: "no chat, /generate refused", gen: func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }, fail: "HTTP 502"},
		{name: "chat without choices", chat: func(w http.ResponseWriter) { _, _ = io.WriteString(w, `{"choices":[]}`) }, fail: "decode test reply"},
		{name: "/generate not JSON", gen: func(w http.ResponseWriter) { _, _ = io.WriteString(w, `[`) }, fail: "decode test reply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var gotKey, gotModel string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotKey = r.Header.Get("Authorization")
				h := c.chat
				if r.URL.Path == "/generate" {
					h = c.gen
				} else {
					var body struct{ Model string }
					_ = json.NewDecoder(r.Body).Decode(&body)
					gotModel = body.Model
				}
				if h == nil {
					http.NotFound(w, r)
					return
				}
				h(w)
			}))
			defer srv.Close()
			tg := Target{URL: srv.URL, Model: "demo"}
			if c.key != "" {
				t.Setenv("TSD_PROBE_TEST_KEY", c.key)
				tg.APIKeyEnv = "TSD_PROBE_TEST_KEY"
			}
			got, _, err := tg.Send(context.Background())
			if c.fail != "" {
				if err == nil || !strings.Contains(err.Error(), c.fail) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, c.fail)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
			if gotModel != "demo" {
				t.Errorf("model %q", gotModel)
			}
			if want := map[bool]string{true: "Bearer " + c.key, false: ""}[c.key != ""]; gotKey != want {
				t.Errorf("Authorization %q, want %q", gotKey, want)
			}
		})
	}
	// The key the gateway checks now wins over the environment's.
	t.Setenv("TSD_PROBE_TEST_KEY", "stale")
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		chatOK(w)
	}))
	defer srv.Close()
	if _, _, err := (Target{URL: srv.URL, APIKeyEnv: "TSD_PROBE_TEST_KEY", Key: func() string { return "live" }}).Send(context.Background()); err != nil || got != "Bearer live" {
		t.Fatalf("live key: Authorization %q, %v", got, err)
	}
	if _, _, err := (Target{}).Send(context.Background()); err == nil || err.Error() != "no gateway" {
		t.Fatalf("no gateway: %v", err)
	}
}

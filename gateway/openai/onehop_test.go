package openai

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// goroutineID is the running goroutine's number, from its stack header
// ("goroutine N [running]:").
func goroutineID() string {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	if i := bytes.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// whereEngine records the goroutine each Streamer.Next of a request runs
// in, by request path (tokenapi.Request carries no path: the handler's
// middleware names the goroutine first).
type whereEngine struct {
	*fakeEngine
	mu      sync.Mutex
	handler map[string]bool // goroutines that run a handler
	next    []string        // goroutines Next ran in
}

func (e *whereEngine) Stream(ctx context.Context, r tokenapi.Request) (tokenapi.Streamer, error) {
	st, err := streamOf(e.fakeEngine.Generate(ctx, r))
	if err != nil {
		return nil, err
	}
	return &whereStreamer{Streamer: st, e: e}, nil
}

type whereStreamer struct {
	tokenapi.Streamer
	e *whereEngine
}

func (s *whereStreamer) Next() (tokenapi.Event, bool) {
	s.e.mu.Lock()
	s.e.next = append(s.e.next, goroutineID())
	s.e.mu.Unlock()
	return s.Streamer.Next()
}

// Every one-sample stream (chat and completions with n = 1, Responses)
// reads the engine in the HTTP handler's own goroutine: no runner and no
// channel between the engine's output and the writer
// (docs/architecture.md §14); n > 1 reads each sample in a runner.
func TestOneSampleStreamsReadInHandler(t *testing.T) {
	t.Parallel()
	eng := &whereEngine{fakeEngine: newFake(demoTokenizer(t), "hello there friend"), handler: map[string]bool{}}
	mux := http.NewServeMux()
	New(eng, eng.tok, Options{}).Register(mux)
	mark := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		eng.mu.Lock()
		eng.handler[goroutineID()] = true
		eng.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
	inner := http.NewServeMux()
	inner.Handle("/", mark)
	srv := httptest.NewServer(behindDoor(eng, "", inner))
	defer srv.Close()
	for _, c := range []struct {
		path, body string
		inHandler  bool
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"stream":true}`, true},
		{"/v1/completions", `{"prompt":"Hi","max_tokens":6,"stream":true}`, true},
		{"/v1/responses", `{"input":"Hi","max_output_tokens":6,"stream":true}`, true},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"stream":true,"n":2}`, false},
		{"/v1/completions", `{"prompt":["Hi","Ho"],"max_tokens":6,"stream":true}`, false},
	} {
		eng.mu.Lock()
		eng.next, eng.handler = nil, map[string]bool{}
		eng.mu.Unlock()
		resp, b := post(t, srv.URL+c.path, c.body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "hello") {
			t.Fatalf("%s %s: %d %s", c.path, c.body, resp.StatusCode, b)
		}
		eng.mu.Lock()
		if len(eng.next) == 0 {
			t.Fatalf("%s: the engine was never read", c.path)
		}
		for _, g := range eng.next {
			if eng.handler[g] != c.inHandler {
				t.Errorf("%s %s: Next ran in goroutine %s, handler's %v: in handler %v, want %v", c.path, c.body, g, eng.handler, eng.handler[g], c.inHandler)
				break
			}
		}
		eng.mu.Unlock()
	}
}

// A panic in the engine's stream, read in the handler goroutine, still
// fails only that request, as the runner's boundary did: a 500 before
// anything was sent (completions), an error event after the Responses
// stream's first events; the next request is served.
func TestOneSampleStreamPanicRecovered(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ path, body, want string }{
		{"/v1/completions", `{"prompt":"Hi","max_tokens":4,"stream":true}`, `"code":"internal_error"`},
		{"/v1/responses", `{"input":"Hi","max_output_tokens":4,"stream":true}`, "event: error"},
	} {
		eng := &panicky{fakeEngine: newFake(demoTokenizer(t), "hello there")}
		mux := http.NewServeMux()
		New(eng, eng.tok, Options{}).Register(mux)
		srv := httptest.NewServer(behindDoor(eng, "", mux))
		_, b := post(t, srv.URL+c.path, c.body)
		if !strings.Contains(string(b), c.want) || !strings.Contains(string(b), "injected dispatch panic") {
			t.Fatalf("%s panic: %s", c.path, b)
		}
		resp, b := post(t, srv.URL+c.path, c.body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "hello") {
			t.Fatalf("%s next request: %d %s", c.path, resp.StatusCode, b)
		}
		eng.mu.Lock()
		got := strings.Join(eng.reported, ",")
		eng.mu.Unlock()
		if got != "openai runner" {
			t.Fatalf("%s reported %q", c.path, got)
		}
		srv.Close()
	}
}

package openai

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// panicky wraps the fake engine: its first Generate (run in a runner
// goroutine of runAll) and, when asked, its first Ready (run in the
// handler) panic; it records what it was told to report.
type panicky struct {
	*fakeEngine
	gens, readys atomic.Int32
	readyPanics  bool

	mu       sync.Mutex
	reported []string
}

func (p *panicky) Generate(ctx context.Context, r tokenapi.Request) (<-chan tokenapi.Event, error) {
	if p.gens.Add(1) == 1 {
		panic("injected dispatch panic")
	}
	return p.fakeEngine.Generate(ctx, r)
}

func (p *panicky) Stream(ctx context.Context, r tokenapi.Request) (tokenapi.Streamer, error) {
	return streamOf(p.Generate(ctx, r))
}

func (p *panicky) Ready() bool {
	if p.readyPanics && p.readys.Add(1) == 1 {
		panic("injected handler panic")
	}
	return true
}

func (p *panicky) ReportPanic(where string, v any, _ []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reported = append(p.reported, where)
}

// A panic in a runner goroutine (the engine's Generate) or in a handler
// fails that request with a 500 in OpenAI's error shape, is reported to
// the engine, and the next request is served. A runner is this package's
// own goroutine, so it recovers there; a handler's panic is the front
// door's to catch, as in production (gateway/front).
func TestPanicsFailOneRequest(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		eng := &panicky{fakeEngine: newFake(demoTokenizer(t), "hello there"), readyPanics: !stream}
		mux := http.NewServeMux()
		New(eng, eng.tok, Options{}).Register(mux)
		srv := httptest.NewServer(behindDoor(eng, "", mux))
		body := `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":` + map[bool]string{false: "false", true: "true"}[stream] + `}`
		want := []string{"openai runner"}
		if !stream {
			// The handler's panic comes first (Ready), then the runner's.
			resp, b := post(t, srv.URL+"/v1/chat/completions", body)
			if resp.StatusCode != 500 || !strings.Contains(string(b), `"code":"internal_error"`) || !strings.Contains(string(b), "injected handler panic") {
				t.Fatalf("handler panic: %d %s", resp.StatusCode, b)
			}
			want = []string{"http POST /v1/chat/completions", "openai runner"}
		}
		resp, b := post(t, srv.URL+"/v1/chat/completions", body)
		if resp.StatusCode != 500 || !strings.Contains(string(b), `"code":"internal_error"`) || !strings.Contains(string(b), "injected dispatch panic") {
			t.Fatalf("stream=%v runner panic: %d %s", stream, resp.StatusCode, b)
		}
		resp, b = post(t, srv.URL+"/v1/chat/completions", body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), "hello") {
			t.Fatalf("stream=%v next request: %d %s", stream, resp.StatusCode, b)
		}
		eng.mu.Lock()
		got := strings.Join(eng.reported, ",")
		eng.mu.Unlock()
		if got != strings.Join(want, ",") {
			t.Fatalf("stream=%v reported %q, want %q", stream, got, want)
		}
		srv.Close()
	}
}

package openai

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenapi/tokenapitest"
	"github.com/tsd-project/tsd/gateway/tokenizer"
)

// fakeEngine is a deterministic in-memory tokenapi.Engine: it "generates" a
// scripted reply, honours max tokens, stop token ids and EOS the way the
// engine does, and records requests and aborts.
type fakeEngine struct {
	tok      *tokenizer.Tokenizer
	reply    func(r tokenapi.Request) string
	perEvent int   // tokens per event (default 2)
	endless  bool  // never finish: for disconnect tests
	failAt   int   // >0: fail the stream after this many tokens
	startErr error // Generate itself fails
	notReady bool
	// cached, when set, is the prompt tokens each request finds cached,
	// reported from its second event on (as the prefill's count reaches
	// the gateway after the first decode tokens).
	cached func(r tokenapi.Request) int
	noTop  bool // answer top-logprob requests without alternatives (upstream's engine)

	mu      sync.Mutex
	reqs    []tokenapi.Request
	panics  []string    // where each reported panic was recovered
	aborted chan string // rids cancelled before they finished
}

func newFake(tok *tokenizer.Tokenizer, reply string) *fakeEngine {
	return &fakeEngine{tok: tok, reply: func(tokenapi.Request) string { return reply }, perEvent: 2, aborted: make(chan string, 64)}
}

func (f *fakeEngine) Ready() bool { return !f.notReady }

// The rest of tokenapi.Engine: no queueing (not ready is a 503 at once), no
// context length known, images routable, panics kept for the test.
func (f *fakeEngine) Queues() bool        { return false }
func (f *fakeEngine) MaxModelLen() int    { return 0 }
func (f *fakeEngine) ImageSupport() error { return nil }
func (f *fakeEngine) ReportPanic(where string, _ any, _ []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.panics = append(f.panics, where)
}

func (f *fakeEngine) requests() []tokenapi.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

func (f *fakeEngine) Stream(ctx context.Context, r tokenapi.Request) (tokenapi.Streamer, error) {
	return streamOf(f.Generate(ctx, r))
}

// streamOf is a test engine's Stream over its Generate.
func streamOf(ch <-chan tokenapi.Event, err error) (tokenapi.Streamer, error) {
	if err != nil {
		return nil, err
	}
	return tokenapitest.FromChannel(ch), nil
}

func (f *fakeEngine) Generate(ctx context.Context, r tokenapi.Request) (<-chan tokenapi.Event, error) {
	if f.startErr != nil {
		return nil, f.startErr
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.mu.Unlock()
	toks, _ := f.tok.Encode(f.reply(r), false)
	ch := make(chan tokenapi.Event) // unbuffered: a reader that walks away must not block us
	go func() {
		defer close(ch)
		send := func(ev tokenapi.Event) bool {
			select {
			case ch <- ev:
				return true
			case <-ctx.Done():
				f.aborted <- r.RID
				return false
			}
		}
		eos := f.tok.EOS()[0]
		out := 0
		for i := 0; f.endless || i <= len(toks); {
			ev := tokenapi.Event{PromptTokens: len(r.InputIDs)}
			if f.cached != nil && i > 0 {
				ev.CachedTokens = f.cached(r)
			}
			if i == 0 && r.LogprobStartLen >= 0 {
				// As the gateway: the prefill's prompt logprobs, none for position 0.
				for p := r.LogprobStartLen; p < len(r.InputIDs); p++ {
					v := -0.25
					if p == 0 {
						v = math.NaN()
					}
					ev.PromptLogprobs = append(ev.PromptLogprobs, v)
				}
			}
			for k := 0; k < f.perEvent; k++ {
				var id int32
				switch {
				case f.endless:
					id = toks[i%len(toks)]
				case i < len(toks):
					id = toks[i]
				case !r.Sampling.IgnoreEOS:
					id = eos
				default:
					id = toks[0]
				}
				i++
				out++
				ev.TokenIDs = append(ev.TokenIDs, id)
				if r.ReturnLogprob {
					ev.Logprobs = append(ev.Logprobs, -0.5)
				}
				if r.ReturnLogprob && r.TopLogprobsNum > 0 && !f.noTop {
					// The sampled token leads; then the ids after it.
					alts := []tokenapi.TopLogprob{{ID: id, Logprob: -0.5}}
					for j := 1; j < r.TopLogprobsNum; j++ {
						alts = append(alts, tokenapi.TopLogprob{ID: id + int32(j), Logprob: -0.5 - float64(j)})
					}
					ev.TopLogprobs = append(ev.TopLogprobs, alts)
				}
				ev.OutputTokens = out
				if f.failAt > 0 && out >= f.failAt {
					send(tokenapi.Event{Err: errors.New("engine died")})
					return
				}
				if slices.Contains(r.Sampling.StopTokenIDs, id) || (id == eos && !r.Sampling.IgnoreEOS) {
					m := id
					ev.Finish = &tokenapi.Finish{Reason: tokenapi.FinishStop, MatchedToken: &m}
					send(ev)
					return
				}
				if r.Sampling.MaxNewTokens != nil && out >= *r.Sampling.MaxNewTokens {
					ev.Finish = &tokenapi.Finish{Reason: tokenapi.FinishLength}
					send(ev)
					return
				}
			}
			if !send(ev) {
				return
			}
		}
	}()
	return ch, nil
}

func demoTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tk, err := tokenizer.Load("../tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func newTestServer(t testing.TB, eng *fakeEngine, opts Options) *httptest.Server {
	t.Helper()
	return serveEngine(t, eng, eng.tok, opts, "")
}

// serveEngine serves a Server over e behind the gateway's front door, as
// production does (see behindDoor); key "" is no API key.
func serveEngine(t testing.TB, e tokenapi.Engine, tok *tokenizer.Tokenizer, opts Options, key string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	New(e, tok, opts).Register(mux)
	srv := httptest.NewServer(behindDoor(e, key, mux))
	t.Cleanup(srv.Close)
	return srv
}

// behindDoor is mux behind the front door (gateway/front) configured as
// the gateway configures it: the API key when key is set, its body
// limits, request ids, the panic boundary reporting to e. Bodies are not
// bounded by max_model_len here (as in epd mode, where images ride in
// them), so the tests reach this package's own prompt-length checks.
func behindDoor(e tokenapi.Engine, key string, mux *http.ServeMux) http.Handler {
	return front.New(front.Config{
		APIKey:  key,
		Body:    &front.BodyLimits{Max: 32 << 20, ReadTimeout: 30 * time.Second, Budget: 256 << 20},
		OnPanic: e.ReportPanic,
	}).Serve(nil, mux)
}

// noPanics fails the test when eng reported a recovered panic: the door
// and the runners answer a panic with a well-formed 500, which a fuzz
// check on the answer's shape alone would take for success.
func noPanics(t *testing.T, eng *fakeEngine) {
	t.Helper()
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if len(eng.panics) > 0 {
		t.Fatalf("recovered panics in %v", eng.panics)
	}
}

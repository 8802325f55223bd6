// Package openai serves the OpenAI-compatible HTTP API
// (/v1/chat/completions, /v1/completions) on top of a token-level
// tokenapi.Engine: it renders chat templates, tokenizes, fans out n samples,
// detokenizes incrementally with the stop jail and writes JSON or SSE
// (docs/protocol.md §11.1–§11.5).
package openai

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/gateway/vision"
)

// Options configures a Server.
type Options struct {
	// Model is the name reported in responses; requests naming another
	// model get 404 model_not_found. Empty accepts any name.
	Model string
	// MaxN caps n (and prompts × n for batch completions); 0 means 16.
	MaxN int
	// Now is the clock for "created"; nil means time.Now.
	Now func() time.Time
	// Vision is the model's image intake (vision.Load): it enables image
	// content parts; nil: the model takes no images and image parts get
	// a 400.
	Vision *vision.Intake
	// ToolCallParser and ReasoningParser name the reply parsers
	// (gateway/parsers; profile keys gateway.tool_call_parser and
	// gateway.reasoning_parser). "" or "passthrough": none.
	ToolCallParser  string
	ReasoningParser string
	// ResponsesMax and ResponsesMaxBytes bound the in-memory store of
	// /v1/responses results (previous_response_id): least recently used
	// first out; 0 means 1024 responses and 64 MiB.
	ResponsesMax      int
	ResponsesMaxBytes int64
	// TokenizerCache encodes prompts (gateway.tokenizer_cache_mb); it must
	// be in front of the Server's tokenizer. nil: prompts are encoded
	// uncached.
	TokenizerCache *tokenizer.Cache
}

// Server is the OpenAI front end. Safe for concurrent use.
type Server struct {
	engine tokenapi.Engine
	tok    *tokenizer.Tokenizer
	opts   Options
	// promptCache encodes every prompt (chat, completions, responses,
	// tokenize): opts.TokenizerCache, or a cache of no size.
	promptCache *tokenizer.Cache
	// responses keeps /v1/responses results for previous_response_id
	// (responses.go).
	responses *responseStore
}

// New builds a Server; mount it with Register.
func New(engine tokenapi.Engine, tok *tokenizer.Tokenizer, opts Options) *Server {
	if opts.MaxN <= 0 {
		opts.MaxN = 16
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ResponsesMax <= 0 {
		opts.ResponsesMax = 1024
	}
	if opts.ResponsesMaxBytes <= 0 {
		opts.ResponsesMaxBytes = 64 << 20
	}
	pc := opts.TokenizerCache
	if pc == nil || pc.Tokenizer() != tok {
		pc = tokenizer.NewCache(tok, 0)
	}
	return &Server{engine: engine, tok: tok, opts: opts, promptCache: pc, responses: newResponseStore(opts.ResponsesMax, opts.ResponsesMaxBytes)}
}

// Register mounts the serving routes on mux: /v1/chat/completions,
// /v1/completions, and the gateway-local /v1/tokenize and /v1/detokenize.
// The routes expect the gateway's front door around mux (gateway/front:
// API key, body limits, request id, admission, the panic boundary); this
// package adds none of its own.
func (s *Server) Register(mux *http.ServeMux) {
	mux.Handle("POST /v1/chat/completions", s.generation(s.chat))
	mux.Handle("POST /v1/completions", s.generation(s.completions))
	mux.HandleFunc("POST /v1/tokenize", s.tokenize)
	mux.HandleFunc("POST /v1/detokenize", s.detokenize)
	s.registerAgentRoutes(mux) // models.go: /v1/models/{id}, /v1/responses
}

// generation refuses a route that starts generations while no engine can
// take one, unless the engine queues such requests itself.
func (s *Server) generation(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.engine.Ready() && !s.engine.Queues() {
			writeError(w, errorf(http.StatusServiceUnavailable, "no_engine_ready", "", "no prefill/decode engine is ready yet"))
			return
		}
		h(w, r)
	})
}

// maxBytesPerToken bounds the text bytes one prompt token can stand for;
// a text longer than max_model_len of them cannot fit, whatever it
// tokenizes to, so it is refused before tokenization (whose cost grows
// with the text: a 30 MB prompt cost ~1.5 GB of memory).
const maxBytesPerToken = front.MaxBytesPerToken

// maxModelLen is the engines' context length when the engine knows it
// (the gateway: from registrations), else 0.
func (s *Server) maxModelLen() int { return s.engine.MaxModelLen() }

// checkTextLen refuses a prompt text that cannot fit the engines'
// context, when the engine knows it.
func (s *Server) checkTextLen(text, param string) *apiError {
	if n := s.maxModelLen(); n > 0 && len(text) > n*maxBytesPerToken {
		return errorf(http.StatusBadRequest, "context_length_exceeded", param,
			fmt.Sprintf("the prompt text is %d bytes, more than the engines' context length (max_model_len %d tokens) can hold", len(text), n))
	}
	return nil
}

// checkContext refuses a tokenized prompt that, with max_tokens, does not
// fit the engines' context: before dispatch, so the client gets a 400
// naming both numbers instead of an engine abort (a 5xx it retries).
func (s *Server) checkContext(prompt int, p *plan, param string) *apiError {
	return front.CheckContext(prompt, p.sampling.MaxNewTokens, s.maxModelLen(), param, "max_tokens")
}

// apiError is the front door's one error type (gateway/front).
type apiError = front.Error

func errorf(status int, code, param, msg string) *apiError {
	return &apiError{Status: status, Code: code, Param: param, Message: msg}
}

func badRequest(param, msg string) *apiError {
	return errorf(http.StatusBadRequest, "invalid_request", param, msg)
}

// errorBody is the error JSON (tests decode it).
type errorBody = front.Body

func writeError(w http.ResponseWriter, e *apiError) { front.WriteError(w, e) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// sse is the front door's event stream (front.SSE) with the started and
// failed flags the handlers read after each call.
type sse struct {
	s       *front.SSE
	started bool
	failed  bool
}

func newSSE(w http.ResponseWriter) *sse { return &sse{s: front.NewSSE(w)} }

func (s *sse) sync() { s.started, s.failed = s.s.Started(), s.s.Failed() }

// fail ends a stream on a generation error: a plain error response while
// nothing was sent yet, else an error event after the chunks already out.
func (s *sse) fail(err *apiError) { s.s.Fail(err); s.sync() }

// failChoices is fail for a stream of choices (chat's, completions'):
// when tsd's stop cut the stream after chunks went out, every choice not
// in finished gets its finish (abort, as finish encodes it) before the
// error event.
func (s *sse) failChoices(err *apiError, finished []bool, finish func(index int, reason string, matched any) []byte) {
	if err.Cut() && s.started {
		for i, done := range finished {
			if !done {
				s.write(finish(i, tokenapi.FinishAbort, nil))
			}
		}
	}
	s.fail(err)
}

func (s *sse) send(v any) { s.s.Send(v); s.sync() }

func (s *sse) done() { s.s.Done(); s.sync() }

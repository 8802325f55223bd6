// Package openai serves the OpenAI-compatible HTTP API
// (/v1/chat/completions, /v1/completions) on top of a token-level
// gen.Engine: it renders chat templates, tokenizes, fans out n samples,
// detokenizes incrementally with the stop jail and writes JSON or SSE
// (docs/protocol.md §11.1–§11.5).
package openai

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/tokenizer"
)

// Options configures a Server.
type Options struct {
	// Model is the name reported in responses; requests naming another
	// model get 404 model_not_found. Empty accepts any name.
	Model string
	// APIKeyEnv names an environment variable holding the bearer key;
	// when it is set and non-empty every route needs
	// "Authorization: Bearer <key>".
	APIKeyEnv string
	// APIKey is used when APIKeyEnv is empty (tests, embedding).
	APIKey string
	// MaxN caps n (and prompts × n for batch completions); 0 means 16.
	MaxN int
	// MaxBodyBytes caps request bodies; 0 means 32 MiB.
	MaxBodyBytes int64
	// Now is the clock for "created"; nil means time.Now.
	Now func() time.Time
	// Vision enables image content parts (LoadVision); nil: the model
	// takes no images and image parts get a 400.
	Vision *Vision
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
}

// Server is the OpenAI front end. Safe for concurrent use.
type Server struct {
	engine gen.Engine
	tok    *tokenizer.Tokenizer
	opts   Options
	key    string
	// responses keeps /v1/responses results for previous_response_id
	// (responses.go).
	responses *responseStore
}

// New builds a Server; mount it with Register.
func New(engine gen.Engine, tok *tokenizer.Tokenizer, opts Options) *Server {
	if opts.MaxN <= 0 {
		opts.MaxN = 16
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 32 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	key := opts.APIKey
	if opts.APIKeyEnv != "" {
		key = os.Getenv(opts.APIKeyEnv)
	}
	if opts.ResponsesMax <= 0 {
		opts.ResponsesMax = 1024
	}
	if opts.ResponsesMaxBytes <= 0 {
		opts.ResponsesMaxBytes = 64 << 20
	}
	return &Server{engine: engine, tok: tok, opts: opts, key: key, responses: newResponseStore(opts.ResponsesMax, opts.ResponsesMaxBytes)}
}

// Register mounts the serving routes on mux: /v1/chat/completions,
// /v1/completions, and the gateway-local /v1/tokenize and /v1/detokenize.
func (s *Server) Register(mux *http.ServeMux) {
	mux.Handle("POST /v1/chat/completions", s.guard(s.chat, true))
	mux.Handle("POST /v1/completions", s.guard(s.completions, true))
	mux.Handle("POST /v1/tokenize", s.guard(s.tokenize, false))
	mux.Handle("POST /v1/detokenize", s.guard(s.detokenize, false))
	s.registerAgentRoutes(mux) // models.go: /v1/models/{id}, /v1/responses
}

// guard applies auth (when this server has its own key: standalone; the
// gateway's front door authenticates mounted routes), the body limit and
// (for generation) the readiness check. Errors are the front door's.
func (s *Server) guard(h func(http.ResponseWriter, *http.Request), needEngine bool) http.Handler {
	return http.HandlerFunc(func(hw http.ResponseWriter, r *http.Request) {
		w := &headerWatch{ResponseWriter: hw}
		defer s.recoverHandler(r, w)
		if s.key != "" {
			if e := front.Authorize(r, s.key); e != nil {
				writeError(w, e)
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		if needEngine && !s.engine.Ready() && !s.engine.Queues() {
			writeError(w, errorf(http.StatusServiceUnavailable, "no_engine_ready", "", "no prefill/decode engine is ready yet"))
			return
		}
		h(w, r)
	})
}

// headerWatch remembers whether the response has started, so a recovered
// panic knows whether it can still send a 500.
type headerWatch struct {
	http.ResponseWriter
	wrote bool
}

func (w *headerWatch) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *headerWatch) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *headerWatch) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *headerWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recoverHandler is the per-request boundary of every route: a panic
// fails that request with a 500 in OpenAI's error shape while nothing was
// sent, with an error event on a started event stream, and cuts the
// connection otherwise; the server serves on.
func (s *Server) recoverHandler(r *http.Request, w *headerWatch) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	route := r.Pattern
	if route == "" {
		route = r.URL.Path
	}
	s.reportPanic("openai "+route, v)
	e := errorf(http.StatusInternalServerError, "internal_error", "", fmt.Sprintf("internal error while serving %s (the gateway recovered: %v)", r.URL.Path, v))
	switch {
	case !w.wrote:
		writeError(w, e)
	case strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream"):
		b, _ := json.Marshal(e.JSON())
		_, _ = w.Write(append(append([]byte("data: "), b...), '\n', '\n'))
		w.Flush()
	default:
		panic(http.ErrAbortHandler)
	}
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
	n := s.maxModelLen()
	if n <= 0 {
		return nil
	}
	if prompt >= n {
		return errorf(http.StatusBadRequest, "context_length_exceeded", param,
			fmt.Sprintf("the prompt has %d tokens; the engines' context length (max_model_len) is %d tokens", prompt, n))
	}
	if m := p.sampling.MaxNewTokens; m != nil && prompt+*m > n {
		return errorf(http.StatusBadRequest, "context_length_exceeded", param,
			fmt.Sprintf("the prompt has %d tokens and max_tokens asks for %d more: %d in all, over the engines' context length (max_model_len) of %d tokens", prompt, *m, prompt+*m, n))
	}
	return nil
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

func (s *sse) send(v any) { s.s.Send(v); s.sync() }

func (s *sse) done() { s.s.Done(); s.sync() }

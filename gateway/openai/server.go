// Package openai serves the OpenAI-compatible HTTP API
// (/v1/chat/completions, /v1/completions) on top of a token-level
// gen.Engine: it renders chat templates, tokenizes, fans out n samples,
// detokenizes incrementally with the stop jail and writes JSON or SSE
// (docs/protocol.md §11.1–§11.5).
package openai

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

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
}

// Server is the OpenAI front end. Safe for concurrent use.
type Server struct {
	engine gen.Engine
	tok    *tokenizer.Tokenizer
	opts   Options
	key    string
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
	return &Server{engine: engine, tok: tok, opts: opts, key: key}
}

// Register mounts the serving routes on mux: /v1/chat/completions,
// /v1/completions, and the gateway-local /v1/tokenize and /v1/detokenize.
func (s *Server) Register(mux *http.ServeMux) {
	mux.Handle("POST /v1/chat/completions", s.guard(s.chat, true))
	mux.Handle("POST /v1/completions", s.guard(s.completions, true))
	mux.Handle("POST /v1/tokenize", s.guard(s.tokenize, false))
	mux.Handle("POST /v1/detokenize", s.guard(s.detokenize, false))
}

// guard applies auth, the body limit and (for generation) the readiness check.
func (s *Server) guard(h func(http.ResponseWriter, *http.Request), needEngine bool) http.Handler {
	return http.HandlerFunc(func(hw http.ResponseWriter, r *http.Request) {
		w := &headerWatch{ResponseWriter: hw}
		defer s.recoverHandler(r, w)
		if s.key != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.key)) != 1 {
				writeError(w, errorf(http.StatusUnauthorized, "invalid_api_key", "", "missing or invalid API key (Authorization: Bearer ...)"))
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		if needEngine && !s.engine.Ready() && !queues(s.engine) {
			writeError(w, errorf(http.StatusServiceUnavailable, "no_engine_ready", "", "no prefill/decode engine is ready yet"))
			return
		}
		h(w, r)
	})
}

// queues reports an engine that waits for a ready worker itself
// (gateway.Options.QueueTimeout): then not being ready is no reason to
// refuse at once.
func queues(e gen.Engine) bool {
	q, ok := e.(interface{ Queues() bool })
	return ok && q.Queues()
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
		b, _ := json.Marshal(errorBody{Error: errorDetail{Message: e.Message, Type: "internal_error", Code: e.Code}})
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
const maxBytesPerToken = 32

// checkTextLen refuses a prompt text that cannot fit the engines'
// context, when the engine knows it (the gateway: from registrations).
func (s *Server) checkTextLen(text, param string) *apiError {
	ml, ok := s.engine.(interface{ MaxModelLen() int })
	if !ok {
		return nil
	}
	if n := ml.MaxModelLen(); n > 0 && len(text) > n*maxBytesPerToken {
		return errorf(http.StatusBadRequest, "context_length_exceeded", param,
			fmt.Sprintf("the prompt text is %d bytes, more than the engines' context length (max_model_len %d tokens) can hold", len(text), n))
	}
	return nil
}

// apiError is an error with its HTTP status and OpenAI fields.
type apiError struct {
	Status  int
	Code    string
	Param   string
	Message string
}

func (e *apiError) Error() string { return e.Message }

func errorf(status int, code, param, msg string) *apiError {
	return &apiError{Status: status, Code: code, Param: param, Message: msg}
}

func badRequest(param, msg string) *apiError {
	return errorf(http.StatusBadRequest, "invalid_request", param, msg)
}

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable"
	case status >= 500:
		return "internal_error"
	}
	return "invalid_request_error"
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func errorJSON(e *apiError) errorBody {
	d := errorDetail{Message: e.Message, Type: errorType(e.Status), Code: e.Code}
	if e.Param != "" {
		d.Param = &e.Param
	}
	return errorBody{Error: d}
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-SMG-Error-Code", e.Code)
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(errorJSON(e))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// sse writes server-sent events; only the handler goroutine touches it.
type sse struct {
	w       http.ResponseWriter
	f       http.Flusher
	started bool
	failed  bool
}

func newSSE(w http.ResponseWriter) *sse {
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	s.w.WriteHeader(http.StatusOK)
}

// fail ends a stream on a generation error: a plain error response while
// nothing was sent yet, else an error event after the chunks already out.
func (s *sse) fail(err *apiError) {
	if !s.started {
		writeError(s.w, err)
		s.failed = true
		return
	}
	s.send(errorBody{Error: errorDetail{Message: err.Message, Type: "internal_error", Code: err.Code}})
}

func (s *sse) send(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.raw(data)
}

func (s *sse) raw(data []byte) {
	if s.failed {
		return
	}
	s.start()
	if _, err := s.w.Write(append(append([]byte("data: "), data...), '\n', '\n')); err != nil {
		s.failed = true
		return
	}
	if s.f != nil {
		s.f.Flush()
	}
}

func (s *sse) done() { s.raw([]byte("[DONE]")) }

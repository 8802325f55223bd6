// Package bare is the floor of `make bench`: the leanest correct Go HTTP
// server that streams the bytes tsd's gateway streams — chat chunks as
// gateway/openai/chunkenc.go writes them, /generate events as
// gateway/generate/chunkenc.go does — and does nothing else: no
// tokenizer, no engine, no routing. It reads the output length from the
// body and writes that many token events, each one Write and one Flush,
// then the finish, the usage and [DONE].
//
// Each response's fixed bytes (id, created, model, the suffixes) are
// formatted once; a token's event is those bytes with its text (JSON
// escaped, by gateway/jsonenc, as json.Marshal would) or its id spliced in,
// appended into one reused buffer: no json.Marshal and no allocation per
// token (BenchmarkBareChatToken checks). tsd's tok/s and CPU per token
// over this server's on the same cores are the headline ratios.
package bare

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/jsonenc"
)

// Server counts what it streamed.
type Server struct {
	Requests atomic.Int64
	Tokens   atomic.Int64
}

// Handler serves POST /v1/chat/completions, POST /generate, GET /v1/models
// and GET /health.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /generate", s.generate)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"bare","object":"model","owned_by":"tsd"}]}`)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "OK") })
	return mux
}

// Texts are the token texts a chat stream cycles through: words, and
// pieces JSON must escape (quotes, a backslash, a newline, HTML-unsafe
// characters, non-ASCII), so the escaping is paid as the gateway pays it.
var Texts = []string{" the", " quick", " brown", " fox", "\n", " \"jumps\"", " over", " é", " <the>", " lazy", "\\", " dog", " &", ".", "\t", " 🦊"}

// TokenID is the i-th token id of a /generate stream (ts-fake's range,
// from 256).
func TokenID(i int) int32 { return int32(256 + i%700) }

// request is what a benchmark request names.
type request struct {
	n, prompt    int
	includeUsage bool
}

// readRequest reads the output length (max_completion_tokens, max_tokens
// or sampling_params.max_new_tokens; 16 when none) and whether the usage
// chunk is asked for.
func readRequest(r *http.Request) (request, error) {
	var body struct {
		MaxTokens      *int `json:"max_tokens"`
		MaxCompletion  *int `json:"max_completion_tokens"`
		SamplingParams *struct {
			MaxNewTokens *int `json:"max_new_tokens"`
		} `json:"sampling_params"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		InputIDs []int32 `json:"input_ids"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 32<<20)).Decode(&body); err != nil {
		return request{}, fmt.Errorf("invalid JSON body: %w", err)
	}
	q := request{n: 16, prompt: max(1, len(body.InputIDs))}
	switch {
	case body.MaxCompletion != nil:
		q.n = *body.MaxCompletion
	case body.MaxTokens != nil:
		q.n = *body.MaxTokens
	case body.SamplingParams != nil && body.SamplingParams.MaxNewTokens != nil:
		q.n = *body.SamplingParams.MaxNewTokens
	}
	if q.n < 1 || q.n > 1<<20 {
		return request{}, fmt.Errorf("max tokens %d out of range", q.n)
	}
	q.includeUsage = body.StreamOptions != nil && body.StreamOptions.IncludeUsage
	return q, nil
}

// stream writes one response's events: one Write and one Flush each.
type stream struct {
	w   http.ResponseWriter
	f   http.Flusher
	buf []byte
	err error
}

func newStream(w http.ResponseWriter) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &stream{w: w, f: f, buf: make([]byte, 0, 512)}
}

func (s *stream) send(b []byte) {
	if s.err != nil {
		return
	}
	if _, s.err = s.w.Write(b); s.err == nil && s.f != nil {
		s.f.Flush()
	}
	s.buf = b[:0]
}

const done = "data: [DONE]\n\n"

// ChatEnc formats one chat response's events: the bytes of
// gateway/openai/chunkenc.go for choice 0.
type ChatEnc struct {
	prefix []byte // data: {"id":…,"object":…,"created":…,"model":…,"choices":[{"index":0
	head   []byte // the same with no choices: the usage chunk's start
}

// NewChatEnc formats the fixed part of a response's chunks once.
func NewChatEnc(id string, created int64, model string) *ChatEnc {
	p := append([]byte(nil), `data: {"id":`...)
	p = jsonenc.AppendString(p, id)
	p = append(p, `,"object":"chat.completion.chunk","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = jsonenc.AppendString(p, model)
	head := append([]byte(nil), p...)
	p = append(p, `,"choices":[{"index":0`...)
	return &ChatEnc{prefix: p, head: head}
}

// Role appends the first chunk: the assistant role, empty content.
func (e *ChatEnc) Role(b []byte) []byte {
	b = append(b, e.prefix...)
	return append(b, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// Content appends a token's chunk carrying text.
func (e *ChatEnc) Content(b []byte, text string) []byte {
	b = append(b, e.prefix...)
	b = append(b, `,"delta":{"content":`...)
	b = jsonenc.AppendString(b, text)
	return append(b, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// Finish appends the choice's last chunk.
func (e *ChatEnc) Finish(b []byte, reason string) []byte {
	b = append(b, e.prefix...)
	b = append(b, `,"delta":{},"logprobs":null,"finish_reason":`...)
	b = jsonenc.AppendString(b, reason)
	return append(b, "}]}\n\n"...)
}

// Usage appends the usage chunk (no choices).
func (e *ChatEnc) Usage(b []byte, prompt, completion int) []byte {
	b = append(b, e.head...)
	b = append(b, `,"choices":[],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	return append(b, `,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`+"\n\n"...)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	q, err := readRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	seq := s.Requests.Add(1)
	enc := NewChatEnc("chatcmpl-bare"+strconv.FormatInt(seq, 36), time.Now().Unix(), "bare")
	out := newStream(w)
	out.send(enc.Role(out.buf))
	for i := 0; i < q.n && out.err == nil; i++ {
		out.send(enc.Content(out.buf, Texts[i%len(Texts)]))
	}
	out.send(enc.Finish(out.buf, "length"))
	if q.includeUsage {
		out.send(enc.Usage(out.buf, q.prompt, q.n))
	}
	if out.err == nil {
		s.Tokens.Add(int64(q.n)) // before [DONE], which ends the client's wait
	}
	out.send(append(out.buf, done...))
}

// GenerateEnc formats one /generate response's events: the bytes of
// gateway/generate/chunkenc.go, one token id per event.
type GenerateEnc struct {
	meta []byte // ],"meta_info":{"id":…,"finish_reason":
}

// NewGenerateEnc formats the fixed part of a response's events once.
func NewGenerateEnc(id string) *GenerateEnc {
	m := append([]byte(nil), `],"meta_info":{"id":`...)
	m = jsonenc.AppendString(m, id)
	return &GenerateEnc{meta: append(m, `,"finish_reason":`...)}
}

// Token appends the event of one token id; last adds the finish
// (length), e2e latency and usage.
func (e *GenerateEnc) Token(b []byte, id int32, prompt, completion int, last bool, e2e float64) []byte {
	b = append(b, `data: {"output_ids":[`...)
	b = strconv.AppendInt(b, int64(id), 10)
	b = append(b, e.meta...)
	if last {
		b = append(b, `{"type":"length"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"cached_tokens":0,"e2e_latency":`...)
	if !last {
		return append(b, "0}}\n\n"...)
	}
	b, _ = jsonenc.AppendFloat64(b, e2e)
	b = append(b, `},"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	return append(b, "}}\n\n"...)
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	q, err := readRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	seq := s.Requests.Add(1)
	enc := NewGenerateEnc("gen-bare" + strconv.FormatInt(seq, 36))
	start := time.Now()
	out := newStream(w)
	for i := 0; i < q.n && out.err == nil; i++ {
		last := i == q.n-1
		e2e := 0.0
		if last {
			e2e = time.Since(start).Seconds()
		}
		out.send(enc.Token(out.buf, TokenID(i), q.prompt, i+1, last, e2e))
	}
	if out.err == nil {
		s.Tokens.Add(int64(q.n)) // before [DONE], which ends the client's wait
	}
	out.send(append(out.buf, done...))
}

// Package bare is the baseline of `make bench`: a plain Go HTTP server
// that streams chat chunks of the same shape as tsd's gateway
// (gateway/openai/chat.go) and /generate events of the same shape as
// gateway/http.go, doing no other work: no tokenizer, no engine, no
// routing. It reads max_tokens from the body and writes that many chunks,
// a finish chunk, a usage chunk and [DONE], each marshalled and flushed as
// the gateway does. tsd's tok/s over this server's tok/s on the same cores
// is the headline ratio.
package bare

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
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

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type choice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chunk struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

type sse struct {
	w   http.ResponseWriter
	f   http.Flusher
	buf []byte
	err error
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) send(v any) {
	if s.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return
	}
	s.raw(b)
}

func (s *sse) raw(b []byte) {
	s.buf = append(append(append(s.buf[:0], "data: "...), b...), "\n\n"...)
	if _, s.err = s.w.Write(s.buf); s.err == nil && s.f != nil {
		s.f.Flush()
	}
}

// tokensAsked reads the output length a benchmark request names.
func tokensAsked(r *http.Request) (int, error) {
	var body struct {
		MaxTokens      *int `json:"max_tokens"`
		MaxCompletion  *int `json:"max_completion_tokens"`
		SamplingParams *struct {
			MaxNewTokens *int `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 32<<20)).Decode(&body); err != nil {
		return 0, fmt.Errorf("invalid JSON body: %w", err)
	}
	n := 16
	switch {
	case body.MaxCompletion != nil:
		n = *body.MaxCompletion
	case body.MaxTokens != nil:
		n = *body.MaxTokens
	case body.SamplingParams != nil && body.SamplingParams.MaxNewTokens != nil:
		n = *body.SamplingParams.MaxNewTokens
	}
	if n < 1 || n > 1<<20 {
		return 0, fmt.Errorf("max tokens %d out of range", n)
	}
	return n, nil
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	n, err := tokensAsked(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	seq := s.Requests.Add(1)
	id := "chatcmpl-bare" + strconv.FormatInt(seq, 36)
	created := time.Now().Unix()
	out := newSSE(w)
	mk := func(c choice) chunk {
		return chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: "bare", Choices: []choice{c}}
	}
	empty := ""
	out.send(mk(choice{Delta: delta{Role: "assistant", Content: &empty}}))
	for i := 0; i < n && out.err == nil; i++ {
		text := " tok"
		out.send(mk(choice{Delta: delta{Content: &text}}))
	}
	fin := "length"
	out.send(mk(choice{Delta: delta{}, FinishReason: &fin}))
	out.send(chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: "bare", Choices: []choice{},
		Usage: &usage{PromptTokens: 1, CompletionTokens: n, TotalTokens: n + 1}})
	if out.err == nil {
		s.Tokens.Add(int64(n)) // before [DONE], which ends the client's wait
	}
	out.raw([]byte("[DONE]"))
}

type finish struct {
	Type string `json:"type"`
}

type meta struct {
	ID               string  `json:"id"`
	FinishReason     *finish `json:"finish_reason"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	E2ELatency       float64 `json:"e2e_latency"`
}

type genEvent struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  meta    `json:"meta_info"`
	Usage     *usage  `json:"usage,omitempty"`
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	n, err := tokensAsked(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	seq := s.Requests.Add(1)
	id := "gen-bare" + strconv.FormatInt(seq, 36)
	start := time.Now()
	out := newSSE(w)
	ids := []int32{0}
	for i := 0; i < n && out.err == nil; i++ {
		ids[0] = int32(256 + i%700)
		ev := genEvent{OutputIDs: ids, MetaInfo: meta{ID: id, PromptTokens: 1, CompletionTokens: i + 1}}
		if i == n-1 {
			ev.MetaInfo.FinishReason = &finish{Type: "length"}
			ev.MetaInfo.E2ELatency = time.Since(start).Seconds()
			ev.Usage = &usage{PromptTokens: 1, CompletionTokens: n, TotalTokens: n + 1}
		}
		out.send(ev)
	}
	if out.err == nil {
		s.Tokens.Add(int64(n)) // before [DONE], which ends the client's wait
	}
	out.raw([]byte("[DONE]"))
}

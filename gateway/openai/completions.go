package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"

	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/tokenapi"
)

type completionRequest struct {
	common
	Prompt         json.RawMessage `json:"prompt"`
	Echo           bool            `json:"echo"`
	Logprobs       *int            `json:"logprobs"`
	Suffix         *string         `json:"suffix"`
	grammarRequest                 // tools.go: response_format, regex, ebnf
}

// prompts accepts a string, an array of strings, an array of token ids,
// or an array of arrays of token ids; an array is a batch (§2).
func (s *Server) prompts(raw json.RawMessage) (texts []string, ids [][]int32, e *apiError) {
	raw = bytes.TrimSpace(raw)
	bad := badRequest("prompt", "prompt must be a string, an array of strings, or token ids")
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, badRequest("prompt", "prompt is required")
	}
	// Unmarshal fills slices partially on a type error, so each attempt
	// decodes into a fresh variable and only a clean decode counts.
	var many []string
	var batch [][]int32
	isText := true
	if one := ""; json.Unmarshal(raw, &one) == nil {
		many = []string{one}
	} else if m := []string(nil); json.Unmarshal(raw, &m) == nil {
		many = m
	} else if toks := []int32(nil); json.Unmarshal(raw, &toks) == nil {
		batch, isText = [][]int32{toks}, false
	} else if b := [][]int32(nil); json.Unmarshal(raw, &b) == nil {
		batch, isText = b, false
	} else {
		return nil, nil, bad
	}
	if isText {
		for _, t := range many {
			if e := s.checkTextLen(t, "prompt"); e != nil {
				return nil, nil, e
			}
			enc, err := s.promptCache.Encode(t, true)
			if err != nil {
				return nil, nil, errorf(http.StatusInternalServerError, "tokenization_failed", "", err.Error())
			}
			texts = append(texts, t)
			ids = append(ids, enc)
		}
	} else {
		vocab := int32(s.tok.VocabSize())
		for _, b := range batch {
			for _, id := range b {
				if id < 0 || id >= vocab {
					return nil, nil, badRequest("prompt", fmt.Sprintf("token id %d out of range", id))
				}
			}
			texts = append(texts, s.tok.Decode(b, false))
			ids = append(ids, b)
		}
	}
	if len(ids) == 0 {
		return nil, nil, badRequest("prompt", "prompt must not be empty")
	}
	for _, p := range ids {
		if len(p) == 0 {
			return nil, nil, badRequest("prompt", "prompt must not be empty")
		}
	}
	return texts, ids, nil
}

type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func (s *Server) completionLogprobs(lps []tokenLogprob, top, offset int) *completionLogprobs {
	out := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, lp := range lps {
		t, _ := s.tokenText(lp.id)
		out.Tokens = append(out.Tokens, t)
		out.TokenLogprobs = append(out.TokenLogprobs, jsonLogprob(lp.logprob))
		switch {
		case top < 1 || math.IsNaN(lp.logprob):
			out.TopLogprobs = append(out.TopLogprobs, nil)
		default:
			// The top alternatives and the sampled token, so up to
			// logprobs+1 entries (as OpenAI's legacy API). An echoed
			// prompt token has no alternatives: only itself.
			m := map[string]float64{t: lp.logprob}
			for _, alt := range lp.top[:min(top, len(lp.top))] {
				at, _ := s.tokenText(alt.ID)
				if _, dup := m[at]; !dup || alt.ID == lp.id {
					m[at] = alt.Logprob
				}
			}
			out.TopLogprobs = append(out.TopLogprobs, m)
		}
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(t)
	}
	return out
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	MatchedStop  any                 `json:"matched_stop,omitempty"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.MaxTokens == nil && req.MaxCompletionTokens == nil {
		// The legacy completions API defaults to 16 tokens (OpenAI, vLLM).
		v := 16
		req.MaxTokens = &v
	}
	p, e := s.plan(&req.common)
	if e != nil {
		writeError(w, e)
		return
	}
	p.routingKey = r.Header.Get(tokenapi.RoutingKeyHeader)
	if e := req.grammarRequest.apply(p); e != nil {
		writeError(w, e)
		return
	}
	if req.Suffix != nil && *req.Suffix != "" {
		writeError(w, badRequest("suffix", "suffix is not supported"))
		return
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > maxCompletionLogprobs {
			writeError(w, badRequest("logprobs", fmt.Sprintf("logprobs must be between 0 and %d, got %d", maxCompletionLogprobs, *req.Logprobs)))
			return
		}
		p.logprobs, p.topLogprobs = true, *req.Logprobs
	}
	texts, prompts, e := s.prompts(req.Prompt)
	if e != nil {
		writeError(w, e)
		return
	}
	reqtime.Mark(r.Context(), reqtime.Tokenized)
	total := len(prompts) * p.n
	if total > 4*s.opts.MaxN {
		writeError(w, badRequest("prompt", fmt.Sprintf("prompts × n = %d exceeds %d", total, 4*s.opts.MaxN)))
		return
	}
	for _, ids := range prompts {
		if e := s.checkContext(len(ids), p, "prompt"); e != nil {
			writeError(w, e)
			return
		}
	}
	id := newID("cmpl-")
	reqs := make([]tokenapi.Request, 0, total)
	idx := make([]int, 0, total)
	for j, ids := range prompts {
		for i := 0; i < p.n; i++ {
			r := p.request(fmt.Sprintf("%s-%d", id, j), ids, i)
			if req.Echo && p.logprobs {
				r.LogprobStartLen = 0 // echo: the prompt's logprobs too (from the prefill)
			}
			reqs = append(reqs, r)
			idx = append(idx, j*p.n+i)
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	created := s.opts.Now().Unix()
	promptOf := func(index int) int { return index / p.n }
	echo := func(index int) string {
		if req.Echo {
			return texts[promptOf(index)]
		}
		return ""
	}
	if p.stream && total == 1 {
		s.streamOneCompletion(ctx, w, cancel, p, id, created, reqs[0], echo, promptOf)
		return
	}
	pieces := s.runAll(ctx, p, reqs, idx)
	if p.stream {
		s.streamCompletions(w, cancel, p, id, created, total, pieces, echo, promptOf)
		return
	}
	states, u, aerr := collect(cancel, pieces, total, promptOf)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	resp := completionResponse{ID: id, Object: "text_completion", Created: created, Model: p.model, Usage: &u}
	for i, st := range states {
		f := st.finish
		c := completionChoice{Index: i, Text: echo(i) + st.text, FinishReason: &f, MatchedStop: st.matched}
		if p.logprobs {
			c.Logprobs = s.completionLogprobs(st.logprobs, p.topLogprobs, 0)
		}
		resp.Choices = append(resp.Choices, c)
	}
	writeJSON(w, resp)
}

// completionStream writes one completions stream: a piece at a time,
// from the handler goroutine only.
type completionStream struct {
	s        *Server
	out      *sse
	enc      *completionChunkEnc
	cancel   context.CancelFunc
	p        *plan
	id       string
	created  int64
	started  []bool
	finished []bool // the choices whose finish went out
	offsets  []int
	echo     func(int) string
	promptOf func(int) int
	u        Usage
	ps       prompts
	failed   bool
}

func (s *Server) newCompletionStream(w http.ResponseWriter, cancel context.CancelFunc, p *plan, id string, created int64, total int, echo func(int) string, promptOf func(int) int) *completionStream {
	return &completionStream{s: s, out: newSSE(w), enc: newCompletionChunkEnc(id, created, p.model), cancel: cancel, p: p, id: id, created: created,
		started: make([]bool, total), finished: make([]bool, total), offsets: make([]int, total), echo: echo, promptOf: promptOf}
}

// streamCompletions writes the stream of the pieces of several samples
// (n > 1, or several prompts), each from its own runner.
func (s *Server) streamCompletions(w http.ResponseWriter, cancel context.CancelFunc, p *plan, id string, created int64, total int, pieces <-chan piece, echo func(int) string, promptOf func(int) int) {
	cs := s.newCompletionStream(w, cancel, p, id, created, total, echo, promptOf)
	for pc := range pieces {
		cs.take(pc, len(pieces) > 0)
	}
	cs.end()
}

// streamOneCompletion writes the stream of one sample read in the
// handler's own goroutine, as chat's streamOne: one wake-up per output,
// no goroutine between (docs/architecture.md §14).
func (s *Server) streamOneCompletion(ctx context.Context, w http.ResponseWriter, cancel context.CancelFunc, p *plan, id string, created int64, req tokenapi.Request, echo func(int) string, promptOf func(int) int) {
	cs := s.newCompletionStream(w, cancel, p, id, created, 1, echo, promptOf)
	emit := func(pc piece) bool {
		cs.take(pc, pc.more)
		return !cs.failed && !cs.out.failed
	}
	func() {
		defer s.recoverRunner(0, emit) // the runner's boundary, as in runAll
		s.runSample(ctx, p, req, 0, emit)
	}()
	cs.end()
}

// take writes one piece; more: another is already waiting, so the write
// is left unflushed (one flush covers them all).
func (cs *completionStream) take(pc piece, more bool) {
	if cs.failed {
		return
	}
	out, enc, p := cs.out, cs.enc, cs.p
	if pc.err != nil {
		cs.failed = true
		cs.cancel()
		out.failChoices(pc.err, cs.finished, enc.finish)
		return
	}
	if pc.flush {
		if !more {
			out.flush()
		}
		return
	}
	text := pc.text
	if !cs.started[pc.index] {
		cs.started[pc.index] = true
		text = cs.echo(pc.index) + text
	}
	// As in chat: encoded without json.Marshal, flushed once for every
	// piece already waiting.
	if text != "" || len(pc.logprobs) > 0 {
		if p.logprobs {
			c := completionChoice{Index: pc.index, Text: text}
			c.Logprobs = cs.s.completionLogprobs(pc.logprobs, p.topLogprobs, cs.offsets[pc.index])
			out.send(completionResponse{ID: cs.id, Object: "text_completion", Created: cs.created, Model: p.model, Choices: []completionChoice{c}})
		} else {
			out.write(enc.text(pc.index, text))
		}
		cs.offsets[pc.index] += len(text)
	}
	if pc.finish != "" {
		cs.finished[pc.index] = true
		out.write(enc.finish(pc.index, pc.finish, pc.matched))
		cs.u.CompletionTokens += pc.completion
		cs.ps.add(cs.promptOf(pc.index), pc)
	}
	if !more {
		out.flush()
	}
	if out.failed {
		cs.cancel()
	}
}

// end closes the stream: the usage chunk when asked, then [DONE].
func (cs *completionStream) end() {
	out, p := cs.out, cs.p
	if out.failed && !out.started {
		return
	}
	if p.includeUsage && !cs.failed {
		u := cs.u
		cs.ps.into(&u)
		out.send(completionResponse{ID: cs.id, Object: "text_completion", Created: cs.created, Model: p.model, Choices: []completionChoice{}, Usage: &u})
	}
	out.done()
}

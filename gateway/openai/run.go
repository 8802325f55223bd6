package openai

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"unsafe"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
)

type tokenLogprob struct {
	id      int32
	logprob float64
	top     []tokenapi.TopLogprob // its most likely alternatives, when asked
}

// piece is one increment of one choice, sent from its runner to the
// handler goroutine, which alone writes the response.
type piece struct {
	index      int
	text       string
	logprobs   []tokenLogprob
	finish     string // set on the last piece of a choice
	matched    any    // stop string, stop token id, or nil
	prompt     int    // prompt tokens (last piece)
	completion int    // completion tokens (last piece)
	cached     int    // prompt tokens found in the prefix cache (last piece)
	err        *apiError
	// more: the engine already has the next output (tokenapi.Streamer's
	// Buffered), so a writer reading in the runner's goroutine leaves this
	// piece unflushed; flush alone marks the point where a piece left so
	// has nothing after it (the output that followed made no text).
	more, flush bool
}

// toChannel is a runner's emit over a channel to the handler goroutine,
// which has its own rule for flushing (nothing more queued): flush-only
// pieces are not sent.
func toChannel(ctx context.Context, out chan<- piece) func(piece) bool {
	return func(pc piece) bool {
		if pc.flush {
			return true
		}
		select {
		case out <- pc:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// runAll starts one runner per request; the channel closes when all are done.
func (s *Server) runAll(ctx context.Context, p *plan, reqs []tokenapi.Request, indexes []int) <-chan piece {
	out := make(chan piece, 16)
	emit := toChannel(ctx, out)
	if len(reqs) == 1 {
		// n = 1: the runner closes the channel itself, no closer goroutine
		// (with the gateway's run reading both legs in one select, the
		// request costs the handler, this runner and the dispatch's run).
		go func() {
			defer close(out)
			defer s.recoverRunner(indexes[0], emit)
			s.runSample(ctx, p, reqs[0], indexes[0], emit)
		}()
		return out
	}
	var wg sync.WaitGroup
	for k := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A runner is a per-request goroutine nothing above recovers: a
			// panic in it (the engine's dispatch, the stop decoder) must
			// fail this one choice with a 500, not end the daemon.
			defer s.recoverRunner(indexes[k], emit)
			s.runSample(ctx, p, reqs[k], indexes[k], emit)
		}()
	}
	go func() { wg.Wait(); close(out) }()
	return out
}

// reportPanic hands a recovered panic to the engine (the gateway counts
// and reports it with the others).
func (s *Server) reportPanic(where string, v any) { s.engine.ReportPanic(where, v, debug.Stack()) }

func (s *Server) recoverRunner(index int, emit func(piece) bool) {
	v := recover()
	if v == nil {
		return
	}
	s.reportPanic("openai runner", v)
	emit(piece{index: index, err: errorf(http.StatusInternalServerError, "internal_error", "", fmt.Sprintf("internal error while generating (the gateway recovered: %v)", v))})
}

// runSample drives one generation through the stop decoder, reading the
// engine's stream in this goroutine, and hands each piece to emit (false:
// nobody listens any more). A local stop (stop string, or a stop/EOS
// token the engine did not finish on) ends the generation so the engine
// aborts it instead of running on.
func (s *Server) runSample(parent context.Context, p *plan, req tokenapi.Request, index int, emit func(piece) bool) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	send := emit
	st, err := s.engine.Stream(ctx, req)
	if err != nil {
		send(piece{index: index, err: front.AsOr(err, http.StatusServiceUnavailable, "worker_failed_to_start", "start generation: ")})
		return
	}
	defer st.Close() // a generation still running is aborted
	sd := s.tok.NewStopDecoder(tokenizer.StopConfig{
		Strings:      p.stops,
		TokenIDs:     req.Sampling.StopTokenIDs,
		IgnoreEOS:    req.Sampling.IgnoreEOS,
		IncludeStop:  p.includeStop,
		SkipSpecial:  p.skipSpecial,
		TokenStrings: p.stopByID,
		MinTokens:    req.Sampling.MinNewTokens,
	})
	prompt, completion, cached := len(req.InputIDs), 0, 0
	owed := false     // a piece went out with more set, and nothing after it yet
	textSent := false // a piece with text or logprobs went out
	var tj textJoin
	defer tj.release()
	for {
		ev, ok := st.Next()
		if !ok {
			if parent.Err() != nil {
				return
			}
			send(piece{index: index, err: errorf(http.StatusBadGateway, "worker_stream_failed", "", "engine stream ended without a finish")})
			return
		}
		if ev.Err != nil {
			send(piece{index: index, err: front.AsOr(ev.Err, http.StatusBadGateway, "worker_stream_failed", "generation failed: ")})
			return
		}
		if ev.PromptTokens > 0 {
			prompt = ev.PromptTokens
		}
		cached = ev.CachedTokens
		if err := tokenapi.CheckTopLogprobs(req, ev); err != nil {
			send(piece{index: index, err: errorf(http.StatusBadRequest, "top_logprobs_unsupported", "top_logprobs", err.Error())})
			return
		}
		pc := piece{index: index}
		if p.logprobs && ev.PromptLogprobs != nil {
			pc.logprobs = promptTokenLogprobs(req, ev.PromptLogprobs) // echo: prompt first
		}
		stopped := false
		tj.reset()
		for i, id := range ev.TokenIDs {
			completion++
			if p.logprobs {
				lp := 0.0
				if i < len(ev.Logprobs) {
					lp = ev.Logprobs[i]
				}
				t := tokenLogprob{id: id, logprob: lp}
				if i < len(ev.TopLogprobs) {
					t.top = ev.TopLogprobs[i]
				}
				pc.logprobs = append(pc.logprobs, t)
			}
			r := sd.Step(id)
			tj.add(r.Text)
			if r.Stopped {
				stopped = true
				pc.finish = tokenapi.FinishStop
				pc.matched = p.matchedValue(r.Matched, r.MatchedToken)
				break
			}
		}
		pc.text = tj.text()
		if !stopped && ev.Finish != nil {
			switch ev.Finish.Reason {
			case tokenapi.FinishStop, tokenapi.FinishLength:
				pc.text += sd.Finish()
				pc.finish = ev.Finish.Reason
				if m := ev.Finish.MatchedToken; m != nil && ev.Finish.Reason == tokenapi.FinishStop {
					pc.matched = p.matchedValue("", *m)
				}
			default:
				msg := ev.Finish.Message
				if msg == "" {
					msg = "generation aborted by the engine"
				}
				send(piece{index: index, err: errorf(http.StatusBadGateway, "worker_aborted", "", msg)})
				return
			}
		}
		if pc.finish != "" {
			pc.prompt, pc.completion, pc.cached = prompt, completion, min(cached, prompt)
			send(pc)
			return
		}
		if pc.text != "" || len(pc.logprobs) > 0 {
			// The first text goes out at once, whatever is queued behind
			// it: the time to the first byte is what a client waits on;
			// later outputs fold into one flush.
			pc.more = textSent && st.Buffered()
			textSent = true
			owed = pc.more
			if !send(pc) {
				return
			}
		} else if owed && !st.Buffered() {
			owed = false
			if !send(piece{index: index, flush: true}) {
				return
			}
		}
	}
}

// textJoin joins the texts of one output's tokens: one token's text is
// the detokenizer's own string (no copy); several are appended to a
// joinArena's block and handed out as a string over the bytes they took
// there, so a multi-token output costs no allocation of its own either
// (the block's, once per joinBlock bytes of joined text, shared by the
// requests that take the arena one after another).
type textJoin struct {
	first string
	parts int
	a     *joinArena // taken from joinArenas by the first join; release gives it back
	lo    int        // where the text being joined starts in a.block
}

// joinBlock is how many bytes of joined text one block holds, as the
// lane's token arena (gateway/lane/sink.go) holds arenaChunk token ids.
const joinBlock = 8 << 10

// joinArena is an append-only block of joined texts. Bytes below the
// owner's lo were handed out as strings and are never written again:
// joins only append past them, and a full block is replaced by a new one
// (the old one lives on while a string handed out from it does). One
// runner owns an arena at a time (joinArenas hands it over).
type joinArena struct{ block []byte }

// joinArenas passes arenas from finished runners to new ones, so a block
// fills across requests instead of one being started per request.
var joinArenas = sync.Pool{New: func() any { return new(joinArena) }}

// takeArena gives j an arena from joinArenas; release gives it back.
// The join under way starts at the block's end.
func (j *textJoin) takeArena() {
	j.a = joinArenas.Get().(*joinArena)
	j.lo = len(j.a.block)
}

// release returns j's arena to joinArenas, without the bytes of a join
// left unfinished (never handed out). j must not be used after.
func (j *textJoin) release() {
	if j.a == nil {
		return
	}
	j.a.block = j.a.block[:j.lo]
	joinArenas.Put(j.a)
	j.a = nil
}

// reset starts the next output. Bytes of a join not handed out (text was
// not called) are dropped: only they lie past lo.
func (j *textJoin) reset() {
	j.first, j.parts = "", 0
	if j.a != nil {
		j.a.block = j.a.block[:j.lo]
	}
}

func (j *textJoin) add(s string) {
	switch {
	case s == "":
	case j.parts == 0:
		j.first, j.parts = s, 1
	case j.parts == 1:
		j.appendText(j.first)
		j.appendText(s)
		j.parts = 2
	default:
		j.appendText(s)
	}
}

// appendText appends s to the join under way, starting a new block when
// the current one has no room: the join so far (never handed out) moves
// to it, the old block's handed-out bytes stay where they are.
func (j *textJoin) appendText(s string) {
	if j.a == nil {
		j.takeArena() // the first join starts here
	}
	if b := j.a.block; cap(b)-len(b) < len(s) {
		cur := b[j.lo:]
		j.a.block, j.lo = append(make([]byte, 0, max(joinBlock, 2*(len(cur)+len(s)))), cur...), 0
	}
	j.a.block = append(j.a.block, s...)
}

func (j *textJoin) text() string {
	if j.parts <= 1 {
		return j.first
	}
	b := j.a.block[j.lo:]
	j.lo = len(j.a.block)
	// The string aliases the block's bytes [lo, len) instead of copying
	// them. Safe because nothing writes those bytes again: appendText only
	// appends past len (within the capacity, or in a new block), reset and
	// release cut the block back to lo, which now lies past them, and an
	// arena has one owner at a time. The string's pointer keeps the block
	// alive for as long as the string is. len(b) > 0: two non-empty parts.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// matchedValue is what matched_stop reports: the stop string the client
// sent, a stop token id it asked for, or nothing for EOS (as vLLM/SMG).
func (p *plan) matchedValue(str string, id int32) any {
	if str != "" {
		return str
	}
	if s, ok := p.stopByID[id]; ok {
		return s
	}
	if id >= 0 && slices.Contains(p.sampling.StopTokenIDs, id) {
		return id
	}
	return nil
}

// Usage is a reply's token counts (OpenAI's usage object);
// prompt_tokens_details.cached_tokens is always present (0 when nothing
// was cached); a chat reply's also has completion_tokens_details.
type Usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     PromptTokensDetails      `json:"prompt_tokens_details"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// CompletionTokensDetails is what the completion's tokens were spent on
// (OpenAI's completion_tokens_details): reasoning_tokens, the tokens of
// the think block the reasoning parser split off (reasoningTokens).
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// reasoningTokens counts the tokens of the reasoning text a reply's
// parser split off: the text tokenized again (the engine's ids are not
// kept per delta; the count is the same but for a token that straddles
// the think block's edge), never more than the completion's tokens.
func (s *Server) reasoningTokens(reasoning string, completion int) int {
	if reasoning == "" || s.tok == nil {
		return 0
	}
	ids, err := s.tok.Encode(reasoning, false)
	if err != nil {
		return 0
	}
	return min(len(ids), completion)
}

// PromptTokensDetails is how much of the prompt the engines' prefix
// cache held.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// prompts counts a response's prompt tokens once per prompt (n samples of
// one prompt share it) and, per prompt, the cached tokens every one of its
// samples found (the least of theirs: cached never exceeds the prompt, and
// finish order does not change it).
type prompts struct {
	prompt, cached map[int]int
}

// add records one finished sample of prompt group g.
func (c *prompts) add(g int, pc piece) {
	if c.prompt == nil {
		c.prompt, c.cached = map[int]int{}, map[int]int{}
	}
	if _, seen := c.prompt[g]; !seen {
		c.prompt[g], c.cached[g] = pc.prompt, pc.cached
		return
	}
	c.cached[g] = min(c.cached[g], pc.cached)
}

// into completes u, whose completion tokens are counted: its prompt and
// cached counts, and the total.
func (c *prompts) into(u *Usage) {
	u.PromptTokens, u.PromptTokensDetails.CachedTokens = 0, 0
	for g, n := range c.prompt {
		u.PromptTokens += n
		u.PromptTokensDetails.CachedTokens += c.cached[g]
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
}

// choiceState accumulates one choice for non-streaming responses.
type choiceState struct {
	text     string
	logprobs []tokenLogprob
	finish   string
	matched  any
}

// collect gathers every piece; the first error cancels the rest.
func collect(cancel context.CancelFunc, pieces <-chan piece, n int, promptOf func(index int) int) ([]choiceState, Usage, *apiError) {
	states := make([]choiceState, n)
	var u Usage
	var firstErr *apiError
	var ps prompts
	for pc := range pieces {
		if pc.err != nil {
			if firstErr == nil {
				firstErr = pc.err
				cancel()
			}
			continue
		}
		st := &states[pc.index]
		st.text += pc.text
		st.logprobs = append(st.logprobs, pc.logprobs...)
		if pc.finish != "" {
			st.finish, st.matched = pc.finish, pc.matched
			u.CompletionTokens += pc.completion
			ps.add(promptOf(pc.index), pc)
		}
	}
	ps.into(&u)
	return states, u, firstErr
}

func (s *Server) tokenText(id int32) (string, []int) {
	b := s.tok.DecodeBytes(nil, []int32{id}, false)
	ints := make([]int, len(b))
	for i, c := range b {
		ints[i] = int(c)
	}
	return s.tok.Decode([]int32{id}, false), ints
}

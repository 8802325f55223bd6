// Package generate serves SGLang's token-level /generate over a
// tokenapi.Engine: input_ids (or text the model's tokenizer encodes) in,
// output ids out, as one JSON answer or SSE events (docs/protocol.md
// §11). It is mounted on the gateway like the OpenAI front end
// (gateway/openai), behind the same front door (gateway/front: API key,
// body limits, request id, admission, the panic boundary).
package generate

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// Options configures a Server.
type Options struct {
	// Encode tokenizes the text field with the model's tokenizer (SGLang
	// takes text or input_ids); nil: text is refused with a 400.
	Encode func(text string) ([]int32, error)
}

// Server is the /generate front end. Safe for concurrent use.
type Server struct {
	engine tokenapi.Engine
	opts   Options
}

// New builds a Server; mount it with Register.
func New(engine tokenapi.Engine, opts Options) *Server { return &Server{engine: engine, opts: opts} }

// Register mounts POST /generate on mux.
func (s *Server) Register(mux *http.ServeMux) { mux.HandleFunc("POST /generate", s.handle) }

// handle serves SGLang's token-level /generate: a JSON answer, or
// SSE events (incremental output_ids) ending with data: [DONE].
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	var body generateBody
	if e := front.Decode(r, &body, generateFields); e != nil {
		front.WriteError(w, e)
		return
	}
	req, err := body.toRequest(s.opts.Encode, s.engine.MaxModelLen())
	if err != nil {
		front.WriteError(w, err)
		return
	}
	reqtime.Mark(r.Context(), reqtime.Tokenized)
	if req.RID == "" {
		req.RID = "gen-" + strconv.FormatUint(rand.Uint64(), 36)
	}
	req.RoutingKey = r.Header.Get(tokenapi.RoutingKeyHeader)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	start := time.Now()
	// Read in this goroutine: the dispatch's flight runs inside Next, so
	// a token goes from the lane's reader to this writer with one wake-up
	// (docs/architecture.md §14).
	st, err := s.engine.Stream(ctx, req)
	if err != nil {
		front.WriteError(w, err)
		return
	}
	defer st.Close()
	id := req.RID
	if body.Stream {
		stream(w, st, id, start, cancel, req)
		return
	}
	resp := Response{OutputIDs: []int32{}, MetaInfo: Meta{ID: id}}
	var lps []float64
	for {
		ev, ok := st.Next()
		if !ok {
			break
		}
		if ev.Err != nil {
			cancel()
			if r.Context().Err() != nil {
				return // the client left: nobody reads an answer (logged 499)
			}
			front.WriteError(w, streamError(ev.Err))
			return
		}
		if err := tokenapi.CheckTopLogprobs(req, ev); err != nil {
			cancel()
			front.WriteError(w, topLogprobsError(err))
			return
		}
		resp.OutputIDs = append(resp.OutputIDs, ev.TokenIDs...)
		lps = append(lps, ev.Logprobs...)
		resp.MetaInfo.OutputTopLogprobs = append(resp.MetaInfo.OutputTopLogprobs, topTriples(ev.TopLogprobs)...)
		if ev.PromptLogprobs != nil {
			resp.MetaInfo.InputLogprobs = logprobPairs(promptIDs(req), ev.PromptLogprobs)
		}
		resp.MetaInfo.PromptTokens = ev.PromptTokens
		resp.MetaInfo.CompletionTokens = ev.OutputTokens
		resp.MetaInfo.CachedTokens = ev.CachedTokens
		if ev.Finish != nil {
			resp.MetaInfo.FinishReason = &Finish{Type: ev.Finish.Reason, Message: ev.Finish.Message}
		}
	}
	if resp.MetaInfo.FinishReason == nil {
		if r.Context().Err() != nil {
			return // the client left, which ended the generation (logged 499)
		}
		front.WriteError(w, &front.Error{Status: http.StatusBadGateway, Code: "worker_stream_failed", Message: "generation ended without a finish"})
		return
	}
	resp.MetaInfo.E2ELatency = time.Since(start).Seconds()
	resp.MetaInfo.OutputLogprobs = logprobPairs(resp.OutputIDs, lps)
	resp.Usage = &Usage{resp.MetaInfo.PromptTokens, resp.MetaInfo.CompletionTokens, resp.MetaInfo.PromptTokens + resp.MetaInfo.CompletionTokens}
	front.WriteJSON(w, http.StatusOK, resp)
}

func stream(w http.ResponseWriter, st tokenapi.Streamer, id string, start time.Time, cancel func(), req tokenapi.Request) {
	prompt := promptIDs(req)
	out := front.NewSSE(w)
	out.Start()
	enc := newGenerateChunkEnc(id)
	ok := true
	flushed := false // an event with tokens was flushed
	for ok {
		ev, more := st.Next()
		if !more {
			break
		}
		if ev.Err != nil {
			e := streamError(ev.Err)
			if e.Cut() && out.Started() {
				// tsd's stop cut the stream: its finish, then the error.
				out.Send(generateChunk(tokenapi.Event{PromptTokens: len(prompt), Finish: &tokenapi.Finish{Reason: tokenapi.FinishAbort, Message: e.Message}}, id, nil, time.Since(start).Seconds()))
			}
			out.Fail(e)
			if ok = !out.Failed(); !ok {
				cancel()
			}
			continue // the error is the last event
		}
		if err := tokenapi.CheckTopLogprobs(req, ev); err != nil {
			out.Fail(topLogprobsError(err))
			ok = !out.Failed()
			cancel()
			break // the handler's Close aborts the legs
		}
		var e2e float64
		if ev.Finish != nil {
			e2e = time.Since(start).Seconds()
		}
		if len(ev.Logprobs) == 0 && len(ev.PromptLogprobs) == 0 && len(ev.TopLogprobs) == 0 {
			// The token path: every token of one wire output is one event
			// and one write, flushed once no further output is already
			// waiting, so outputs that arrived together cost one flush.
			// The last event (Finish: none follows, tokenapi.Event) goes out
			// with data: [DONE]'s flush.
			if event, encoded := enc.chunk(ev.TokenIDs, ev.PromptTokens, ev.OutputTokens, ev.CachedTokens, ev.Finish, e2e); encoded {
				ok = out.Write(event)
			} else {
				ok = false
			}
			// The first tokens go out at once, whatever is queued behind
			// them: the time to the first byte is what a client waits on.
			if ok && ev.Finish == nil && (!flushed || !st.Buffered()) {
				out.Flush()
				flushed = flushed || len(ev.TokenIDs) > 0
			}
		} else {
			ok = out.Send(generateChunk(ev, id, prompt, e2e))
		}
		if !ok {
			cancel() // client gone: abort both legs now
		}
	}
	if ok {
		out.Done()
	}
}

// streamError is how a generation's failure is answered: 502
// worker_stream_failed, or the 503 shutdown of a request tsd's stop cut
// at the end of its drain.
func streamError(err error) *front.Error {
	if e := front.As(err); e.Cut() {
		return e
	}
	return front.Errorf(http.StatusBadGateway, "worker_stream_failed", "", "%w", err)
}

// generateChunk is a stream event as a struct for json.Marshal: the shape
// of the rare events (logprobs) generateChunkEnc does not write.
func generateChunk(ev tokenapi.Event, id string, prompt []int32, e2e float64) Response {
	chunk := Response{OutputIDs: ev.TokenIDs, MetaInfo: Meta{ID: id, PromptTokens: ev.PromptTokens, CompletionTokens: ev.OutputTokens, CachedTokens: ev.CachedTokens,
		OutputLogprobs: logprobPairs(ev.TokenIDs, ev.Logprobs), InputLogprobs: logprobPairs(prompt, ev.PromptLogprobs),
		OutputTopLogprobs: topTriples(ev.TopLogprobs)}}
	if chunk.OutputIDs == nil {
		chunk.OutputIDs = []int32{}
	}
	if ev.Finish != nil {
		chunk.MetaInfo.FinishReason = &Finish{Type: ev.Finish.Reason, Message: ev.Finish.Message}
		chunk.MetaInfo.E2ELatency = e2e
		chunk.Usage = &Usage{ev.PromptTokens, ev.OutputTokens, ev.PromptTokens + ev.OutputTokens}
	}
	return chunk
}

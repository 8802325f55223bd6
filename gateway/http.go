package gateway

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/traffic"
)

// RequestError is a request the gateway refuses or fails: the front
// door's one error type (Status, Code as SMG's X-SMG-Error-Code, Param
// naming the offending field), rendered by front.WriteError.
type RequestError = front.Error

func badRequest(param, format string, args ...any) *RequestError {
	return front.BadRequest(param, format, args...)
}

func (g *Gateway) routes() {
	g.mux.Handle("POST /generate", g.door.Wrap(front.Route{Label: "/generate", Generate: true}, http.HandlerFunc(g.handleGenerate)))
	g.mux.Handle("GET /health", g.door.Wrap(front.Route{Label: "/health", Public: true}, http.HandlerFunc(handleHealth)))
	g.mux.Handle("GET /liveness", g.door.Wrap(front.Route{Label: "/liveness", Public: true}, http.HandlerFunc(handleHealth)))
	g.mux.Handle("GET /readiness", g.door.Wrap(front.Route{Label: "/readiness", Public: true}, http.HandlerFunc(g.handleReadiness)))
	// The model list and the metrics (role names, request rates, GPU
	// load) need the key like serving routes; probes stay open, and
	// gateway.metrics_public opens /metrics for a scraper without it.
	g.mux.Handle("GET /v1/models", g.door.Wrap(front.Route{Label: "/v1/models"}, http.HandlerFunc(g.handleModels)))
	g.mux.Handle("GET /metrics", g.door.Wrap(front.Route{Label: "/metrics", Metrics: true}, promhttp.HandlerFor(g.opts.Registry, promhttp.HandlerOpts{})))
}

// newDoor is the gateway's front door (gateway/front): one API-key check,
// body limits, request id, CORS, admission and HTTP metrics for its own
// routes and a mounted front end's alike.
// gateway.max_concurrent's waiters count as queued requests, like those
// waiting for a routable worker.
func (g *Gateway) newDoor(apiKey string) *front.Door {
	return front.New(front.Config{
		APIKey:         apiKey,
		CORSOrigins:    g.plan.Gateway.CORSOrigins,
		MetricsPublic:  g.plan.Gateway.MetricsPublic,
		Body:           &front.BodyLimits{Max: g.opts.MaxBodyBytes, ReadTimeout: g.opts.BodyReadTimeout, Budget: g.opts.MaxInflightBodies, MaxModelLen: g.bodyModelLen},
		Admit:          front.NewLimiter(g.plan.Gateway.MaxConcurrent, g.opts.QueueTimeout, func(d int) { g.queuedNow.Add(int64(d)) }),
		RequestTimeout: g.opts.RequestTimeout + g.opts.BodyReadTimeout,
		Observe: func(method, route string, status int, d time.Duration) {
			g.metrics.httpRequests.WithLabelValues(method, route).Inc()
			g.metrics.httpResponses.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
			g.metrics.httpDuration.WithLabelValues(method, route).Observe(d.Seconds())
		},
		OnPanic: g.ReportPanic,
		// issue 19: the request's one record in the traffic account; the
		// dispatch finds it in the context (gateway/traffic).
		Begin: func(r *http.Request) (*http.Request, func(int, string)) {
			rec := g.metrics.traffic.Begin(r.Method, r.URL.Path)
			rec.ID(front.RequestID(r.Context()))
			return r.WithContext(traffic.NewContext(r.Context(), rec)), func(status int, code string) {
				rec.Reason(code)
				rec.End(status)
			}
		},
	})
}

// handler is what the HTTP server runs: the gateway's routes, then a
// mounted front end's, then a 404/405 in the one error shape.
func (g *Gateway) handler(sub *http.ServeMux) http.Handler {
	muxes := []front.Mounted{{Mux: g.mux}}
	if sub != nil {
		muxes = append(muxes, front.Mounted{Mux: sub, Handler: g.door.Wrap(front.Route{Admit: front.GeneratePath}, sub)})
	}
	return front.Dispatch(func(h http.Handler) http.Handler {
		return g.door.Wrap(front.Route{Label: "unmatched", Public: true}, h)
	}, muxes...)
}

// WriteError writes the one error shape (gateway/front).
func WriteError(w http.ResponseWriter, err error) { front.WriteError(w, err) }

func writeJSON(w http.ResponseWriter, status int, v any) { front.WriteJSON(w, status, v) }

func handleHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "OK")
}

func (g *Gateway) handleReadiness(w http.ResponseWriter, _ *http.Request) {
	p, d, healthy, total := g.health()
	if p > 0 && d > 0 {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "healthy_workers": healthy, "total_workers": total})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "insufficient healthy workers",
		"healthy_workers": healthy, "total_workers": total})
}

func (g *Gateway) modelName() string {
	if g.plan.ServedModelName != "" {
		return g.plan.ServedModelName
	}
	return g.plan.Model
}

func (g *Gateway) handleModels(w http.ResponseWriter, _ *http.Request) {
	_, _, healthy, _ := g.health()
	if healthy == 0 {
		WriteError(w, &RequestError{Status: http.StatusServiceUnavailable, Code: "no_models", Message: "No models available"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": g.modelName(), "object": "model", "created": 0, "owned_by": "tsd", "root": g.plan.Model}}})
}

// generateBody is SGLang's native /generate request: input_ids, or text the
// gateway tokenizes (Options.Encode).
type generateBody struct {
	Text            *string         `json:"text"`
	InputIDs        []int32         `json:"input_ids"`
	SamplingParams  *samplingBody   `json:"sampling_params"`
	Stream          bool            `json:"stream"`
	ReturnLogprob   bool            `json:"return_logprob"`
	LogprobStartLen *int            `json:"logprob_start_len"`
	TopLogprobsNum  int             `json:"top_logprobs_num"`
	RID             string          `json:"rid"`
	ImageData       json.RawMessage `json:"image_data"`
}

type samplingBody struct {
	MaxNewTokens      *int            `json:"max_new_tokens"`
	MinNewTokens      int             `json:"min_new_tokens"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              float64         `json:"min_p"`
	FrequencyPenalty  float64         `json:"frequency_penalty"`
	PresencePenalty   float64         `json:"presence_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	StopTokenIDs      []int32         `json:"stop_token_ids"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	Seed              *int64          `json:"seed"`
	N                 *int            `json:"n"`
	Stop              json.RawMessage `json:"stop"`
}

// generateFields are /generate's fields beyond generateBody's: none are
// ignored, so a field the gateway does not implement is refused by name.
var generateFields = &front.Fields{
	Nested: map[string]*front.Fields{"sampling_params": {
		Refused: map[string]string{
			"json_schema":     "constrained decoding is not wired on /generate yet",
			"regex":           "constrained decoding is not wired on /generate yet",
			"ebnf":            "constrained decoding is not wired on /generate yet",
			"logit_bias":      "logit_bias is not implemented by the gateway",
			"structural_tag":  "structural_tag is not wired on /generate yet",
			"custom_params":   "custom logit processors are not supported",
			"thinking_budget": "thinking_budget is not wired yet",
		},
		// /generate answers token ids, never text: these shape only text.
		Ignored: map[string]string{
			"skip_special_tokens":           "no text is produced",
			"spaces_between_special_tokens": "no text is produced",
			"no_stop_trim":                  "no stop strings on /generate",
		},
	}},
}

// generateName maps a sampling field's engine name to /generate's.
func generateName(field string) string { return "sampling_params." + field }

// toRequest validates the body; encode tokenizes text (nil: no tokenizer
// here) after the byte-level context pre-check against maxModelLen.
func (b *generateBody) toRequest(encode func(string) ([]int32, error), maxModelLen int) (gen.Request, error) {
	switch {
	case len(b.ImageData) > 0 && string(b.ImageData) != "null":
		return gen.Request{}, &RequestError{Status: http.StatusBadRequest, Code: "multimodal_not_supported", Param: "image_data", Message: "/generate takes no images (it has no tokenizer or image preprocessor); send images as image_url parts to /v1/chat/completions"}
	case b.Text != nil && b.InputIDs != nil:
		return gen.Request{}, badRequest("text", "send text or input_ids, not both")
	case b.Text != nil && encode == nil:
		return gen.Request{}, badRequest("text", "text input needs the model's tokenizer, which did not load in this gateway; send input_ids")
	case b.Text == nil && b.InputIDs == nil:
		return gen.Request{}, badRequest("input_ids", "input_ids (or text) is required")
	}
	r := gen.Request{RID: b.RID, InputIDs: b.InputIDs, Stream: b.Stream, ReturnLogprob: b.ReturnLogprob,
		TopLogprobsNum: b.TopLogprobsNum, LogprobStartLen: -1, Sampling: gen.DefaultSampling()}
	if b.LogprobStartLen != nil && b.ReturnLogprob {
		// SGLang: prompt logprobs come with return_logprob only.
		r.LogprobStartLen = *b.LogprobStartLen
	}
	if s := b.SamplingParams; s != nil {
		if len(s.Stop) > 0 && string(s.Stop) != "null" && string(s.Stop) != "[]" && string(s.Stop) != `""` {
			return r, badRequest("sampling_params.stop", "stop strings need a tokenizer; /generate takes stop_token_ids")
		}
		if s.N != nil && *s.N != 1 {
			return r, badRequest("sampling_params.n", "n must be 1 on /generate")
		}
		sp := &r.Sampling
		sp.MaxNewTokens = s.MaxNewTokens
		sp.MinNewTokens = s.MinNewTokens
		if s.Temperature != nil {
			sp.Temperature = *s.Temperature
		}
		if s.TopP != nil {
			sp.TopP = *s.TopP
		}
		if s.TopK != nil {
			sp.TopK = *s.TopK
		}
		if s.RepetitionPenalty != nil {
			sp.RepetitionPenalty = *s.RepetitionPenalty
		}
		sp.MinP = s.MinP
		sp.FrequencyPenalty = s.FrequencyPenalty
		sp.PresencePenalty = s.PresencePenalty
		sp.StopTokenIDs = s.StopTokenIDs
		sp.IgnoreEOS = s.IgnoreEOS
		sp.Seed = s.Seed
		if fe := gen.CheckSampling(r.Sampling, generateName); fe != nil {
			return r, badRequest(fe.Field, "%s", fe.Message)
		}
	}
	if b.Text != nil {
		if maxModelLen > 0 && len(*b.Text) > maxModelLen*MaxBytesPerToken {
			return r, front.Errorf(http.StatusBadRequest, "context_length_exceeded", "text",
				"the text is %d bytes, more than the engines' context length (max_model_len %d tokens) can hold", len(*b.Text), maxModelLen)
		}
		ids, err := encode(*b.Text)
		if err != nil {
			return r, front.Errorf(http.StatusInternalServerError, "tokenization_failed", "text", "tokenize text: %v", err)
		}
		r.InputIDs = ids
	}
	param := "input_ids"
	if b.Text != nil {
		param = "text"
	}
	if e := CheckContext(len(r.InputIDs), r.Sampling.MaxNewTokens, maxModelLen, param, "sampling_params.max_new_tokens"); e != nil {
		return r, e
	}
	return r, nil
}

type finishJSON struct {
	Type    string `json:"type"`
	Message string `json:"message,omitempty"`
}

type metaJSON struct {
	ID               string      `json:"id"`
	FinishReason     *finishJSON `json:"finish_reason"`
	PromptTokens     int         `json:"prompt_tokens"`
	CompletionTokens int         `json:"completion_tokens"`
	CachedTokens     int         `json:"cached_tokens"` // as SGLang: prompt tokens the prefill found cached
	E2ELatency       float64     `json:"e2e_latency"`
	OutputLogprobs   [][2]any    `json:"output_token_logprobs,omitempty"`
	InputLogprobs    [][2]any    `json:"input_token_logprobs,omitempty"`
	// OutputTopLogprobs is SGLang's: per token, its top_logprobs_num
	// alternatives as [logprob, token_id, null] (no text asked).
	OutputTopLogprobs [][][3]any `json:"output_top_logprobs,omitempty"`
}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type generateResp struct {
	OutputIDs []int32    `json:"output_ids"`
	MetaInfo  metaJSON   `json:"meta_info"`
	Usage     *usageJSON `json:"usage,omitempty"`
}

// logprobPairs is SGLang's [[logprob, token_id], ...]; a position
// without a logprob (NaN: the first prompt token) is null.
func logprobPairs(ids []int32, lps []float64) [][2]any {
	if len(lps) == 0 {
		return nil
	}
	out := make([][2]any, 0, len(lps))
	for i, lp := range lps {
		if i < len(ids) {
			var v any = lp
			if math.IsNaN(lp) {
				v = nil
			}
			out = append(out, [2]any{v, ids[i]})
		}
	}
	return out
}

// topTriples is SGLang's output_top_logprobs for tokens' alternatives.
func topTriples(top [][]gen.TopLogprob) [][][3]any {
	if len(top) == 0 {
		return nil
	}
	out := make([][][3]any, len(top))
	for i, alts := range top {
		out[i] = make([][3]any, len(alts))
		for j, a := range alts {
			out[i][j] = [3]any{a.Logprob, a.ID, nil}
		}
	}
	return out
}

// topLogprobsError is an engine that answered a top-logprob request
// without alternatives (gen.CheckTopLogprobs).
func topLogprobsError(err error) *RequestError {
	return &RequestError{Status: http.StatusBadRequest, Code: "top_logprobs_unsupported", Param: "top_logprobs_num", Message: err.Error()}
}

// promptIDs are the prompt tokens prompt logprobs cover.
func promptIDs(r gen.Request) []int32 {
	if r.LogprobStartLen < 0 || r.LogprobStartLen > len(r.InputIDs) {
		return nil
	}
	return r.InputIDs[r.LogprobStartLen:]
}

// handleGenerate serves SGLang's token-level /generate: a JSON answer, or
// SSE events (incremental output_ids) ending with data: [DONE].
func (g *Gateway) handleGenerate(w http.ResponseWriter, r *http.Request) {
	var body generateBody
	if e := front.Decode(r, &body, generateFields); e != nil {
		WriteError(w, e)
		return
	}
	req, err := body.toRequest(g.opts.Encode, g.MaxModelLen())
	if err != nil {
		WriteError(w, err)
		return
	}
	if req.RID == "" {
		req.RID = "gen-" + strconv.FormatUint(rand.Uint64(), 36)
	}
	req.RoutingKey = r.Header.Get(gen.RoutingKeyHeader)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	start := time.Now()
	events, err := g.Generate(ctx, req)
	if err != nil {
		WriteError(w, err)
		return
	}
	id := req.RID
	if body.Stream {
		g.streamGenerate(w, events, id, start, cancel, req)
		return
	}
	resp := generateResp{OutputIDs: []int32{}, MetaInfo: metaJSON{ID: id}}
	var lps []float64
	for ev := range events {
		if ev.Err != nil {
			cancel()
			for range events {
			}
			WriteError(w, &RequestError{Status: http.StatusBadGateway, Code: "worker_stream_failed", Message: ev.Err.Error()})
			return
		}
		if err := gen.CheckTopLogprobs(req, ev); err != nil {
			cancel()
			for range events {
			}
			WriteError(w, topLogprobsError(err))
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
			resp.MetaInfo.FinishReason = &finishJSON{Type: ev.Finish.Reason, Message: ev.Finish.Message}
		}
	}
	if resp.MetaInfo.FinishReason == nil {
		WriteError(w, &RequestError{Status: http.StatusBadGateway, Code: "worker_stream_failed", Message: "generation ended without a finish"})
		return
	}
	resp.MetaInfo.E2ELatency = time.Since(start).Seconds()
	resp.MetaInfo.OutputLogprobs = logprobPairs(resp.OutputIDs, lps)
	resp.Usage = &usageJSON{resp.MetaInfo.PromptTokens, resp.MetaInfo.CompletionTokens, resp.MetaInfo.PromptTokens + resp.MetaInfo.CompletionTokens}
	writeJSON(w, http.StatusOK, resp)
}

func (g *Gateway) streamGenerate(w http.ResponseWriter, events <-chan gen.Event, id string, start time.Time, cancel func(), req gen.Request) {
	prompt := promptIDs(req)
	out := front.NewSSE(w)
	out.Start()
	enc := newGenerateChunkEnc(id)
	ok, refused := true, false
	for ev := range events {
		if !ok || refused {
			continue // the request ctx is cancelled by now; drain to the close
		}
		if ev.Err != nil {
			out.Fail(front.Errorf(http.StatusBadGateway, "worker_stream_failed", "", "%s", ev.Err.Error()))
			if ok = !out.Failed(); !ok {
				cancel()
			}
			continue
		}
		if err := gen.CheckTopLogprobs(req, ev); err != nil {
			out.Fail(topLogprobsError(err))
			ok, refused = !out.Failed(), true
			cancel()
			continue
		}
		var e2e float64
		if ev.Finish != nil {
			e2e = time.Since(start).Seconds()
		}
		if len(ev.Logprobs) == 0 && len(ev.PromptLogprobs) == 0 && len(ev.TopLogprobs) == 0 {
			// The token path: written into the SSE buffer and flushed once
			// no further event is already waiting, so a burst of ready
			// events costs one flush, not one each. The last event (Finish:
			// none follows, gen.Event) goes out with data: [DONE]'s flush.
			if event, encoded := enc.chunk(ev.TokenIDs, ev.PromptTokens, ev.OutputTokens, ev.CachedTokens, ev.Finish, e2e); encoded {
				ok = out.Write(event)
			} else {
				ok = false
			}
			if ok && ev.Finish == nil && len(events) == 0 {
				out.Flush()
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

// generateChunk is a stream event as a struct for json.Marshal: the shape
// of the rare events (logprobs) generateChunkEnc does not write.
func generateChunk(ev gen.Event, id string, prompt []int32, e2e float64) generateResp {
	chunk := generateResp{OutputIDs: ev.TokenIDs, MetaInfo: metaJSON{ID: id, PromptTokens: ev.PromptTokens, CompletionTokens: ev.OutputTokens, CachedTokens: ev.CachedTokens,
		OutputLogprobs: logprobPairs(ev.TokenIDs, ev.Logprobs), InputLogprobs: logprobPairs(prompt, ev.PromptLogprobs),
		OutputTopLogprobs: topTriples(ev.TopLogprobs)}}
	if chunk.OutputIDs == nil {
		chunk.OutputIDs = []int32{}
	}
	if ev.Finish != nil {
		chunk.MetaInfo.FinishReason = &finishJSON{Type: ev.Finish.Reason, Message: ev.Finish.Message}
		chunk.MetaInfo.E2ELatency = e2e
		chunk.Usage = &usageJSON{ev.PromptTokens, ev.OutputTokens, ev.PromptTokens + ev.OutputTokens}
	}
	return chunk
}

package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/traffic"
)

func (g *Gateway) routes() {
	g.mux.Handle("POST /generate", g.wrap("/generate", http.HandlerFunc(g.handleGenerate), true))
	g.mux.Handle("GET /health", g.wrap("/health", http.HandlerFunc(handleHealth), false))
	g.mux.Handle("GET /liveness", g.wrap("/liveness", http.HandlerFunc(handleHealth), false))
	g.mux.Handle("GET /readiness", g.wrap("/readiness", http.HandlerFunc(g.handleReadiness), false))
	// The model list and the metrics (role names, request rates, GPU
	// load) need the key like serving routes; probes stay open, and
	// gateway.metrics_public opens /metrics for a scraper without it.
	g.mux.Handle("GET /v1/models", g.wrap("/v1/models", http.HandlerFunc(g.handleModels), true))
	g.mux.Handle("GET /metrics", g.wrap("/metrics", promhttp.HandlerFor(g.opts.Registry, promhttp.HandlerOpts{}), !g.plan.Gateway.MetricsPublic))
}

// statusWriter records the status for the HTTP metrics and keeps Flush
// reachable for SSE.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	if code == http.StatusServiceUnavailable {
		setRetryAfter(w) // mounted front ends' 503s too
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap adds HTTP metrics, a body limit, and (for serving routes) bearer
// auth when the profile names an API key. An empty path labels the metrics
// with the pattern a nested mux matched.
func (g *Gateway) wrap(path string, h http.Handler, serving bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		// issue 19: the request's one record in the traffic account; the
		// dispatch finds it in the context (gateway/traffic).
		rec := g.metrics.traffic.Begin(r.Method, r.URL.Path)
		rec.ID(r.Header.Get("X-Request-Id"))
		r = r.WithContext(traffic.NewContext(r.Context(), rec))
		routeLabel := func() string {
			if path != "" {
				return path
			}
			if r.Pattern != "" {
				return r.Pattern // set in place by the nested ServeMux
			}
			return "unmatched"
		}
		defer func() {
			label := routeLabel()
			st := sw.status
			if st == 0 {
				st = http.StatusOK
			}
			g.metrics.httpRequests.WithLabelValues(r.Method, label).Inc()
			g.metrics.httpResponses.WithLabelValues(r.Method, label, strconv.Itoa(st)).Inc()
			g.metrics.httpDuration.WithLabelValues(r.Method, label).Observe(time.Since(start).Seconds())
			rec.End(st) // issue 19
		}()
		// Deferred after the metrics so the 500 it writes is what they count.
		defer g.recoverHTTP(routeLabel, sw)
		if serving && g.apiKey != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(g.apiKey)) != 1 {
				WriteError(sw, &RequestError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "missing or wrong bearer token"})
				return
			}
		}
		// Body deadline, in-flight budget and context-length bound
		// (limits.go), then the handler works from the body in memory.
		release, err := g.readBody(sw, r)
		defer release()
		if err != nil {
			return
		}
		if r.ContentLength != 0 {
			var cancel context.CancelFunc
			r, cancel = g.requestContext(r)
			defer cancel()
		}
		h.ServeHTTP(sw, r)
	})
}

// WriteError writes SMG's error shape: {"error":{type,code,message,param}}
// plus X-SMG-Error-Code. Non-RequestErrors are 500s.
func WriteError(w http.ResponseWriter, err error) {
	var re *RequestError
	if !errors.As(err, &re) {
		re = &RequestError{Status: http.StatusInternalServerError, Code: "internal_error", Message: err.Error()}
	}
	var param any
	if re.Param != "" {
		param = re.Param
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-SMG-Error-Code", re.Code)
	if re.Status == http.StatusServiceUnavailable {
		setRetryAfter(w)
	}
	w.WriteHeader(re.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"type": http.StatusText(re.Status), "code": re.Code, "message": re.Message, "param": param}})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// retryAfterSeconds is what every 503 suggests: long enough for a
// restarting role's ranks to re-handshake or a drain to hand over, short
// enough that a client does not give up on a deployment that is coming back.
const retryAfterSeconds = "5"

func setRetryAfter(w http.ResponseWriter) {
	if w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	if status == http.StatusServiceUnavailable {
		setRetryAfter(w)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

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

// generateBody is SGLang's native /generate request, token-level only.
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

// decodeJSON reads a bounded JSON body and names the offending field.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		var mb *http.MaxBytesError
		switch {
		case errors.As(err, &mb):
			return &RequestError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: fmt.Sprintf("request body over %d bytes", mb.Limit)}
		case errors.As(err, &te):
			return badRequest(te.Field, "field %s: want %s, got JSON %s", te.Field, te.Type, te.Value)
		case errors.As(err, &se):
			return badRequest("", "malformed JSON at byte %d: %v", se.Offset, err)
		case errors.Is(err, io.EOF):
			return badRequest("", "empty request body")
		default:
			return badRequest("", "malformed JSON: %v", err)
		}
	}
	if dec.More() {
		return badRequest("", "trailing data after the JSON body")
	}
	return nil
}

func (b *generateBody) toRequest() (gen.Request, error) {
	switch {
	case b.Text != nil:
		return gen.Request{}, badRequest("text", "text input is not supported on /generate (no tokenizer here); send input_ids")
	case len(b.ImageData) > 0 && string(b.ImageData) != "null":
		return gen.Request{}, &RequestError{Status: http.StatusBadRequest, Code: "multimodal_not_supported", Param: "image_data", Message: "/generate takes no images (it has no tokenizer or image preprocessor); send images as image_url parts to /v1/chat/completions"}
	case b.InputIDs == nil:
		return gen.Request{}, badRequest("input_ids", "input_ids is required")
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
		if s.MaxNewTokens != nil && *s.MaxNewTokens < 0 {
			return r, badRequest("sampling_params.max_new_tokens", "max_new_tokens must be >= 0")
		}
		sp := &r.Sampling
		sp.MaxNewTokens = s.MaxNewTokens
		sp.MinNewTokens = s.MinNewTokens
		if s.Temperature != nil {
			sp.Temperature = *s.Temperature
		}
		if s.TopP != nil {
			if *s.TopP <= 0 || *s.TopP > 1 {
				return r, badRequest("sampling_params.top_p", "top_p %v not in (0, 1]", *s.TopP)
			}
			sp.TopP = *s.TopP
		}
		if s.TopK != nil {
			if *s.TopK == 0 {
				return r, badRequest("sampling_params.top_k", "top_k 0: want -1 or 1..127")
			}
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
	E2ELatency       float64     `json:"e2e_latency"`
	OutputLogprobs   [][2]any    `json:"output_token_logprobs,omitempty"`
	InputLogprobs    [][2]any    `json:"input_token_logprobs,omitempty"`
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
	if err := decodeJSON(r, &body); err != nil {
		WriteError(w, err)
		return
	}
	req, err := body.toRequest()
	if err != nil {
		WriteError(w, err)
		return
	}
	if req.RID == "" {
		req.RID = "gen-" + strconv.FormatUint(g.rng.Uint64(), 36)
	}
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
		g.streamGenerate(w, events, id, start, cancel, promptIDs(req))
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
		resp.OutputIDs = append(resp.OutputIDs, ev.TokenIDs...)
		lps = append(lps, ev.Logprobs...)
		if ev.PromptLogprobs != nil {
			resp.MetaInfo.InputLogprobs = logprobPairs(promptIDs(req), ev.PromptLogprobs)
		}
		resp.MetaInfo.PromptTokens = ev.PromptTokens
		resp.MetaInfo.CompletionTokens = ev.OutputTokens
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

func (g *Gateway) streamGenerate(w http.ResponseWriter, events <-chan gen.Event, id string, start time.Time, cancel func(), prompt []int32) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	rc := http.NewResponseController(w)
	send := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		buf := make([]byte, 0, len(b)+8)
		buf = append(buf, "data: "...)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	ok := true
	for ev := range events {
		if !ok {
			continue // the request ctx is cancelled by now; drain to the close
		}
		if ev.Err != nil {
			ok = send(map[string]any{"error": map[string]any{"message": ev.Err.Error(), "type": "internal_error"}})
			if !ok {
				cancel()
			}
			continue
		}
		chunk := generateResp{OutputIDs: ev.TokenIDs, MetaInfo: metaJSON{ID: id, PromptTokens: ev.PromptTokens, CompletionTokens: ev.OutputTokens,
			OutputLogprobs: logprobPairs(ev.TokenIDs, ev.Logprobs), InputLogprobs: logprobPairs(prompt, ev.PromptLogprobs)}}
		if chunk.OutputIDs == nil {
			chunk.OutputIDs = []int32{}
		}
		if ev.Finish != nil {
			chunk.MetaInfo.FinishReason = &finishJSON{Type: ev.Finish.Reason, Message: ev.Finish.Message}
			chunk.MetaInfo.E2ELatency = time.Since(start).Seconds()
			chunk.Usage = &usageJSON{ev.PromptTokens, ev.OutputTokens, ev.PromptTokens + ev.OutputTokens}
		}
		if ok = send(chunk); !ok {
			cancel() // client gone: abort both legs now
		}
	}
	if ok {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		if flusher != nil {
			flusher.Flush()
		}
	}
}

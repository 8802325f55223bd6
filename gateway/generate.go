package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tsd-project/tsd/gateway/dispatch"
	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/wire"
)

// RequestError is a request the gateway refuses before dispatch; front
// ends map it to an HTTP error (Status, Code as SMG's X-SMG-Error-Code,
// Param naming the offending field).
type RequestError struct {
	Status  int
	Code    string
	Param   string
	Message string
}

func (e *RequestError) Error() string { return e.Message }

// HTTPStatus, ErrorCode and ErrorParam let front ends map the error
// without importing this package.
func (e *RequestError) HTTPStatus() int { return e.Status }

// ErrorCode is the snake_case error code.
func (e *RequestError) ErrorCode() string { return e.Code }

// ErrorParam names the offending request field, if any.
func (e *RequestError) ErrorParam() string { return e.Param }

func badRequest(param, format string, args ...any) *RequestError {
	return &RequestError{Status: http.StatusBadRequest, Code: "invalid_request", Param: param, Message: fmt.Sprintf(format, args...)}
}

// wireSampling turns API sampling into the normalized wire form SMG sends.
// gen.Sampling cannot say "unset", so the zero values that are invalid on
// the wire (top_p 0, top_k 0) mean the engine default.
func wireSampling(s gen.Sampling) (wire.SamplingParams, error) {
	sp := wire.DefaultSamplingParams()
	sp.MaxNewTokens = s.MaxNewTokens
	sp.MinNewTokens = s.MinNewTokens
	sp.Temperature = s.Temperature
	sp.TopP = s.TopP
	if sp.TopP == 0 {
		sp.TopP = 1
	}
	sp.TopK = s.TopK
	if sp.TopK == 0 {
		sp.TopK = -1
	}
	sp.MinP = s.MinP
	sp.FrequencyPenalty = s.FrequencyPenalty
	sp.PresencePenalty = s.PresencePenalty
	sp.RepetitionPenalty = s.RepetitionPenalty
	if len(s.StopTokenIDs) > 0 {
		sp.StopTokenIDs = s.StopTokenIDs
	}
	sp.IgnoreEOS = s.IgnoreEOS
	sp.Seed = s.Seed
	if err := sp.Validate(0); err != nil {
		return sp, err
	}
	return sp.Normalized(), nil
}

func validate(r *gen.Request) error {
	switch {
	case len(r.InputIDs) == 0:
		return badRequest("input_ids", "input_ids must not be empty")
	case r.LogprobStartLen >= len(r.InputIDs):
		return badRequest("logprob_start_len", "logprob_start_len %d must be below the prompt length %d", r.LogprobStartLen, len(r.InputIDs))
	case r.TopLogprobsNum > 1:
		return badRequest("top_logprobs_num", "top logprobs are not supported over the ZMQ lane (only the sampled token's logprob)")
	}
	for i, id := range r.InputIDs {
		if id < 0 {
			return badRequest("input_ids", "input_ids[%d] = %d is negative", i, id)
		}
	}
	return nil
}

// leg is one chosen engine rank for one request.
type leg struct {
	w  *lane.Worker
	id int
}

// pick chooses the prefill rank (room mod dp) and the decode rank.
func (g *Gateway) pick(room uint64) (pre, dec leg, _ uint64, _ error) {
	pw := pickWorker(g.plan.Gateway.Policy.Prefill, g.prefill, g.rrPrefill.Add(1)-1, g.rng.Uint64())
	if pw == nil {
		return pre, dec, room, &RequestError{Status: http.StatusServiceUnavailable, Code: "no_prefill_worker", Message: "no prefill engine rank is registered and routed"}
	}
	dw := pickWorker(g.plan.Gateway.Policy.Decode, g.decode, g.rrDecode.Add(1)-1, g.rng.Uint64())
	if dw == nil {
		return pre, dec, room, &RequestError{Status: http.StatusServiceUnavailable, Code: "no_decode_worker", Message: "no decode engine rank is registered and routed"}
	}
	ranks := pw.Routable()
	dp := pw.DPSize()
	want := dispatch.PrefillRank(room, dp)
	pre = leg{w: pw, id: -1}
	for _, r := range ranks {
		if r.DPRank == want {
			pre.id = r.Identity
		}
	}
	if pre.id < 0 {
		// The room's rank is down: move the room to a rank that is up, so
		// the decode still fetches from room mod dp.
		c := make([]dispatch.Candidate, len(ranks))
		for i, r := range ranks {
			c[i] = dispatch.Candidate{InFlight: r.InFlight}
		}
		i := dispatch.Pick(dispatch.LeastLoad, c, room, 0)
		pre.id = ranks[i].Identity
		room = dispatch.RoomForRank(room, dp, ranks[i].DPRank)
	}
	dranks := dw.Routable()
	c := make([]dispatch.Candidate, len(dranks))
	for i, r := range dranks {
		c[i] = dispatch.Candidate{InFlight: r.InFlight}
	}
	if len(c) == 0 {
		return pre, dec, room, &RequestError{Status: http.StatusServiceUnavailable, Code: "no_decode_worker", Message: "decode ranks went away"}
	}
	dec = leg{w: dw, id: dranks[dispatch.Pick(dispatch.LeastLoad, c, room, 0)].Identity}
	return pre, dec, room, nil
}

// pickWorker applies a policy over the workers that have a routable rank;
// a worker's load is its in-flight count.
func pickWorker(policy string, ws []*lane.Worker, seq, rnd uint64) *lane.Worker {
	var live []*lane.Worker
	var c []dispatch.Candidate
	for _, w := range ws {
		if ranks := w.Routable(); len(ranks) > 0 {
			n := 0
			for _, r := range ranks {
				n += r.InFlight
			}
			live = append(live, w)
			c = append(c, dispatch.Candidate{InFlight: n})
		}
	}
	i := dispatch.Pick(policy, c, seq, rnd)
	if i < 0 {
		return nil
	}
	return live[i]
}

func splitBootstrap(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("bootstrap address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("bootstrap address %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return host, port, nil
}

// Generate dispatches r to a prefill and a decode rank with one bootstrap
// room and streams the decode leg's tokens. Cancelling ctx (client gone)
// aborts both legs; so does either leg's abort or error, and the request
// deadline. The channel always ends with an event carrying Finish or Err.
func (g *Gateway) Generate(ctx context.Context, r gen.Request) (<-chan gen.Event, error) {
	if err := validate(&r); err != nil {
		g.metrics.reqError("invalid_request")
		return nil, err
	}
	if err := g.checkImages(&r); err != nil {
		g.metrics.reqError("invalid_request")
		return nil, err
	}
	if err := g.checkPromptLen(&r); err != nil {
		g.metrics.reqError("invalid_request")
		return nil, err
	}
	sp, err := wireSampling(r.Sampling)
	if err != nil {
		g.metrics.reqError("invalid_request")
		return nil, badRequest("sampling_params", "%v", err)
	}
	room := dispatch.Room(g.rng.Uint64())
	pre, dec, room, err := g.pick(room)
	if err != nil {
		g.metrics.reqError("no_workers")
		g.errors.Add(1)
		return nil, err
	}
	rid := g.mintRID(r.RID)
	host, port, err := splitBootstrap(pre.w.Bootstrap())
	if err != nil {
		g.metrics.reqError("bootstrap")
		g.errors.Add(1)
		return nil, &RequestError{Status: http.StatusInternalServerError, Code: "bootstrap_address", Message: err.Error()}
	}
	// Only the prefill saw the prompt, so only it computes prompt
	// logprobs; the decode leg asks for output logprobs alone.
	wantPrompt := r.LogprobStartLen >= 0
	q := wire.NewGenerateRequest(rid, r.InputIDs, sp)
	q.ReturnLogprob = r.ReturnLogprob || wantPrompt
	if wantPrompt {
		q.LogprobStartLen = r.LogprobStartLen
	}
	q.Stream = r.Stream
	q.SetBootstrap(host, port, room)
	var legs epd.Legs
	if len(r.Images) > 0 {
		// EPD: each image goes to its encoder (consistent hashing on its
		// content) under its own room; the prefill fetches the embeddings
		// from there, the decode gets the items' metadata only.
		if legs, err = epd.PlanLegs(rid, prepared(r), g.encodeRing(), g.encoderAddr, room, g.rng.Uint64); err != nil {
			g.metrics.reqError("no_workers")
			g.errors.Add(1)
			return nil, &RequestError{Status: http.StatusServiceUnavailable, Code: "no_encode_worker", Message: err.Error()}
		}
		q.MultimodalInputs = legs.Prefill
	}
	payload, err := wire.EncodeGenerateRequest(q)
	if err != nil {
		g.metrics.reqError("encode")
		g.errors.Add(1)
		return nil, &RequestError{Status: http.StatusInternalServerError, Code: "encode_failed", Message: err.Error()}
	}
	dpayload := payload
	if wantPrompt || len(r.Images) > 0 {
		qd := q
		qd.ReturnLogprob, qd.LogprobStartLen = r.ReturnLogprob, -1
		if len(r.Images) > 0 {
			qd.MultimodalInputs = legs.Decode
		}
		if dpayload, err = wire.EncodeGenerateRequest(qd); err != nil {
			g.metrics.reqError("encode")
			g.errors.Add(1)
			return nil, &RequestError{Status: http.StatusInternalServerError, Code: "encode_failed", Message: err.Error()}
		}
	}
	start := time.Now()
	var encs []*lane.Stream
	if len(legs.Encode) > 0 {
		if encs, err = g.submitEncodes(legs); err != nil {
			g.metrics.reqError("encode_worker_failed_to_start")
			g.errors.Add(1)
			return nil, &RequestError{Status: http.StatusServiceUnavailable, Code: "encode_worker_failed_to_start", Message: err.Error()}
		}
	}
	abortEncs := func(err error) {
		for _, s := range encs {
			s.Abort(err)
		}
	}
	ps, err := pre.w.Submit(pre.id, rid, payload)
	if err != nil {
		abortEncs(err)
		g.metrics.reqError("prefill_worker_failed_to_start")
		g.errors.Add(1)
		return nil, &RequestError{Status: http.StatusServiceUnavailable, Code: "prefill_worker_failed_to_start", Message: err.Error()}
	}
	ds, err := dec.w.Submit(dec.id, rid, dpayload)
	if err != nil {
		ps.Abort(err)
		abortEncs(err)
		g.metrics.reqError("decode_worker_failed_to_start")
		g.errors.Add(1)
		return nil, &RequestError{Status: http.StatusServiceUnavailable, Code: "decode_worker_failed_to_start", Message: err.Error()}
	}
	g.requests.Add(1)
	var preRes *legResult
	var promptLP []float64
	if wantPrompt {
		res, perr := g.awaitPrompt(ctx, ps, ds, r)
		if perr != nil {
			abortEncs(nil)
			g.errors.Add(1)
			return nil, perr
		}
		preRes, promptLP = &res, res.out.PromptLogprobs
	}
	g.inflight.Add(1)
	g.metrics.dispatched(pre, dec, len(r.InputIDs))
	events := make(chan gen.Event, 16)
	go g.run(ctx, ps, ds, encs, events, start, preRes, promptLP)
	return events, nil
}

// awaitPrompt waits for the prefill leg's terminal output when prompt
// logprobs were asked, so that an engine which cannot compute them is a
// clean 400 before any response (streaming included) has started. The
// decode leg's outputs queue on its stream meanwhile; in PD it cannot
// produce a token before the prefill's KV arrives anyway. A prefill abort
// for another reason is returned as the result for run to report.
func (g *Gateway) awaitPrompt(ctx context.Context, ps, ds *lane.Stream, r gen.Request) (legResult, error) {
	wctx, cancel := context.WithTimeout(ctx, g.opts.RequestTimeout)
	defer cancel()
	var o lane.Output
	var err error
	for {
		if o, err = ps.Recv(wctx); err != nil || o.Finished != "" {
			break
		}
	}
	if err != nil {
		ps.Abort(err)
		ds.Abort(err)
		switch {
		case ctx.Err() != nil:
			g.metrics.reqError("client_disconnected")
			return legResult{}, ctx.Err()
		case wctx.Err() != nil:
			g.metrics.reqError("timeout")
			return legResult{}, &RequestError{Status: http.StatusGatewayTimeout, Code: "timeout", Message: fmt.Sprintf("request deadline of %s exceeded waiting for the prefill's prompt logprobs; both legs aborted", g.opts.RequestTimeout)}
		}
		g.metrics.reqError("prefill_failed")
		return legResult{}, &RequestError{Status: http.StatusBadGateway, Code: "prefill_failed", Message: "prefill leg failed: " + err.Error()}
	}
	// An engine's refusal may carry empty input-logprob columns; a prompt
	// of at least one token past logprob_start_len always has a value.
	got := o.HasPromptLogprobs && len(o.PromptLogprobs) > 0
	if ferr := epd.PromptLogprobFailure(o.Finished, o.AbortMessage, got); ferr != nil {
		ds.Abort(nil)
		g.metrics.reqError("invalid_request")
		return legResult{}, &RequestError{Status: http.StatusBadRequest, Code: "prompt_logprobs_unsupported", Param: "logprob_start_len", Message: ferr.Error()}
	}
	if got {
		if cerr := epd.CheckPromptLogprobs(epd.TokenLogprobs{Vals: o.PromptLogprobs, IDs: o.PromptLogprobIDs}, r.InputIDs, r.LogprobStartLen); cerr != nil {
			ds.Abort(nil)
			g.metrics.reqError("prefill_failed")
			return legResult{}, &RequestError{Status: http.StatusBadGateway, Code: "prompt_logprobs_mismatch", Message: cerr.Error()}
		}
	}
	return legResult{out: o}, nil
}

func (g *Gateway) mintRID(client string) string {
	suffix := strconv.FormatUint(g.rng.Uint64(), 36)
	if client == "" {
		return "gen-" + suffix
	}
	// PD: a client rid always gets a per-attempt suffix (gateway-flow.md §3.4).
	return client + "-" + suffix
}

type legResult struct {
	out lane.Output
	err error
}

// run drives one PD request: it relays decode outputs, watches the
// prefill leg, and aborts both legs on the first failure, client cancel or
// the deadline.
// pre, when set, is the prefill's terminal output already received
// (awaitPrompt); promptLP rides on the first event.
func (g *Gateway) run(parent context.Context, ps, ds *lane.Stream, encs []*lane.Stream, events chan<- gen.Event, start time.Time, pre *legResult, promptLP []float64) {
	defer close(events)
	defer g.inflight.Add(-1)
	// Encode legs end with their own terminal output; one still running
	// when the request ends is aborted now on failure, after the drain
	// grace on success (its answer may be in flight).
	succeeded := false
	encLeft := len(encs)
	defer func() {
		if encLeft == 0 {
			return
		}
		if succeeded {
			time.AfterFunc(g.opts.DrainGrace, func() {
				for _, s := range encs {
					s.Abort(nil)
				}
			})
			return
		}
		for _, s := range encs {
			s.Abort(nil)
		}
	}()
	var encCh <-chan encodeResult
	if encLeft > 0 {
		encCh = watchEncodes(encs)
	}
	// Once an encode leg has finished, its engine still holds the
	// embedding until the prefill fetched it: that engine's death before
	// the prefill leg ends fails the request now, not after the prefill's
	// embedding timeout.
	var deathCh chan encodeDeath
	watched := map[*lane.Worker]bool{}
	stopWatch := make(chan struct{})
	var stopOnce sync.Once
	stopWatching := func() { stopOnce.Do(func() { close(stopWatch) }) }
	defer stopWatching()
	ctx, cancel := context.WithTimeout(parent, g.opts.RequestTimeout)
	defer cancel()

	// The prefill watcher is not tied to ctx: every path out of run ends
	// the prefill stream (abort now, or after the drain grace), and the
	// watcher ends with it.
	preCh := make(chan legResult, 1)
	if pre != nil {
		preCh <- *pre
	} else {
		go func() {
			for {
				o, err := ps.Recv(context.Background())
				if err != nil || o.Finished != "" {
					preCh <- legResult{o, err}
					return
				}
			}
		}()
	}
	decCh := make(chan legResult, 1)
	go func() {
		for {
			o, err := ds.Recv(ctx)
			select {
			case decCh <- legResult{o, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || o.Finished != "" {
				return
			}
		}
	}()

	emit := func(ev gen.Event) bool {
		select {
		case events <- ev:
			return true
		case <-parent.Done():
			return false
		}
	}
	fail := func(kind string, ev gen.Event) {
		g.errors.Add(1)
		g.metrics.reqError(kind)
		emit(ev)
	}
	var (
		preDone  bool
		first    = true
		last     time.Time
		promptTk int
	)
	for {
		select {
		case <-ctx.Done():
			cause := ctx.Err()
			ps.Abort(cause)
			ds.Abort(cause)
			if parent.Err() != nil {
				g.metrics.reqError("client_disconnected")
				return // nobody is listening
			}
			fail("timeout", gen.Event{Err: fmt.Errorf("request deadline of %s exceeded; both legs aborted", g.opts.RequestTimeout)})
			return
		case er := <-encCh:
			if err := encodeFailure(er); err != nil {
				if ctx.Err() != nil {
					continue // the ctx case reports it
				}
				ps.Abort(err)
				ds.Abort(err)
				fail("encode_failed", gen.Event{Err: err})
				return
			}
			if encLeft--; encLeft == 0 {
				encCh = nil
			}
			if w := encs[er.item].Worker(); !preDone && !watched[w] {
				if deathCh == nil {
					deathCh = make(chan encodeDeath, len(encs))
				}
				watched[w] = true
				g.watchEncoder(encs[er.item], start, stopWatch, deathCh)
			}
		case d := <-deathCh:
			if ps.Done() || ctx.Err() != nil {
				// The prefill's end (or the ctx case) is reported instead.
				deathCh = nil
				continue
			}
			err := fmt.Errorf("encode worker %s died before prefill %s received the image embedding (%s); both legs aborted", d.role, ps.Worker().Role(), d.why)
			ps.Abort(err)
			ds.Abort(err)
			fail("encode_worker_died", gen.Event{Err: err})
			return
		case pr := <-preCh:
			preCh = nil
			preDone = true
			stopWatching()
			deathCh = nil
			switch {
			case pr.err != nil && ctx.Err() != nil:
				// handled by the ctx case
			case pr.err != nil:
				ds.Abort(pr.err)
				fail("prefill_failed", gen.Event{Err: fmt.Errorf("prefill leg failed: %w", pr.err)})
				return
			case pr.out.Finished == wire.FinishAbort || pr.out.Finished == wire.FinishError:
				ds.Abort(nil)
				fail("prefill_aborted", gen.Event{PromptTokens: pr.out.PromptTokens, Finish: &gen.Finish{Reason: gen.FinishAbort, Message: "prefill leg aborted (" + pr.out.Finished + ")"}})
				return
			}
		case dr := <-decCh:
			if dr.err != nil {
				if ctx.Err() != nil {
					continue // the ctx case reports it
				}
				if errors.Is(dr.err, io.EOF) {
					dr.err = errors.New("decode stream ended without a finish")
				}
				ps.Abort(dr.err)
				fail("decode_failed", gen.Event{Err: fmt.Errorf("decode leg failed: %w", dr.err)})
				return
			}
			o := dr.out
			now := time.Now()
			if len(o.TokenIDs) > 0 {
				if first {
					g.metrics.ttft.Observe(now.Sub(start).Seconds())
					g.metrics.routerTTFT.Observe(now.Sub(start).Seconds())
					first = false
				} else {
					g.metrics.itl.Observe(now.Sub(last).Seconds() / float64(len(o.TokenIDs)))
				}
				last = now
				g.tokens.Add(uint64(len(o.TokenIDs)))
				g.metrics.outTokens.Add(float64(len(o.TokenIDs)))
			}
			if o.PromptTokens > 0 {
				promptTk = o.PromptTokens
			}
			ev := gen.Event{TokenIDs: o.TokenIDs, Logprobs: o.Logprobs, PromptTokens: promptTk, OutputTokens: o.CompletionTokens, PromptLogprobs: promptLP}
			promptLP = nil
			if o.Finished != "" {
				ev.Finish = finishOf(o.Finished)
				if !preDone {
					// Its terminal output may still be in flight; abort it
					// only if it is still running after the grace.
					time.AfterFunc(g.opts.DrainGrace, func() { ps.Abort(nil) })
				}
				g.metrics.finished(ev.Finish.Reason, now.Sub(start))
				succeeded = ev.Finish.Reason != gen.FinishAbort
				if ev.Finish.Reason == gen.FinishAbort {
					ps.Abort(nil)
					g.errors.Add(1)
					g.metrics.reqError("engine_abort")
				}
				emit(ev)
				return
			}
			if !emit(ev) {
				ps.Abort(parent.Err())
				ds.Abort(parent.Err())
				g.metrics.reqError("client_disconnected")
				return
			}
		}
	}
}

func finishOf(s string) *gen.Finish {
	switch s {
	case wire.FinishLength:
		return &gen.Finish{Reason: gen.FinishLength}
	case wire.FinishAbort:
		return &gen.Finish{Reason: gen.FinishAbort, Message: "engine aborted the request"}
	case wire.FinishError:
		return &gen.Finish{Reason: gen.FinishAbort, Message: "engine reported an error"}
	default:
		return &gen.Finish{Reason: gen.FinishStop}
	}
}

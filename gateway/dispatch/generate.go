package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/gateway/wire"
)

// RequestError is a request the dispatch refuses or fails: the front
// door's one error type (Status, Code as SMG's X-SMG-Error-Code, Param
// naming the offending field), rendered by front.WriteError.
type RequestError = front.Error

func badRequest(param, format string, args ...any) *RequestError {
	return front.BadRequest(param, format, args...)
}

func validate(r *tokenapi.Request) error {
	switch {
	case len(r.InputIDs) == 0:
		return badRequest("input_ids", "input_ids must not be empty")
	case r.LogprobStartLen >= len(r.InputIDs):
		return badRequest("logprob_start_len", "logprob_start_len %d must be below the prompt length %d", r.LogprobStartLen, len(r.InputIDs))
	case r.TopLogprobsNum < 0 || r.TopLogprobsNum > tokenapi.MaxTopLogprobs:
		return badRequest("top_logprobs_num", "top_logprobs_num must be between 0 and %d, got %d", tokenapi.MaxTopLogprobs, r.TopLogprobsNum)
	case r.TopLogprobsNum > 0 && !r.ReturnLogprob:
		return badRequest("top_logprobs_num", "top_logprobs_num needs return_logprob")
	}
	for i, id := range r.InputIDs {
		if id < 0 {
			return badRequest("input_ids", "input_ids[%d] = %d is negative", i, id)
		}
	}
	return nil
}

// checkImages refuses image requests the deployment cannot serve and
// images whose spans do not fit the prompt.
func (g *Dispatcher) checkImages(r *tokenapi.Request) error {
	if len(r.Images) == 0 {
		return nil
	}
	if err := g.ImageSupport(); err != nil {
		return err
	}
	prev := 0
	for i, im := range r.Images {
		rows := im.GridTHW[0] * im.GridTHW[1] * im.GridTHW[2]
		switch {
		case im.Offset[0] < prev || im.Offset[1] <= im.Offset[0] || im.Offset[1] > len(r.InputIDs):
			return badRequest("images", "image %d: pad span [%d, %d) outside the prompt of %d tokens or overlapping the previous image", i, im.Offset[0], im.Offset[1], len(r.InputIDs))
		case rows <= 0 || im.Dim <= 0 || len(im.Pixels) != rows*im.Dim:
			return badRequest("images", "image %d: %d pixel values for a %v grid of %d values per patch", i, len(im.Pixels), im.GridTHW, im.Dim)
		case im.Hash == "":
			return badRequest("images", "image %d: no content hash", i)
		}
		for p := im.Offset[0]; p < im.Offset[1]; p++ {
			if r.InputIDs[p] != im.PadToken {
				return badRequest("images", "image %d: token %d at %d is not the image pad %d", i, r.InputIDs[p], p, im.PadToken)
			}
		}
		prev = im.Offset[1]
	}
	return nil
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

// Stream dispatches r to a prefill and a decode rank with one bootstrap
// room; the decode leg's tokens are read with the Streamer's Next, which
// drives the request's flight (its legs, retries and migration) in the
// caller's goroutine. Cancelling ctx (client gone) aborts both legs; so
// does either leg's abort or error, and the request deadline. The last
// event carries Finish or Err.
func (g *Dispatcher) Stream(ctx context.Context, r tokenapi.Request) (st tokenapi.Streamer, err error) {
	// Stream runs in its caller's goroutine (an HTTP handler, an OpenAI
	// runner): a panic here fails this request with a 500 and aborts any
	// leg already sent, instead of taking the daemon down.
	var sent []*lane.Stream
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		g.onPanic("dispatch", v, debug.Stack())
		perr := fmt.Errorf("internal error in the gateway's dispatch (recovered: %v)", v)
		for _, s := range sent {
			s.Abort(perr)
		}
		g.metrics.reqError("panic")
		st, err = nil, &RequestError{Status: http.StatusInternalServerError, Code: "internal_error", Message: perr.Error()}
	}()
	f, err := g.generate(ctx, r, &sent)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Generate is Stream read by a goroutine of its own into a channel that
// is closed after the last event.
func (g *Dispatcher) Generate(ctx context.Context, r tokenapi.Request) (<-chan tokenapi.Event, error) {
	st, err := g.Stream(ctx, r)
	if err != nil {
		return nil, err
	}
	events := make(chan tokenapi.Event, 16)
	go func() {
		defer close(events)
		defer st.Close()
		defer g.recoverHere("request channel", nil) // Next recovers its own; this guards the loop
		for {
			ev, ok := st.Next()
			if !ok {
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return events, nil
}

// generate dispatches one request in steps: admit (validate it) → its
// first attempt (flight.launch: pick its legs, waiting for a routable
// worker → encode each leg's request with a fresh rid and room → submit
// the legs → with prompt logprobs asked, await the prefill's), retried as
// gateway.retry says while each failure is still a clean error before any
// response → start its flight, which Next drives through the attempt and
// any later one (flight.go). Only the failure that ends the request is
// counted.
func (g *Dispatcher) generate(ctx context.Context, r tokenapi.Request, sent *[]*lane.Stream) (*flight, error) {
	traffic.FromContext(ctx).ID(r.RID) // the access line's id unless the client sent one
	sp, err := g.admit(&r)
	if err != nil {
		g.metrics.reqError("invalid_request")
		return nil, err
	}
	f := g.newFlight(ctx, r, sp, sent)
	started := false
	defer func() {
		if !started {
			f.cancel() // a failure or a panic: Next never owns the flight
		}
	}()
	if ae := f.launch(); ae != nil {
		f.noteAttempts()
		g.metrics.reqError(ae.metric)
		if ae.metric == "client_disconnected" {
			traffic.FromContext(ctx).Gone(ctx.Err()) // logged 499
		}
		return nil, ae.err
	}
	started = true
	f.start()
	return f, nil
}

// admit checks a request before any worker is chosen and returns its
// sampling in wire form.
func (g *Dispatcher) admit(r *tokenapi.Request) (wire.SamplingParams, error) {
	if err := validate(r); err != nil {
		return wire.SamplingParams{}, err
	}
	if err := g.checkImages(r); err != nil {
		return wire.SamplingParams{}, err
	}
	// A tokenized prompt the engines cannot hold, or whose max_new_tokens
	// would run past the context, is a 400 here (a 1M-token prompt used to
	// reach the engines and come back a 502, which clients retry).
	if err := front.CheckContext(len(r.InputIDs), r.Sampling.MaxNewTokens, g.MaxModelLen(), "input_ids", "max_new_tokens"); err != nil {
		return wire.SamplingParams{}, err
	}
	sp, err := r.Sampling.Wire()
	if err != nil {
		return sp, badRequest("sampling_params", "%v", err)
	}
	return sp, nil
}

// legPayloads are one request's encoded legs.
type legPayloads struct {
	rid        string
	pre, dec   []byte   // the prefill's and the decode's GenerateRequest
	legs       epd.Legs // EPD: the encode requests and their workers
	wantPrompt bool     // prompt logprobs asked (awaitPrompt)
}

// encodeLegs builds each leg's request: one rid and bootstrap room for
// both PD legs, in EPD an encode request per image (on encoders other
// than av's when there are: a retry's). Its failures are final (the
// deployment's addresses, the request itself).
func (g *Dispatcher) encodeLegs(r tokenapi.Request, sp wire.SamplingParams, pre leg, room uint64, av avoid) (legPayloads, *attemptErr) {
	p := legPayloads{rid: g.mintRID(r.RID)}
	host, port, err := splitBootstrap(pre.w.Bootstrap())
	if err != nil {
		return p, fatal("bootstrap", &RequestError{Status: http.StatusInternalServerError, Code: "bootstrap_address", Message: err.Error()})
	}
	// Only the prefill saw the prompt, so only it computes prompt
	// logprobs; the decode leg asks for output logprobs alone.
	p.wantPrompt = r.LogprobStartLen >= 0
	q := wire.NewGenerateRequest(p.rid, r.InputIDs, sp)
	q.ReturnLogprob = r.ReturnLogprob || p.wantPrompt
	if r.ReturnLogprob {
		// Both legs: the first token, the prefill's, has alternatives too
		// (docs/protocol.md §6.7).
		q.TopLogprobsNum = r.TopLogprobsNum
	}
	if p.wantPrompt {
		q.LogprobStartLen = r.LogprobStartLen
	}
	q.Stream = r.Stream
	q.SetBootstrap(host, port, room)
	if len(r.Images) > 0 {
		// EPD: each image goes to its encoder (consistent hashing on its
		// content) under its own room; the prefill fetches the embeddings
		// from there, the decode gets the items' metadata only.
		p.legs, err = epd.BuildLegs(p.rid, r.Images, g.encodePicker(av), g.encoderAddr, room, g.rng.Uint64)
		switch {
		case errors.Is(err, epd.ErrNoEncoder):
			return p, fatal("no_workers", &RequestError{Status: http.StatusServiceUnavailable, Code: "no_encode_worker", Message: err.Error()})
		case err != nil:
			return p, fatal("encode", &RequestError{Status: http.StatusInternalServerError, Code: "encode_failed", Message: err.Error()})
		}
		q.MultimodalInputs = p.legs.Prefill
	}
	if p.pre, err = wire.EncodeGenerateRequest(q); err != nil {
		return p, fatal("encode", &RequestError{Status: http.StatusInternalServerError, Code: "encode_failed", Message: err.Error()})
	}
	p.dec = p.pre
	if p.wantPrompt || len(r.Images) > 0 {
		qd := q
		qd.ReturnLogprob, qd.LogprobStartLen = r.ReturnLogprob, -1
		if len(r.Images) > 0 {
			qd.MultimodalInputs = p.legs.Decode
		}
		if p.dec, err = wire.EncodeGenerateRequest(qd); err != nil {
			return p, fatal("encode", &RequestError{Status: http.StatusInternalServerError, Code: "encode_failed", Message: err.Error()})
		}
	}
	return p, nil
}

// legStreams are one request's submitted legs.
type legStreams struct {
	ps, ds *lane.Stream
	encs   []*lane.Stream
	start  time.Time // dispatch time: TTFT and duration count from here
}

func (ls legStreams) abortEncodes(err error) {
	for _, s := range ls.encs {
		s.Abort(err)
	}
}

// submit sends the encode legs, then the prefill, then the decode; each
// stream sent is appended to sent (Generate's panic boundary aborts them).
// A refusal aborts what was already sent; the next attempt avoids the
// worker that refused.
func (g *Dispatcher) submit(p legPayloads, pre, dec leg, sent *[]*lane.Stream) (legStreams, *attemptErr) {
	ls := legStreams{start: time.Now()}
	var err error
	if len(p.legs.Encode) > 0 {
		ls.encs, err = g.submitEncodes(p.legs)
		*sent = append(*sent, ls.encs...)
		if err != nil {
			return ls, &attemptErr{class: submitFailureKind(err), metric: "encode_worker_failed_to_start",
				err: &RequestError{Status: http.StatusServiceUnavailable, Code: "encode_worker_failed_to_start", Message: err.Error()}}
		}
	}
	// In EPD the prefill owes nothing until its embeddings exist, and the
	// decode owes nothing until its prefill's KV does: their silence
	// before is no stall (Expect is called when it ends).
	submitPre := pre.w.Submit
	if len(ls.encs) > 0 && !p.wantPrompt { // awaitPrompt does not watch the encode legs
		submitPre = pre.w.SubmitQuiet
	}
	if ls.ps, err = submitPre(pre.id, p.rid, p.pre); err != nil {
		ls.abortEncodes(err)
		return ls, &attemptErr{class: submitFailureKind(err), metric: "prefill_worker_failed_to_start", avoid: []*lane.Worker{pre.w},
			err: &RequestError{Status: http.StatusServiceUnavailable, Code: "prefill_worker_failed_to_start", Message: err.Error()}}
	}
	*sent = append(*sent, ls.ps)
	if ls.ds, err = dec.w.SubmitQuiet(dec.id, p.rid, p.dec); err != nil {
		ls.ps.Abort(err)
		ls.abortEncodes(err)
		return ls, &attemptErr{class: submitFailureKind(err), metric: "decode_worker_failed_to_start", avoid: []*lane.Worker{dec.w}, decode: true,
			err: &RequestError{Status: http.StatusServiceUnavailable, Code: "decode_worker_failed_to_start", Message: err.Error()}}
	}
	*sent = append(*sent, ls.ds)
	return ls, nil
}

// pickQueued is pick that waits, up to QueueTimeout, while no worker of a
// kind the request needs is routable (the only decode drains or restarts,
// or every breaker of a kind is open, say): each lane change (a rank's
// state, a role's routing) and each breaker change wakes it to try again,
// and the client going away or the deadline ends the wait. Then the
// refusal is a 503 that says how long it waited; every 503 carries
// Retry-After. It returns the routing decision's details and the
// breakers' view it routed by, which the request's outcomes are reported
// against.
func (g *Dispatcher) pickQueued(ctx context.Context, r *tokenapi.Request, room uint64, av avoid) (pre, dec leg, _ uint64, ri routeInfo, _ *breakerView, _ error) {
	var timeout <-chan time.Time
	waited := false
	images := len(r.Images) > 0
	wait := g.live.Load().queueTimeout // as the request found it
	times := reqtime.FromContext(ctx)
	times.Mark(reqtime.Picking) // reqtime's queued phase: from here to the pick that routes it
	for {
		changed := g.lane.Changed() // before looking, so no change is missed
		view := g.breakers.current()
		var err error
		if images && len(g.encodeRoutable(view)) == 0 {
			err = errNoEncode
		} else {
			var moved uint64
			times.Mark(reqtime.RouteBegin)
			if pre, dec, moved, ri, err = g.pick(r, room, av, view); err == nil {
				times.Mark(reqtime.Routed)
				if waited {
					g.metrics.Queued.WithLabelValues("routed").Inc()
				}
				return pre, dec, moved, ri, view, nil
			}
		}
		if wait < 0 {
			return pre, dec, room, ri, view, err
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
			waited = true
			g.queuedNow.Add(1)
			defer g.queuedNow.Add(-1)
		}
		select {
		case <-changed:
		case <-view.changed():
		case <-timeout:
			g.metrics.Queued.WithLabelValues("timeout").Inc()
			re := *err.(*RequestError)
			re.Message += fmt.Sprintf(" (waited %s for one)", wait)
			return pre, dec, room, ri, view, &re
		case <-ctx.Done():
			g.metrics.Queued.WithLabelValues("client_gone").Inc()
			return pre, dec, room, ri, view, ctx.Err()
		case <-g.shutdown:
			return pre, dec, room, ri, view, err
		}
	}
}

// errNoEncode refuses an image request while no encode worker is ready.
var errNoEncode = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_encode_worker", Message: "no encode engine rank is registered and routed"}

func (g *Dispatcher) mintRID(client string) string {
	suffix := strconv.FormatUint(g.rng.Uint64(), 36)
	if client == "" {
		return "gen-" + suffix
	}
	// PD: a client rid always gets a per-attempt suffix (docs/protocol.md §8.5).
	return client + "-" + suffix
}

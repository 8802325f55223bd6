package dispatch

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"

	"github.com/tsd-project/tsd/gateway/admission"
	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/lane"
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
	var tk *admission.Ticket
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		tk.Done(0)
		g.guard.onPanic("dispatch", v, debug.Stack())
		perr := fmt.Errorf("internal error in the gateway's dispatch (recovered: %v)", v)
		for _, s := range sent {
			s.Abort(perr)
		}
		g.metrics.reqError("panic")
		st, err = nil, &RequestError{Status: http.StatusInternalServerError, Code: "internal_error", Message: perr.Error(), Cause: perr}
	}()
	f, err := g.generate(ctx, r, &sent, &tk)
	if err != nil {
		tk.Done(0)
		return nil, err
	}
	if tk != nil {
		return &admitted{flight: f, tk: tk}, nil
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
		defer g.guard.here("request channel", nil) // Next recovers its own; this guards the loop
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

// generate dispatches one request in steps: admit (validate it) → enter
// the admission queue (its ticket in *tk) → its first attempt (flight.launch: pick its legs, waiting for a routable
// worker → encode each leg's request with a fresh rid and room → submit
// the legs → with prompt logprobs asked, await the prefill's), retried as
// gateway.retry says while each failure is still a clean error before any
// response → start its flight, which Next drives through the attempt and
// any later one (flight.go). Only the failure that ends the request is
// counted.
func (g *Dispatcher) generate(ctx context.Context, r tokenapi.Request, sent *[]*lane.Stream, tk **admission.Ticket) (*flight, error) {
	traffic.FromContext(ctx).ID(r.RID) // the access line's id unless the client sent one
	sp, err := g.admit(&r)
	if err != nil {
		g.metrics.reqError("invalid_request")
		return nil, err
	}
	// Its place in the admission queue (admit.go), and its deadline for
	// waiting, in ctx from here on.
	if ctx, *tk, err = g.enter(ctx, &r); err != nil {
		g.metrics.reqError(front.As(err).Code)
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

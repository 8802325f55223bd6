package dispatch

// A request's flight (docs/protocol.md §8.4, §11.9): the request's facts,
// what its attempts delivered so far, and the current attempt
// (attempt.go), a fresh value per try: a PD pair (with encode legs for
// images) under a fresh rid and bootstrap room, or one leg on an
// aggregated engine (docs/protocol.md §11.12). An attempt that fails
// before any token reached the client is made again elsewhere (a
// retry); one whose decode (or aggregated engine) dies after tokens were
// sent continues elsewhere (a migration: the prompt plus the tokens
// sent, the rest of the budget), so the client sees one stream. What follows a failure
// is DecideRetry's (retry.go); the flight only executes it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/gateway/wire"
)

// attemptErr is how an attempt failed: what the retry decision needs
// (class, decode), where the next attempt should not go (avoid), whose
// breakers count it (blame), and what ends the request when nothing
// follows: ev (a terminal event, an abort finish) or else err (before any
// response a *RequestError, the status the client gets), counted in
// smg_router_request_errors_total as metric.
type attemptErr struct {
	class  Failure
	metric string
	err    error
	ev     *tokenapi.Event
	// finished: ev is an engine's own finish (counted as one).
	finished bool
	avoid    []*lane.Worker
	blame    []*lane.Worker
	decode   bool // the decode leg's failure
}

func fatal(metric string, err error) *attemptErr {
	return &attemptErr{class: FailFatal, metric: metric, err: err}
}

// requestFacts is what a flight knows of its request from the start and keeps
// as it was: its contexts (the client's, and one under the request
// deadline), its record in the traffic account, the retry knobs it
// found, and the request as the client asked.
type requestFacts struct {
	parent, ctx context.Context
	cancel      context.CancelFunc
	deadline    time.Time
	rec         *traffic.Rec // the request's record in the traffic account (gateway/traffic)
	retry       RetryConfig  // gateway.retry as the request found it
	orig        tokenapi.Request
}

// flight is one dispatched request as Next drives it, in steps: the
// request's facts, what its attempts delivered so far, its current
// attempt, and the event the last step produced. Only the goroutine
// reading it touches it: the one that called Stream, or Generate's
// (docs/architecture.md §3.2). It is the request's tokenapi.Streamer.
type flight struct {
	g *Dispatcher
	requestFacts

	// send is what the next attempt sends (a migration's prompt and
	// budget), sp its sampling in wire form; sent is the streams the
	// attempt being made submitted (Stream's panic boundary aborts them).
	send tokenapi.Request
	sp   wire.SamplingParams
	sent *[]*lane.Stream

	cur      attempt // the current attempt: a fresh value per try
	attempts int
	migrated bool
	avoid    avoid // the workers failed attempts ran on (nil until one failed)
	// emitted is every token handed to the front end, in order: a
	// migration's prompt continues with it. base is how many there were
	// when the current attempt started: its engine counts from there.
	emitted []int32
	base    int

	began    time.Time // the first dispatch: TTFT and duration count from here
	last     time.Time // the last output relayed
	first    bool      // no token relayed yet
	promptTk int
	promptLP []float64 // rides on the first event

	// ready is the event the last step produced, for Next to return
	// (has); more holds any further one a step produced (rare: one step
	// emits at most one in practice). running: the first Next began the
	// attempt's watches; over: the request ended and its end was
	// accounted (end).
	ready              tokenapi.Event
	more               []tokenapi.Event
	has, running, over bool
}

func (g *Dispatcher) newFlight(parent context.Context, r tokenapi.Request, sp wire.SamplingParams, sent *[]*lane.Stream) *flight {
	f := &flight{g: g, send: r, sp: sp, sent: sent, first: true}
	f.requestFacts = requestFacts{parent: parent, rec: traffic.FromContext(parent), retry: g.live.config().retry, orig: r,
		deadline: time.Now().Add(g.opts.RequestTimeout)}
	f.ctx, f.cancel = context.WithDeadline(parent, f.deadline)
	return f
}

// launch makes the request's first attempt, and more while each failure
// is one DecideRetry retries (before any response there is nothing to
// migrate); nil: one is under way.
func (f *flight) launch() *attemptErr {
	ae := f.try()
	for ae != nil {
		v, d := f.decide(ae)
		if v != VerdictRetry {
			return ae
		}
		if ae = f.wait(d); ae == nil {
			ae = f.try()
		}
	}
	return nil
}

// try makes one attempt: pick its route and ranks (waiting for a
// routable worker), encode its legs under a fresh rid (and room), submit
// them, and with prompt logprobs asked await them (the prefill's, or the
// aggregated engine's first output). On failure nothing of it is left
// running.
func (f *flight) try() *attemptErr {
	g := f.g
	f.attempts++
	f.cur = attempt{}
	*f.sent = (*f.sent)[:0]
	rt, err := g.routes.pickQueued(f.ctx, &f.send, Room(g.rng.Uint64()), f.avoid)
	if err != nil {
		switch {
		case f.parent.Err() != nil:
			return fatal("client_disconnected", err)
		case f.ctx.Err() != nil:
			return f.deadlineErr("")
		}
		return fatal("no_workers", err)
	}
	p, ae := encodeLegs(g, f.send, f.sp, rt, f.avoid)
	if ae != nil {
		return ae
	}
	// The engines log this rid: on the access line it joins the gateway's
	// line to theirs. Every attempt's fresh one goes there.
	f.rec.EngineRID(p.rid)
	a, ae := submit(g.enc, p, rt, f.sent)
	if ae != nil {
		return ae
	}
	if !a.oneLeg() {
		g.metrics.selected(rt.pre)
	}
	g.metrics.selected(rt.dec)
	recordLegs(f.parent, &a, len(f.orig.InputIDs))
	g.routes.note(f.parent, rt.info, a.pre.s, a.dec.s)
	if f.began.IsZero() {
		f.began = a.start
	}
	f.cur = a
	if p.wantPrompt {
		res, ae := f.awaitPrompt()
		if ae != nil {
			f.cur.leave(f.rec)
			return ae
		}
		if res.out.HasPromptLogprobs {
			// Delivered once, on the first event: a later attempt need not
			// ask for them again.
			f.promptLP = res.out.PromptLogprobs
			f.send.LogprobStartLen = -1
		}
		if f.cur.oneLeg() {
			// The first output, prompt logprobs and tokens: the flight
			// relays it first.
			f.cur.dec.pending, f.cur.dec.has = res, true
			if res.out.Finished != "" {
				f.cur.dec.wake = nil
			}
			return nil
		}
		f.cur.pre.hold(res)
		f.cur.dec.s.Expect()
	}
	return nil
}

// start makes the flight the request's Streamer: Next drives it from here.
func (f *flight) start() {
	g := f.g
	g.inflight.Add(1)
	g.metrics.dispatched(len(f.orig.InputIDs))
	*f.sent = nil
	f.sent = new([]*lane.Stream) // the flight owns the legs now, later attempts' too
}

// Next runs the flight until it produces the next event: it relays
// decode outputs, watches the prefill and encode legs, and on a failure,
// client cancel or the deadline ends the attempt and makes the next one
// or ends the request. Behind the request's recover boundary: a panic
// ends this one request with an error event and aborts its legs.
func (f *flight) Next() (ev tokenapi.Event, ok bool) {
	if f.has {
		return f.pop(), true
	}
	if f.over {
		return tokenapi.Event{}, false
	}
	defer f.g.guard.here("request", func(err error) {
		f.abortAttempt(err)
		f.g.metrics.reqError("panic")
		f.rec.Fail("panic")
		f.ready, f.more, f.has = tokenapi.Event{}, nil, false
		f.end()
		ev, ok = tokenapi.Event{Err: fmt.Errorf("%w; both legs aborted", err)}, true
	})
	if !f.running {
		f.running = true
		if h := f.g.opts.HookRun; h != nil {
			h()
		}
		f.cur.enc.begin(f.g.enc)
	}
	for !f.has {
		if f.step() {
			f.end()
			break
		}
	}
	if f.has {
		return f.pop(), true
	}
	return tokenapi.Event{}, false
}

func (f *flight) pop() tokenapi.Event {
	ev := f.ready
	f.ready, f.has = tokenapi.Event{}, false
	if len(f.more) > 0 {
		f.ready, f.has = f.more[0], true
		f.more = f.more[1:]
	}
	return ev
}

// Buffered reports an event Next returns without waiting: one already
// produced, or a decode output queued.
func (f *flight) Buffered() bool {
	if f.has {
		return true
	}
	if f.over || !f.running {
		return false
	}
	return f.cur.buffered()
}

// Close ends a request its reader walked away from (the client went, a
// local stop, an error front-end side): as the client's cancel does, its
// legs are aborted and it is counted gone (logged 499).
func (f *flight) Close() {
	if f.over {
		return
	}
	defer f.g.guard.here("request close", nil)
	err := f.parent.Err()
	if err == nil {
		err = context.Canceled
	}
	f.abortAttempt(err)
	f.g.metrics.reqError("client_disconnected")
	f.rec.Gone(err)
	f.ready, f.more, f.has = tokenapi.Event{}, nil, false
	f.end()
}

// end accounts the request's end once: its attempts on the access line,
// encode legs still running, the embedding watch, the deadline's timer,
// the in-flight count.
func (f *flight) end() {
	if f.over {
		return
	}
	f.over = true
	if f.running {
		f.noteAttempts()
		f.cur.endEncodes(f.g.opts.DrainGrace, f.g.guard)
		f.cur.enc.stopWatching()
	}
	f.cancel()
	f.g.inflight.Add(-1)
}

// step handles what the current attempt has for the flight, or waits for
// the next thing that happens to the request (a leg's wake-up, the
// context, an encode event) and handles it; true: the request is over.
// A pending result is handled before anything is awaited: the prefill's
// terminal output, then the decode's next output (the steady path: a
// token relayed without entering the select).
func (f *flight) step() (done bool) {
	a := &f.cur
	a.poll()
	if f.ctx.Err() == nil {
		switch {
		case a.pre.has:
			return f.onPrefill(a.pre.take())
		case a.dec.has:
			return f.onDecode(a.dec.take())
		}
	}
	encs, deaths := a.enc.channels()
	select {
	case <-a.pre.wake:
		return false // the next step's poll takes what arrived
	case <-a.dec.wake:
		return false
	case <-f.ctx.Done():
		return f.onDeadline()
	case er := <-encs:
		return f.onEncode(er)
	case d := <-deaths:
		return f.onEncoderDeath(d)
	}
}

// decide records a failed attempt (the workers to avoid, the breakers to
// blame, the count) and returns DecideRetry's verdict and delay.
func (f *flight) decide(ae *attemptErr) (Verdict, time.Duration) {
	for _, w := range ae.avoid {
		if f.avoid == nil {
			f.avoid = avoid{}
		}
		f.avoid[w] = true
	}
	if blames(ae.class) {
		for _, w := range ae.blame {
			f.report(w, BreakerFailure)
		}
	}
	a := Attempted{Attempts: f.attempts, Sent: len(f.emitted), Streaming: f.cur.streaming, Decode: ae.decode, Left: time.Until(f.deadline)}
	v, d, _ := DecideRetry(f.retry, ae.class, a, f.g.rng.Float64())
	f.g.metrics.attemptFailed(ae.class, v)
	return v, d
}

// report tells w's breaker how a leg on it went, against the epoch it was
// routed by.
func (f *flight) report(w *lane.Worker, ev BreakerEvent) {
	if !f.g.breakers.on() || w == nil {
		return
	}
	f.g.breakers.report(outcome{role: w.Role(), epoch: f.cur.view.epoch(w.Role()), ev: ev}, f.g.shutdown)
}

// wait sleeps the backoff d; the client going away or the deadline ends
// the wait with the request's end.
func (f *flight) wait(d time.Duration) *attemptErr {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-f.ctx.Done():
		if f.parent.Err() != nil {
			return fatal("client_disconnected", f.parent.Err())
		}
		return f.deadlineErr("")
	}
}

func (f *flight) deadlineErr(waiting string) *attemptErr {
	return fatal("timeout", &RequestError{Status: http.StatusGatewayTimeout, Code: "timeout",
		Message: fmt.Sprintf("request deadline of %s exceeded%s; both legs aborted", f.g.opts.RequestTimeout, waiting), Cause: context.DeadlineExceeded})
}

// attemptFailed handles a failure of the current attempt: the retry
// decision, then another attempt (a retry, or a migration once tokens
// went out) or the request's end. true: the request is over.
func (f *flight) attemptFailed(ae *attemptErr) bool {
	v, d := f.decide(ae)
	if v == VerdictContinue {
		return false
	}
	f.abortAttempt(ae.err)
	for {
		switch v {
		case VerdictFail, VerdictContinue:
			f.endWith(ae)
			return true
		case VerdictMigrate:
			if f.migrate() {
				return true
			}
		}
		if ae = f.wait(d); ae == nil {
			if ae = f.try(); ae == nil {
				f.cur.enc.begin(f.g.enc)
				return false
			}
		}
		v, d = f.decide(ae)
	}
}

// migrate makes the next attempt the continuation of the stream: the
// client's prompt plus every token it was sent, for the rest of its
// max_new_tokens and min_tokens, without prompt logprobs (delivered). True
// when the budget is already spent: the request ends here, with length.
func (f *flight) migrate() (done bool) {
	f.migrated = true
	sent := len(f.emitted)
	r := f.orig
	r.InputIDs = append(append(make([]int32, 0, len(f.orig.InputIDs)+sent), f.orig.InputIDs...), f.emitted...)
	if m := f.orig.Sampling.MaxNewTokens; m != nil {
		left := *m - sent
		if left <= 0 {
			f.finishLocal(tokenapi.FinishLength)
			return true
		}
		r.Sampling.MaxNewTokens = &left
	}
	r.Sampling.MinNewTokens = max(0, f.orig.Sampling.MinNewTokens-sent)
	r.LogprobStartLen = -1
	// The client's sampling passed admission and only its budget shrank.
	sp, _ := r.Sampling.Wire()
	f.send, f.sp, f.base = r, sp, sent
	return false
}

// endWith ends the request with the failure that ended its last attempt.
func (f *flight) endWith(ae *attemptErr) {
	if ae.metric == "client_disconnected" {
		f.g.metrics.reqError(ae.metric)
		f.rec.Gone(f.parent.Err()) // logged 499
		return                     // nobody is listening
	}
	if ae.ev == nil {
		f.fail(ae.metric, tokenapi.Event{Err: ae.err})
		return
	}
	ev := *ae.ev
	if ae.finished {
		now := time.Now()
		f.observeTokens(len(ev.TokenIDs), now)
		f.g.metrics.finished(ev.Finish.Reason, now.Sub(f.began))
	}
	f.fail(ae.metric, ev)
}

// finishLocal ends a migrated stream whose budget was spent when its
// decode died: the client has every token it asked for.
func (f *flight) finishLocal(reason string) {
	now := time.Now()
	f.g.metrics.finished(reason, now.Sub(f.began))
	f.emit(tokenapi.Event{PromptTokens: f.promptTk, OutputTokens: len(f.emitted), Finish: &tokenapi.Finish{Reason: reason}})
}

// noteAttempts puts the request's attempts on its access line.
func (f *flight) noteAttempts() { f.rec.Attempts(f.attempts-1, f.migrated) }

// abortAttempt ends every leg of the current attempt with err and takes
// them out of the in-flight counts.
func (f *flight) abortAttempt(err error) {
	f.cur.abort(err)
	f.cur.leave(f.rec)
}

// emit hands ev to Next.
func (f *flight) emit(ev tokenapi.Event) {
	if f.has {
		f.more = append(f.more, ev)
		return
	}
	f.ready, f.has = ev, true
}

func (f *flight) fail(kind string, ev tokenapi.Event) {
	f.g.metrics.reqError(kind)
	f.rec.Fail(kind)
	f.emit(ev)
}

// onDeadline: the client went away or the request deadline passed.
func (f *flight) onDeadline() bool {
	f.cur.abortLegs(f.ctx.Err())
	if f.parent.Err() != nil {
		f.g.metrics.reqError("client_disconnected")
		f.rec.Gone(f.parent.Err())
		return true // nobody is listening
	}
	f.fail("timeout", tokenapi.Event{Err: fmt.Errorf("request deadline of %s exceeded; both legs aborted", f.g.opts.RequestTimeout)})
	return true
}

// onEncode: an encode leg ended; on success its encoder is watched until
// the prefill fetched the embedding.
func (f *flight) onEncode(er encodeResult) bool {
	a := &f.cur
	s := a.enc.legs[er.item]
	if err := encodeFailure(er); err != nil {
		if f.ctx.Err() != nil {
			return false // onDeadline reports it
		}
		w := s.Worker()
		return f.attemptFailed(&attemptErr{class: FailEncode, metric: "encode_failed", err: err,
			avoid: []*lane.Worker{w}, blame: []*lane.Worker{w}})
	}
	if a.enc.ended() {
		recordEncoded(f.rec)
		a.pre.s.Expect() // the embeddings exist: the prefill owes output now
	}
	if !a.pre.done {
		a.enc.watchEncoder(f.g.enc, s, a.start)
	}
	return false
}

// onEncoderDeath: an encoder holding this attempt's embedding died.
func (f *flight) onEncoderDeath(d encodeDeath) bool {
	a := &f.cur
	if a.pre.s.Done() || f.ctx.Err() != nil {
		// The prefill's end (or onDeadline) is reported instead.
		a.enc.deaths = nil
		return false
	}
	err := fmt.Errorf("encode worker %s died before prefill %s received the image embedding (%s); both legs aborted", d.role, a.pre.w.Role(), d.why)
	var ws []*lane.Worker
	if w, ok := f.g.lane.Worker(d.role); ok {
		ws = []*lane.Worker{w}
	}
	return f.attemptFailed(&attemptErr{class: FailEncode, metric: "encode_worker_died", err: err, avoid: ws, blame: ws})
}

// onPrefill: the prefill leg ended; a failure or abort fails the attempt
// (unless the decode already streams: it has the KV).
func (f *flight) onPrefill(pr legResult) bool {
	a := &f.cur
	a.pre.done = true
	a.cached.prefill(pr)
	if a.enc != nil {
		a.enc.stopWatching()
		a.enc.deaths = nil
	}
	a.dec.s.Expect() // its KV is ready (or the attempt ends below)
	switch {
	case pr.err != nil && f.ctx.Err() != nil:
		// onDeadline reports it
	case pr.err != nil:
		return f.attemptFailed(failedLeg("prefill", a.pre.leg, pr.err, false))
	case pr.out.Finished == wire.FinishAbort || pr.out.Finished == wire.FinishError:
		// A KV transfer or bootstrap failure ends the prefill so: either
		// side may be at fault, so the next attempt avoids both.
		ev := tokenapi.Event{PromptTokens: pr.out.PromptTokens, Finish: &tokenapi.Finish{Reason: tokenapi.FinishAbort, Message: "prefill leg aborted (" + pr.out.Finished + ")"}}
		return f.attemptFailed(&attemptErr{class: FailAborted, metric: "prefill_aborted", ev: &ev,
			avoid: []*lane.Worker{a.pre.w, a.dec.w}, blame: []*lane.Worker{a.pre.w}})
	default:
		recordPrefill(f.rec, a.pre.s, pr.out)
	}
	return false
}

// onDecode relays one decode output; its terminal one ends the request.
func (f *flight) onDecode(dr legResult) bool {
	a := &f.cur
	if dr.err != nil {
		if f.ctx.Err() != nil {
			return false // onDeadline reports it
		}
		if errors.Is(dr.err, io.EOF) {
			dr.err = errors.New("decode stream ended without a finish")
		}
		return f.attemptFailed(failedLeg("decode", a.dec.leg, dr.err, true))
	}
	o := dr.out
	if o.PromptTokens > 0 && f.base == 0 {
		f.promptTk = o.PromptTokens // a migration's prompt holds the tokens sent: the client's stays
	}
	a.cached.decode(o)
	ev := tokenapi.Event{TokenIDs: o.TokenIDs, Logprobs: o.Logprobs, PromptTokens: f.promptTk, OutputTokens: f.base + o.CompletionTokens, PromptLogprobs: f.promptLP,
		TopLogprobs: topLogprobs(o.TopLogprobs, o.TopLogprobIDs), CachedTokens: a.cached.n}
	if o.Finished == wire.FinishAbort || o.Finished == wire.FinishError {
		// The engine ended the stream itself: before any token reached the
		// client it is worth another attempt; after, the client sees it.
		ev.Finish = finishOf(o.Finished)
		last := ev // its own copy: ev stays off the heap on the token path
		return f.attemptFailed(&attemptErr{class: FailAborted, metric: "engine_abort", ev: &last, finished: true, decode: true,
			avoid: a.workers(), blame: []*lane.Worker{a.dec.w}})
	}
	now := time.Now()
	f.observeTokens(len(o.TokenIDs), now)
	f.promptLP = nil
	if len(o.TokenIDs) > 0 {
		a.streaming = true
	}
	if o.Finished != "" {
		if a.oneLeg() {
			recordPrefill(f.rec, a.dec.s, o) // the engine computed the prompt too
		}
		a.awaitPrefillCount(f.ctx, f.g.opts.DrainGrace)
		ev.CachedTokens = a.cached.n
		f.finish(ev, o.Finished, now)
		return true
	}
	f.emit(ev)
	if f.emitted == nil && len(o.TokenIDs) > 0 {
		f.emitted = make([]int32, 0, f.emittedCap())
	}
	f.emitted = append(f.emitted, o.TokenIDs...)
	return false
}

// emittedStart bounds the capacity emitted starts with.
const emittedStart = 512

// emittedCap is the capacity emitted starts with: the client's
// max_new_tokens, at most emittedStart. A stream within it never regrows
// emitted as its tokens arrive (grown by doubling from nothing, each
// step was an allocation BenchmarkDecodePathChat counted per token),
// and a request that asked for more still costs at most emittedStart
// tokens up front.
func (f *flight) emittedCap() int {
	if m := f.orig.Sampling.MaxNewTokens; m != nil && *m < emittedStart {
		return max(*m, 1)
	}
	return emittedStart
}

// observeTokens counts n new output tokens (TTFT, ITL, throughput).
func (f *flight) observeTokens(n int, now time.Time) {
	if n == 0 {
		return
	}
	recordOutput(f.rec, f.cur.dec.w.Role(), f.first, now.Sub(f.last), n)
	m := f.g.metrics
	if f.first {
		m.TTFT.Observe(now.Sub(f.began).Seconds())
		m.RouterTTFT.Observe(now.Sub(f.began).Seconds())
		f.first = false
	} else {
		m.ITL.Observe(now.Sub(f.last).Seconds() / float64(n))
	}
	f.last = now
	m.OutTokens.Add(float64(n))
}

// finish sends the terminal event of a stream that ended well; a prefill
// leg still running is given the drain grace to deliver its own terminal
// output. The attempt's workers' breakers count a success.
func (f *flight) finish(ev tokenapi.Event, finished string, now time.Time) {
	a := &f.cur
	ev.Finish = finishOf(finished)
	if !a.pre.done {
		ps, g := a.pre.s, f.g
		time.AfterFunc(g.opts.DrainGrace, func() {
			defer g.guard.here("prefill drain", nil)
			ps.Abort(nil)
		})
	}
	f.g.metrics.finished(ev.Finish.Reason, now.Sub(f.began))
	a.succeeded = true
	f.report(a.pre.w, BreakerSuccess)
	f.report(a.dec.w, BreakerSuccess)
	for _, s := range a.encodeLegs() {
		f.report(s.Worker(), BreakerSuccess)
	}
	f.emit(ev)
}

// awaitPrompt waits for the prompt logprobs when they were asked, so
// that an engine which cannot compute them is a clean 400 before any
// response (streaming included) has started: in PD the prefill leg's
// terminal output (the decode leg's outputs queue on its stream
// meanwhile; it cannot produce a token before the prefill's KV arrives
// anyway), in a one-leg attempt the aggregated engine's first output,
// which carries them beside its first tokens. An abort for another
// reason is returned as the result for the flight to report.
func (f *flight) awaitPrompt() (legResult, *attemptErr) {
	a, r := &f.cur, f.send
	one := a.oneLeg()
	l, name := &a.pre, "prefill"
	if one {
		l, name = &a.dec, "aggregated"
	}
	var o lane.Output
	var err error
	for {
		if o, err = l.s.Recv(f.ctx); err != nil || o.Finished != "" || one {
			break
		}
	}
	if err != nil {
		a.abort(err)
		switch {
		case f.parent.Err() != nil:
			return legResult{}, fatal("client_disconnected", f.parent.Err())
		case f.ctx.Err() != nil:
			return legResult{}, f.deadlineErr(" waiting for the " + name + "'s prompt logprobs")
		}
		return legResult{}, &attemptErr{class: legFailureKind(err), metric: legFailure(name+"_failed", err), avoid: []*lane.Worker{l.w}, blame: []*lane.Worker{l.w},
			decode: one, err: &RequestError{Status: http.StatusBadGateway, Code: name + "_failed", Message: name + " leg failed: " + err.Error(), Cause: err}}
	}
	abortRest := func() {
		a.dec.s.Abort(nil)
		for _, s := range a.encodeLegs() {
			s.Abort(nil)
		}
	}
	// An engine's refusal may carry empty input-logprob columns; a prompt
	// of at least one token past logprob_start_len always has a value.
	got := o.HasPromptLogprobs && len(o.PromptLogprobs) > 0
	ferr := epd.PromptLogprobFailure(o.Finished, o.AbortMessage, got)
	if ferr == nil && one && !got && o.Finished == "" {
		// An aggregated engine that answers without them cannot compute
		// them: its first output is where they belong.
		ferr = fmt.Errorf("%w: its first output has no input logprobs", epd.ErrPromptLogprobsUnsupported)
	}
	if ferr != nil {
		abortRest()
		return legResult{}, fatal("invalid_request", &RequestError{Status: http.StatusBadRequest, Code: "prompt_logprobs_unsupported", Param: "logprob_start_len", Message: ferr.Error(), Cause: ferr})
	}
	if got {
		if cerr := epd.CheckPromptLogprobs(epd.TokenLogprobs{Vals: o.PromptLogprobs, IDs: o.PromptLogprobIDs}, r.InputIDs, r.LogprobStartLen); cerr != nil {
			abortRest()
			return legResult{}, fatal(name+"_failed", &RequestError{Status: http.StatusBadGateway, Code: "prompt_logprobs_mismatch", Message: cerr.Error(), Cause: cerr})
		}
	}
	return legResult{out: o}, nil
}

// topLogprobs pairs each token's alternatives' values and ids.
func topLogprobs(vals [][]float64, ids [][]int32) [][]tokenapi.TopLogprob {
	if len(vals) == 0 {
		return nil
	}
	out := make([][]tokenapi.TopLogprob, len(vals))
	for t, vs := range vals {
		alts := make([]tokenapi.TopLogprob, len(vs))
		for j, v := range vs {
			alts[j] = tokenapi.TopLogprob{ID: ids[t][j], Logprob: v}
		}
		out[t] = alts
	}
	return out
}

// legFailure is the error_type a failed leg is counted under: stalls and
// the supervisor's aborts get their own, so /metrics tells them from
// engine deaths.
func legFailure(kind string, err error) string {
	switch {
	case errors.Is(err, lane.ErrRankStalled):
		return "rank_stalled"
	case errors.Is(err, lane.ErrRoleAborted):
		return "role_aborted"
	}
	return kind
}

func finishOf(s string) *tokenapi.Finish {
	switch s {
	case wire.FinishLength:
		return &tokenapi.Finish{Reason: tokenapi.FinishLength}
	case wire.FinishAbort:
		return &tokenapi.Finish{Reason: tokenapi.FinishAbort, Message: "engine aborted the request"}
	case wire.FinishError:
		return &tokenapi.Finish{Reason: tokenapi.FinishAbort, Message: "engine reported an error"}
	default:
		return &tokenapi.Finish{Reason: tokenapi.FinishStop}
	}
}

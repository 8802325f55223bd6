package dispatch

// A request's flight (docs/protocol.md §8.4, §11.9): its attempts, each a
// PD pair (with encode legs for images) under a fresh rid and bootstrap
// room, and what run's goroutine has seen of them. An attempt that fails
// before any token reached the client is made again elsewhere (a retry);
// one whose decode dies after tokens were sent continues on another
// decode (a migration: the prompt plus the tokens sent, the rest of the
// budget), so the client sees one stream. What follows a failure is
// DecideRetry's (retry.go); the flight only executes it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/gateway/wire"
)

// avoid is the workers a request's failed attempts ran on: its next
// attempt goes elsewhere when elsewhere has a routable rank.
type avoid map[*lane.Worker]bool

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

// readRanks is one read of a worker's routable ranks, so a routing
// decision decides on exactly what was read (chooseLegs reads each source
// once).
type readRanks struct {
	name  string
	ranks []lane.RankLoad
	dp    int
}

func (r readRanks) Routable() []lane.RankLoad { return r.ranks }
func (r readRanks) DPSize() int               { return max(r.dp, 1) }
func (r readRanks) Role() string              { return r.name }

// allowed is the pool as one routing decision may see it: a worker whose
// breaker is open is left out, and so are the workers this request's
// failed attempts ran on (av), unless no other has a routable rank. With
// no breakers and nothing to avoid the pool goes as it is.
func (g *Dispatcher) allowed(p *pool, av avoid, view *breakerView) []rankSource {
	if view == nil && len(av) == 0 {
		return p.src
	}
	out := make([]rankSource, len(p.src))
	other := false
	for i, w := range p.workers {
		if !view.allows(w.Role()) {
			out[i] = readRanks{name: w.Role()}
			continue
		}
		rr := readRanks{name: w.Role(), ranks: p.src[i].Routable(), dp: p.src[i].DPSize()}
		out[i] = rr
		if !av[w] && len(rr.ranks) > 0 {
			other = true
		}
	}
	if other {
		for i, w := range p.workers {
			if av[w] {
				out[i] = readRanks{name: w.Role()}
			}
		}
	}
	return out
}

// encodeRoutable is encodeReady less the encoders whose breaker is open.
func (g *Dispatcher) encodeRoutable(view *breakerView) []string {
	names := g.encodeReady()
	if view == nil {
		return names
	}
	out := names[:0:0]
	for _, n := range names {
		if view.allows(n) {
			out = append(out, n)
		}
	}
	return out
}

// encodeRingAvoiding is the encoder ring, less the encoders av holds when
// another is routable: a retry's images go to other encoders (a ring of
// its own, so the shared one keeps its assignments).
func (g *Dispatcher) encodeRingAvoiding(av avoid) *epd.Ring {
	if len(av) == 0 {
		return g.EncodeRing()
	}
	names := g.encodeRoutable(g.breakers.current())
	var keep []string
	for _, n := range names {
		if w, ok := g.lane.Worker(n); !ok || !av[w] {
			keep = append(keep, n)
		}
	}
	if len(keep) == 0 || len(keep) == len(names) {
		return g.EncodeRing()
	}
	return epd.NewRing(keep, 0)
}

// attempt is the flight's current PD pair.
type attempt struct {
	pre, dec leg
	ls       legStreams
	view     *breakerView // the breakers it was routed by (their epochs)
	left     bool         // its legs were taken out of the traffic account's in flight
}

// flight is one dispatched request as Next drives it, in steps: its
// attempts, what has been seen of the current one's legs, and the event
// the last step produced. Only the goroutine reading it touches it: the
// one that called Stream, or Generate's (docs/architecture.md §3.2). It
// is the request's tokenapi.Streamer.
type flight struct {
	g           *Dispatcher
	parent, ctx context.Context
	cancel      context.CancelFunc
	deadline    time.Time
	rec         *traffic.Rec // the request's record in the traffic account (gateway/traffic)
	sent        *[]*lane.Stream

	// out is the event the last step produced, for Next to return (has);
	// more holds any further one a step produced (rare: one step emits
	// at most one in practice). running: the first Next armed the legs;
	// over: the request ended and its end was accounted (end).
	out                tokenapi.Event
	more               []tokenapi.Event
	has, running, over bool

	retry RetryConfig // gateway.retry as the request found it

	orig tokenapi.Request    // as the client asked
	req  tokenapi.Request    // what the next attempt sends (a migration's prompt and budget)
	sp   wire.SamplingParams // req's sampling in wire form

	attempts int
	migrated bool
	avoid    avoid
	// emitted is every token handed to the front end, in order: a
	// migration's prompt continues with it. base is how many there were
	// when the current attempt started: its engine counts from there.
	emitted   []int32
	base      int
	streaming bool // the current attempt's decode sent a token: it holds the KV

	began    time.Time // the first dispatch: TTFT and duration count from here
	first    bool
	last     time.Time
	promptTk int
	promptLP []float64  // rides on the first event
	preRes   *legResult // the prefill's terminal output awaitPrompt took

	cur attempt

	// Both legs are read in step's own select (lane.Stream.Wake and Poll),
	// not by a reader goroutine per leg: an n=1 request costs only the
	// goroutine calling Next. pollLegs moves what arrived into preCh (the
	// prefill's terminal output; its other outputs carry nothing the
	// client needs) and decCh (the decode's next output), each holding at
	// most one result for the select to take.
	preCh, decCh     chan legResult
	preWake, decWake <-chan struct{}

	// Encode legs end with their own terminal output (encCh). Once one
	// has finished, its engine still holds the embedding until the
	// prefill fetched it: that engine's death before the prefill leg ends
	// fails the attempt now (deathCh), not after the prefill's embedding
	// timeout.
	encCh     <-chan encodeResult
	encLeft   int
	deathCh   chan encodeDeath
	watched   map[*lane.Worker]bool
	stopWatch chan struct{}
	stopOnce  *sync.Once
	releases  []func() // pending embeddings this attempt holds (DrainCount)

	preDone, succeeded bool
	cached             cachedCount // the current attempt's cached prompt tokens (usage)
}

type legResult struct {
	out lane.Output
	err error
}

func (g *Dispatcher) newFlight(parent context.Context, r tokenapi.Request, sp wire.SamplingParams, sent *[]*lane.Stream) *flight {
	f := &flight{g: g, parent: parent, rec: traffic.FromContext(parent), sent: sent, orig: r, req: r, sp: sp, first: true, avoid: avoid{},
		retry: g.live.Load().retry}
	f.deadline = time.Now().Add(g.opts.RequestTimeout)
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

// try makes one attempt: pick a pair (waiting for a routable worker),
// encode its legs under a fresh rid and room, submit them, and with
// prompt logprobs asked await the prefill's. On failure nothing of it is
// left running.
func (f *flight) try() *attemptErr {
	g := f.g
	f.attempts++
	f.streaming = false
	*f.sent = (*f.sent)[:0]
	pre, dec, room, ri, view, err := g.pickQueued(f.ctx, &f.req, Room(g.rng.Uint64()), f.avoid)
	if err != nil {
		switch {
		case f.parent.Err() != nil:
			return fatal("client_disconnected", err)
		case f.ctx.Err() != nil:
			return f.deadlineErr("")
		}
		return fatal("no_workers", err)
	}
	p, ae := g.encodeLegs(f.req, f.sp, pre, room, f.avoid)
	if ae != nil {
		return ae
	}
	// The engines log this rid: on the access line it joins the gateway's
	// line to theirs. Every attempt's fresh one goes there.
	f.rec.EngineRID(p.rid)
	ls, ae := g.submit(p, pre, dec, f.sent)
	if ae != nil {
		return ae
	}
	g.metrics.selected(pre, dec)
	recordLegs(f.parent, pre, dec, ls.encs, len(f.orig.InputIDs))
	g.noteRoute(f.parent, ri, ls.ps, ls.ds)
	if f.began.IsZero() {
		f.began = ls.start
	}
	f.cur = attempt{pre: pre, dec: dec, ls: ls, view: view}
	f.preRes = nil
	if p.wantPrompt {
		res, ae := f.awaitPrompt()
		if ae != nil {
			f.leaveAttempt()
			return ae
		}
		f.preRes = &res
		if res.out.HasPromptLogprobs {
			// Delivered once, on the first event: a later attempt need not
			// ask its prefill again.
			f.promptLP = res.out.PromptLogprobs
			f.req.LogprobStartLen = -1
		}
		ls.ds.Expect()
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
	defer f.g.recoverHere("request", func(err error) {
		f.abortAttempt(err)
		f.g.metrics.reqError("panic")
		f.rec.Fail("panic")
		f.out, f.more, f.has = tokenapi.Event{}, nil, false
		f.end()
		ev, ok = tokenapi.Event{Err: fmt.Errorf("%w; both legs aborted", err)}, true
	})
	if !f.running {
		f.running = true
		if h := f.g.opts.HookRun; h != nil {
			h()
		}
		f.arm()
	}
	for !f.has {
		f.pollLegs()
		if len(f.decCh) > 0 && f.preCh == nil && f.ctx.Err() == nil {
			// The steady path: a decode output is waiting and nothing
			// else can be (the prefill is done; a deadline or cancel is
			// seen by step's select once none is waiting): relay it
			// without a select.
			if f.onDecode(<-f.decCh) {
				f.end()
				break
			}
			continue
		}
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
	ev := f.out
	f.out, f.has = tokenapi.Event{}, false
	if len(f.more) > 0 {
		f.out, f.has = f.more[0], true
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
	return len(f.decCh) > 0 || (f.decWake != nil && f.cur.ls.ds.Buffered())
}

// Close ends a request its reader walked away from (the client went, a
// local stop, an error front-end side): as the client's cancel does, its
// legs are aborted and it is counted gone (logged 499).
func (f *flight) Close() {
	if f.over {
		return
	}
	defer f.g.recoverHere("request close", nil)
	err := f.parent.Err()
	if err == nil {
		err = context.Canceled
	}
	f.abortAttempt(err)
	f.g.metrics.reqError("client_disconnected")
	f.rec.Gone(err)
	f.out, f.more, f.has = tokenapi.Event{}, nil, false
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
		f.endEncodes()
		f.stopWatching()
	}
	f.cancel()
	f.g.inflight.Add(-1)
}

// arm sets up run's view of the current attempt's legs.
func (f *flight) arm() {
	f.preCh, f.decCh = make(chan legResult, 1), make(chan legResult, 1)
	f.decWake, f.preWake = f.cur.ls.ds.Wake(), nil
	f.preDone, f.succeeded, f.streaming = false, false, false
	f.cached = cachedCount{}
	f.encLeft, f.encCh, f.deathCh = len(f.cur.ls.encs), nil, nil
	f.watched, f.stopWatch, f.stopOnce, f.releases = map[*lane.Worker]bool{}, make(chan struct{}), &sync.Once{}, nil
	if f.encLeft > 0 {
		f.encCh = f.g.watchEncodes(f.cur.ls.encs)
	}
	if f.preRes != nil {
		f.preCh <- *f.preRes
		f.preRes = nil
	} else {
		f.preWake = f.cur.ls.ps.Wake()
	}
}

// step waits for the next thing that happens to the request and handles
// it; true: the request is over.
func (f *flight) step() (done bool) {
	select {
	case <-f.preWake:
		return false // pollLegs takes what arrived
	case <-f.decWake:
		return false // pollLegs polls the decode whenever decCh is empty
	case <-f.ctx.Done():
		return f.onDeadline()
	case er := <-f.encCh:
		return f.onEncode(er)
	case d := <-f.deathCh:
		return f.onEncoderDeath(d)
	case pr := <-f.preCh:
		return f.onPrefill(pr)
	case dr := <-f.decCh:
		return f.onDecode(dr)
	}
}

func (f *flight) pollLegs() {
	for f.preWake != nil {
		o, ok, err := f.cur.ls.ps.Poll()
		if !ok {
			break
		}
		if err != nil || o.Finished != "" {
			f.preCh <- legResult{o, err}
			f.preWake = nil
		}
	}
	if f.decWake != nil && len(f.decCh) == 0 {
		if o, ok, err := f.cur.ls.ds.Poll(); ok {
			f.decCh <- legResult{o, err}
			if err != nil || o.Finished != "" {
				f.decWake = nil
			}
		}
	}
}

// decide records a failed attempt (the workers to avoid, the breakers to
// blame, the count) and returns DecideRetry's verdict and delay.
func (f *flight) decide(ae *attemptErr) (Verdict, time.Duration) {
	for _, w := range ae.avoid {
		f.avoid[w] = true
	}
	if blames(ae.class) {
		for _, w := range ae.blame {
			f.report(w, BreakerFailure)
		}
	}
	a := Attempted{Attempts: f.attempts, Sent: len(f.emitted), Streaming: f.streaming, Decode: ae.decode, Left: time.Until(f.deadline)}
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
		Message: fmt.Sprintf("request deadline of %s exceeded%s; both legs aborted", f.g.opts.RequestTimeout, waiting)})
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
				f.arm()
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
	f.req, f.sp, f.base = r, sp, sent
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

// abortAttempt ends every leg of the current attempt with err.
func (f *flight) abortAttempt(err error) {
	if f.cur.ls.ps == nil {
		return
	}
	f.cur.ls.ps.Abort(err)
	f.cur.ls.ds.Abort(err)
	f.cur.ls.abortEncodes(err)
	f.stopWatching()
	f.leaveAttempt()
}

// leaveAttempt takes the current attempt's legs out of the in-flight
// counts of the roles they ran on (the request still counts there when
// it ends), once.
func (f *flight) leaveAttempt() {
	if f.cur.left || f.cur.ls.ps == nil {
		return
	}
	f.cur.left = true
	for _, s := range f.cur.ls.encs {
		f.rec.Leave(s.Worker().Role())
	}
	f.rec.Leave(f.cur.pre.w.Role())
	f.rec.Leave(f.cur.dec.w.Role())
}

// endEncodes ends encode legs still running when the request ends: now
// on failure, after the drain grace on success (their answer may be in
// flight).
func (f *flight) endEncodes() {
	if len(f.cur.ls.encs) == 0 {
		return
	}
	encs, g := f.cur.ls.encs, f.g
	if f.succeeded {
		time.AfterFunc(g.opts.DrainGrace, func() {
			defer g.recoverHere("encode drain", nil)
			for _, s := range encs {
				s.Abort(nil)
			}
		})
		return
	}
	for _, s := range encs {
		s.Abort(nil)
	}
}

func (f *flight) stopWatching() {
	if f.stopOnce == nil {
		return
	}
	f.stopOnce.Do(func() {
		close(f.stopWatch)
		for _, r := range f.releases {
			r()
		}
	})
}

// emit hands ev to Next.
func (f *flight) emit(ev tokenapi.Event) bool {
	if f.has {
		f.more = append(f.more, ev)
		return true
	}
	f.out, f.has = ev, true
	return true
}

func (f *flight) fail(kind string, ev tokenapi.Event) {
	f.g.metrics.reqError(kind)
	f.rec.Fail(kind)
	f.emit(ev)
}

// abortLegs ends both PD legs with err.
func (f *flight) abortLegs(err error) {
	f.cur.ls.ps.Abort(err)
	f.cur.ls.ds.Abort(err)
}

// onDeadline: the client went away or the request deadline passed.
func (f *flight) onDeadline() bool {
	f.abortLegs(f.ctx.Err())
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
	if err := encodeFailure(er); err != nil {
		if f.ctx.Err() != nil {
			return false // onDeadline reports it
		}
		w := f.cur.ls.encs[er.item].Worker()
		return f.attemptFailed(&attemptErr{class: FailEncode, metric: "encode_failed", err: err,
			avoid: []*lane.Worker{w}, blame: []*lane.Worker{w}})
	}
	if f.encLeft--; f.encLeft == 0 {
		f.encCh = nil
		recordEncoded(f.rec)
		f.cur.ls.ps.Expect() // the embeddings exist: the prefill owes output now
	}
	if w := f.cur.ls.encs[er.item].Worker(); !f.preDone && !f.watched[w] {
		if f.deathCh == nil {
			f.deathCh = make(chan encodeDeath, len(f.cur.ls.encs))
		}
		f.watched[w] = true
		f.releases = append(f.releases, f.g.holdEmbed(w.Role()))
		f.g.watchEncoder(f.cur.ls.encs[er.item], f.cur.ls.start, f.stopWatch, f.deathCh)
	}
	return false
}

// onEncoderDeath: an encoder holding this attempt's embedding died.
func (f *flight) onEncoderDeath(d encodeDeath) bool {
	if f.cur.ls.ps.Done() || f.ctx.Err() != nil {
		// The prefill's end (or onDeadline) is reported instead.
		f.deathCh = nil
		return false
	}
	err := fmt.Errorf("encode worker %s died before prefill %s received the image embedding (%s); both legs aborted", d.role, f.cur.pre.w.Role(), d.why)
	var ws []*lane.Worker
	if w, ok := f.g.lane.Worker(d.role); ok {
		ws = []*lane.Worker{w}
	}
	return f.attemptFailed(&attemptErr{class: FailEncode, metric: "encode_worker_died", err: err, avoid: ws, blame: ws})
}

// onPrefill: the prefill leg ended; a failure or abort fails the attempt
// (unless the decode already streams: it has the KV).
func (f *flight) onPrefill(pr legResult) bool {
	f.preCh = nil
	f.preDone = true
	f.cached.prefill(pr)
	f.stopWatching()
	f.deathCh = nil
	f.cur.ls.ds.Expect() // its KV is ready (or the attempt ends below)
	pw := f.cur.pre.w
	switch {
	case pr.err != nil && f.ctx.Err() != nil:
		// onDeadline reports it
	case pr.err != nil:
		return f.attemptFailed(&attemptErr{class: legFailureKind(pr.err), metric: legFailure("prefill_failed", pr.err),
			err: fmt.Errorf("prefill leg failed: %w", pr.err), avoid: []*lane.Worker{pw}, blame: []*lane.Worker{pw}})
	case pr.out.Finished == wire.FinishAbort || pr.out.Finished == wire.FinishError:
		// A KV transfer or bootstrap failure ends the prefill so: either
		// side may be at fault, so the next attempt avoids both.
		ev := tokenapi.Event{PromptTokens: pr.out.PromptTokens, Finish: &tokenapi.Finish{Reason: tokenapi.FinishAbort, Message: "prefill leg aborted (" + pr.out.Finished + ")"}}
		return f.attemptFailed(&attemptErr{class: FailAborted, metric: "prefill_aborted", ev: &ev,
			avoid: []*lane.Worker{pw, f.cur.dec.w}, blame: []*lane.Worker{pw}})
	default:
		recordPrefill(f.rec, f.cur.ls.ps, pr.out)
	}
	return false
}

// onDecode relays one decode output; its terminal one ends the request.
func (f *flight) onDecode(dr legResult) bool {
	dw := f.cur.dec.w
	if dr.err != nil {
		if f.ctx.Err() != nil {
			return false // onDeadline reports it
		}
		if errors.Is(dr.err, io.EOF) {
			dr.err = errors.New("decode stream ended without a finish")
		}
		return f.attemptFailed(&attemptErr{class: legFailureKind(dr.err), metric: legFailure("decode_failed", dr.err),
			err: fmt.Errorf("decode leg failed: %w", dr.err), decode: true, avoid: []*lane.Worker{dw}, blame: []*lane.Worker{dw}})
	}
	o := dr.out
	if o.PromptTokens > 0 && f.base == 0 {
		f.promptTk = o.PromptTokens // a migration's prompt holds the tokens sent: the client's stays
	}
	f.cached.decode(o)
	ev := tokenapi.Event{TokenIDs: o.TokenIDs, Logprobs: o.Logprobs, PromptTokens: f.promptTk, OutputTokens: f.base + o.CompletionTokens, PromptLogprobs: f.promptLP,
		TopLogprobs: topLogprobs(o.TopLogprobs, o.TopLogprobIDs), CachedTokens: f.cached.n}
	if o.Finished == wire.FinishAbort || o.Finished == wire.FinishError {
		// The engine ended the stream itself: before any token reached the
		// client it is worth another pair; after, the client sees it.
		ev.Finish = finishOf(o.Finished)
		last := ev // its own copy: ev stays off the heap on the token path
		return f.attemptFailed(&attemptErr{class: FailAborted, metric: "engine_abort", ev: &last, finished: true, decode: true,
			avoid: []*lane.Worker{f.cur.pre.w, dw}, blame: []*lane.Worker{dw}})
	}
	now := time.Now()
	f.observeTokens(len(o.TokenIDs), now)
	f.promptLP = nil
	if len(o.TokenIDs) > 0 {
		f.streaming = true
	}
	if o.Finished != "" {
		f.awaitPrefillCount()
		ev.CachedTokens = f.cached.n
		f.finish(ev, o.Finished, now)
		return true
	}
	if !f.emit(ev) {
		f.abortLegs(f.parent.Err())
		f.g.metrics.reqError("client_disconnected")
		f.rec.Gone(f.parent.Err())
		return true
	}
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
	ev.Finish = finishOf(finished)
	if !f.preDone {
		ps, g := f.cur.ls.ps, f.g
		time.AfterFunc(g.opts.DrainGrace, func() {
			defer g.recoverHere("prefill drain", nil)
			ps.Abort(nil)
		})
	}
	f.g.metrics.finished(ev.Finish.Reason, now.Sub(f.began))
	f.succeeded = true
	f.report(f.cur.pre.w, BreakerSuccess)
	f.report(f.cur.dec.w, BreakerSuccess)
	for _, s := range f.cur.ls.encs {
		f.report(s.Worker(), BreakerSuccess)
	}
	f.emit(ev)
}

// awaitPrompt waits for the prefill leg's terminal output when prompt
// logprobs were asked, so that an engine which cannot compute them is a
// clean 400 before any response (streaming included) has started. The
// decode leg's outputs queue on its stream meanwhile; in PD it cannot
// produce a token before the prefill's KV arrives anyway. A prefill abort
// for another reason is returned as the result for run to report.
func (f *flight) awaitPrompt() (legResult, *attemptErr) {
	ls, r := f.cur.ls, f.req
	var o lane.Output
	var err error
	for {
		if o, err = ls.ps.Recv(f.ctx); err != nil || o.Finished != "" {
			break
		}
	}
	if err != nil {
		ls.ps.Abort(err)
		ls.ds.Abort(err)
		ls.abortEncodes(err)
		switch {
		case f.parent.Err() != nil:
			return legResult{}, fatal("client_disconnected", f.parent.Err())
		case f.ctx.Err() != nil:
			return legResult{}, f.deadlineErr(" waiting for the prefill's prompt logprobs")
		}
		pw := f.cur.pre.w
		return legResult{}, &attemptErr{class: legFailureKind(err), metric: legFailure("prefill_failed", err), avoid: []*lane.Worker{pw}, blame: []*lane.Worker{pw},
			err: &RequestError{Status: http.StatusBadGateway, Code: "prefill_failed", Message: "prefill leg failed: " + err.Error()}}
	}
	// An engine's refusal may carry empty input-logprob columns; a prompt
	// of at least one token past logprob_start_len always has a value.
	got := o.HasPromptLogprobs && len(o.PromptLogprobs) > 0
	if ferr := epd.PromptLogprobFailure(o.Finished, o.AbortMessage, got); ferr != nil {
		ls.ds.Abort(nil)
		ls.abortEncodes(nil)
		return legResult{}, fatal("invalid_request", &RequestError{Status: http.StatusBadRequest, Code: "prompt_logprobs_unsupported", Param: "logprob_start_len", Message: ferr.Error()})
	}
	if got {
		if cerr := epd.CheckPromptLogprobs(epd.TokenLogprobs{Vals: o.PromptLogprobs, IDs: o.PromptLogprobIDs}, r.InputIDs, r.LogprobStartLen); cerr != nil {
			ls.ds.Abort(nil)
			ls.abortEncodes(nil)
			return legResult{}, fatal("prefill_failed", &RequestError{Status: http.StatusBadGateway, Code: "prompt_logprobs_mismatch", Message: cerr.Error()})
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

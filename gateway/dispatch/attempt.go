package dispatch

// An attempt is one try at a request (docs/protocol.md §8.4, §11.9): its
// legs under one fresh rid and bootstrap room, the one result read from
// each leg and not handled yet, and, for an image request, its encode
// legs' watch. The flight makes a fresh attempt for every try, so
// nothing one try read or set up carries into the next; only the
// flight's goroutine touches it.

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/gateway/wire"
)

// attempt is one try: a PD pair (with encode legs for images), or one
// leg on an aggregated engine.
type attempt struct {
	pre   legRun       // the prefill leg; none (no stream, done) in a one-leg attempt
	dec   legRun       // the leg whose outputs reach the client: the decode, or the aggregated engine
	enc   *encodeWatch // the encode legs of an image request; nil without images
	start time.Time    // dispatch time: TTFT and duration count from the first attempt's
	view  *breakerView // the breakers it was routed by (their epochs)

	cached    cachedCount // its cached prompt tokens (usage)
	streaming bool        // the decode sent a token: it holds the KV
	succeeded bool        // it ended well (the encode legs get the drain grace)
	left      bool        // its legs were taken out of the traffic account's in flight
}

// legRun is one leg as its flight reads it: where it was routed, its
// stream, and the result taken from the stream but not handled yet. The
// flight's step waits on wake while nothing is pending; a leg whose
// terminal result was taken is read no more (wake nil).
type legRun struct {
	leg
	s       *lane.Stream
	wake    <-chan struct{}
	pending legResult
	has     bool // pending holds a result
	done    bool // its terminal result was handled
}

type legResult struct {
	out lane.Output
	err error
}

// take hands out the pending result.
func (l *legRun) take() legResult {
	l.has = false
	return l.pending
}

// hold makes r the leg's pending terminal result: the leg is read no
// more.
func (l *legRun) hold(r legResult) {
	l.pending, l.has, l.wake = r, true, nil
}

// poll moves what arrived on the legs into their pending results: the
// prefill's terminal output (its other outputs carry nothing the client
// needs) and the decode's next output, one at a time.
func (a *attempt) poll() {
	for a.pre.wake != nil {
		o, ok, err := a.pre.s.Poll()
		if !ok {
			break
		}
		if err != nil || o.Finished != "" {
			a.pre.hold(legResult{o, err})
		}
	}
	if a.dec.wake != nil && !a.dec.has {
		if o, ok, err := a.dec.s.Poll(); ok {
			a.dec.pending, a.dec.has = legResult{o, err}, true
			if err != nil || o.Finished != "" {
				a.dec.wake = nil
			}
		}
	}
}

// buffered: the decode has an output Next would return without waiting.
func (a *attempt) buffered() bool {
	return a.dec.has || (a.dec.wake != nil && a.dec.s.Buffered())
}

// sent reports whether the attempt has legs (its submission went out).
func (a *attempt) sent() bool { return a.dec.s != nil }

// oneLeg: the attempt is one leg on an aggregated engine.
func (a *attempt) oneLeg() bool { return a.dec.s != nil && a.pre.s == nil }

// workers are the workers its legs run on (encode legs aside).
func (a *attempt) workers() []*lane.Worker {
	if a.pre.w == nil {
		return []*lane.Worker{a.dec.w}
	}
	return []*lane.Worker{a.pre.w, a.dec.w}
}

// encodeLegs are the attempt's encode streams (none without images).
func (a *attempt) encodeLegs() []*lane.Stream {
	if a.enc == nil {
		return nil
	}
	return a.enc.legs
}

// abortLegs ends both PD legs with err.
func (a *attempt) abortLegs(err error) {
	if !a.sent() {
		return
	}
	if a.pre.s != nil {
		a.pre.s.Abort(err)
	}
	a.dec.s.Abort(err)
}

// abort ends every leg with err and stops the embedding watch.
func (a *attempt) abort(err error) {
	if !a.sent() {
		return
	}
	a.abortLegs(err)
	if a.enc != nil {
		for _, s := range a.enc.legs {
			s.Abort(err)
		}
		a.enc.stopWatching()
	}
}

// leave takes the attempt's legs out of the in-flight counts of the roles
// they ran on (the request still counts there when it ends), once.
func (a *attempt) leave(rec *traffic.Rec) {
	if a.left || !a.sent() {
		return
	}
	a.left = true
	for _, s := range a.encodeLegs() {
		rec.Leave(s.Worker().Role())
	}
	for _, w := range a.workers() {
		rec.Leave(w.Role())
	}
}

// endEncodes ends encode legs still running when the request ends: now
// on failure, after the drain grace on success (their answer may be in
// flight).
func (a *attempt) endEncodes(grace time.Duration, guard panicGuard) {
	encs := a.encodeLegs()
	if len(encs) == 0 {
		return
	}
	if a.succeeded {
		time.AfterFunc(grace, func() {
			defer guard.here("encode drain", nil)
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

// encodeWatch is an image attempt's encode legs as its flight follows
// them. Each ends with its own terminal output (results). Once one has
// finished, its engine still holds the embedding until the prefill
// fetched it: that engine's death before the prefill leg ends fails the
// attempt now (deaths), not after the prefill's embedding timeout.
type encodeWatch struct {
	legs     []*lane.Stream
	results  <-chan encodeResult // nil until begun, and once every leg ended well
	left     int                 // legs still running
	deaths   chan encodeDeath    // nil until a finished leg's engine is watched, and once that no longer matters
	watched  map[*lane.Worker]bool
	stop     chan struct{} // closed: the watchers end
	stopped  bool
	releases []func() // pending embeddings the attempt holds (DrainCount)
}

// begin starts reading the encode legs' ends.
func (w *encodeWatch) begin(e *encoders) {
	if w == nil || w.results != nil {
		return
	}
	w.left, w.results = len(w.legs), e.results(w.legs)
	w.watched, w.stop = map[*lane.Worker]bool{}, make(chan struct{})
}

// ended counts one encode leg that ended well; true when it was the last
// (the embeddings exist: the prefill owes output now).
func (w *encodeWatch) ended() bool {
	if w.left--; w.left == 0 {
		w.results = nil
		return true
	}
	return false
}

// watchEncoder watches the engine of s, a leg that finished, until the
// prefill leg ends, once per engine.
func (w *encodeWatch) watchEncoder(e *encoders, s *lane.Stream, since time.Time) {
	wk := s.Worker()
	if w.watched[wk] {
		return
	}
	if w.deaths == nil {
		w.deaths = make(chan encodeDeath, len(w.legs))
	}
	w.watched[wk] = true
	w.releases = append(w.releases, e.hold(wk.Role()))
	e.watch(s, since, w.stop, w.deaths)
}

// stopWatching ends the watchers and releases the embeddings held, once.
func (w *encodeWatch) stopWatching() {
	if w == nil || w.stop == nil || w.stopped {
		return
	}
	w.stopped = true
	close(w.stop)
	for _, r := range w.releases {
		r()
	}
}

// channels are the watch's event sources for the flight's select (nil:
// none).
func (w *encodeWatch) channels() (<-chan encodeResult, <-chan encodeDeath) {
	if w == nil {
		return nil, nil
	}
	return w.results, w.deaths
}

// legPayloads are one attempt's encoded legs.
type legPayloads struct {
	rid        string
	pre, dec   []byte   // the prefill's and the decode's GenerateRequest
	legs       epd.Legs // EPD: the encode requests and their workers
	wantPrompt bool     // prompt logprobs asked (awaitPrompt)
}

// encodeLegs builds each leg's request: one rid and bootstrap room for
// both PD legs, in EPD an encode request per image (on encoders other
// than av's when there are: a retry's); an aggregated route's one leg.
// Its failures are final (the deployment's addresses, the request
// itself).
func encodeLegs(g *Dispatcher, r tokenapi.Request, sp wire.SamplingParams, rt route, av avoid) (legPayloads, *attemptErr) {
	if rt.info.aggregated() {
		return encodeOneLeg(mintRID(r.RID, g.rng.Uint64()), r, sp)
	}
	pre, room := rt.pre, rt.room
	p := legPayloads{rid: mintRID(r.RID, g.rng.Uint64())}
	host, port, err := splitBootstrap(pre.w.Bootstrap())
	if err != nil {
		return p, fatal("bootstrap", &RequestError{Status: http.StatusInternalServerError, Code: "bootstrap_address", Message: err.Error(), Cause: err})
	}
	// Only the prefill saw the prompt, so only it computes prompt
	// logprobs; the decode leg asks for output logprobs alone.
	p.wantPrompt = r.LogprobStartLen >= 0
	q := promptLegRequest(p.rid, r, sp, p.wantPrompt)
	q.SetBootstrap(host, port, room)
	if len(r.Images) > 0 {
		// EPD: each image goes to its encoder (consistent hashing on its
		// content) under its own room; the prefill fetches the embeddings
		// from there, the decode gets the items' metadata only.
		p.legs, err = epd.BuildLegs(p.rid, r.Images, g.enc.picker(av), g.enc.addr, room, g.rng.Uint64)
		switch {
		case errors.Is(err, epd.ErrNoEncoder):
			return p, fatal("no_workers", &RequestError{Status: http.StatusServiceUnavailable, Code: "no_encode_worker", Message: err.Error(), Cause: err})
		case err != nil:
			return p, encodeFailed(err)
		}
		q.MultimodalInputs = p.legs.Prefill
	}
	if p.pre, err = wire.EncodeGenerateRequest(q); err != nil {
		return p, encodeFailed(err)
	}
	p.dec = p.pre
	if p.wantPrompt || len(r.Images) > 0 {
		qd := q
		qd.ReturnLogprob, qd.LogprobStartLen = r.ReturnLogprob, -1
		if len(r.Images) > 0 {
			qd.MultimodalInputs = p.legs.Decode
		}
		if p.dec, err = wire.EncodeGenerateRequest(qd); err != nil {
			return p, encodeFailed(err)
		}
	}
	return p, nil
}

// encodeOneLeg builds an aggregated route's one request: no bootstrap
// room (nothing is transferred), and, with prompt logprobs asked, the
// engine that computes the prompt computes them (docs/protocol.md §6.6).
func encodeOneLeg(rid string, r tokenapi.Request, sp wire.SamplingParams) (legPayloads, *attemptErr) {
	p := legPayloads{rid: rid, wantPrompt: r.LogprobStartLen >= 0}
	var err error
	if p.dec, err = wire.EncodeGenerateRequest(promptLegRequest(p.rid, r, sp, p.wantPrompt)); err != nil {
		return p, encodeFailed(err)
	}
	return p, nil
}

// promptLegRequest is the request of the leg that sees the prompt (the
// prefill's, or an aggregated route's one leg): output logprobs with
// their alternatives when asked (on a PD route the first token is the
// prefill's, docs/protocol.md §6.7), prompt logprobs from
// LogprobStartLen when wantPrompt, and the stream flag.
func promptLegRequest(rid string, r tokenapi.Request, sp wire.SamplingParams, wantPrompt bool) wire.GenerateRequest {
	q := wire.NewGenerateRequest(rid, r.InputIDs, sp)
	q.ReturnLogprob = r.ReturnLogprob || wantPrompt
	if r.ReturnLogprob {
		q.TopLogprobsNum = r.TopLogprobsNum
	}
	if wantPrompt {
		q.LogprobStartLen = r.LogprobStartLen
	}
	q.Stream = r.Stream
	return q
}

// encodeFailed is the final error of an attempt whose leg requests could
// not be built or encoded (encode_failed, a 500).
func encodeFailed(err error) *attemptErr {
	return fatal("encode", &RequestError{Status: http.StatusInternalServerError, Code: "encode_failed", Message: err.Error(), Cause: err})
}

// submit sends the encode legs, then the prefill, then the decode (or an
// aggregated route's one leg), and returns the attempt they make; each
// stream sent is appended to sent (Stream's panic boundary aborts them).
// A refusal aborts what was already sent; the next attempt avoids the
// worker that refused.
func submit(e *encoders, p legPayloads, rt route, sent *[]*lane.Stream) (attempt, *attemptErr) {
	a := attempt{start: time.Now(), view: rt.view}
	a.pre.leg, a.dec.leg = rt.pre, rt.dec
	if rt.info.aggregated() {
		// One leg that owes output from the start: it computes the prompt
		// itself. It has no prefill to wait for.
		ds, err := rt.dec.w.Submit(rt.dec.id, p.rid, p.dec)
		if err != nil {
			return attempt{}, &attemptErr{class: submitFailureKind(err), metric: "aggregated_worker_failed_to_start", avoid: []*lane.Worker{rt.dec.w}, decode: true,
				err: &RequestError{Status: http.StatusServiceUnavailable, Code: "aggregated_worker_failed_to_start", Message: err.Error(), Cause: err}}
		}
		*sent = append(*sent, ds)
		a.dec.s, a.dec.wake, a.pre.done = ds, ds.Wake(), true
		return a, nil
	}
	if len(p.legs.Encode) > 0 {
		encs, err := e.submit(p.legs)
		*sent = append(*sent, encs...)
		if err != nil {
			return a, &attemptErr{class: submitFailureKind(err), metric: "encode_worker_failed_to_start",
				err: &RequestError{Status: http.StatusServiceUnavailable, Code: "encode_worker_failed_to_start", Message: err.Error(), Cause: err}}
		}
		a.enc = &encodeWatch{legs: encs}
	}
	abortEncodes := func(err error) {
		for _, s := range a.encodeLegs() {
			s.Abort(err)
		}
	}
	// In EPD the prefill owes nothing until its embeddings exist, and the
	// decode owes nothing until its prefill's KV does: their silence
	// before is no stall (Expect is called when it ends).
	submitPre := rt.pre.w.Submit
	if a.enc != nil && !p.wantPrompt { // awaitPrompt does not watch the encode legs
		submitPre = rt.pre.w.SubmitQuiet
	}
	ps, err := submitPre(rt.pre.id, p.rid, p.pre)
	if err != nil {
		abortEncodes(err)
		return attempt{}, &attemptErr{class: submitFailureKind(err), metric: "prefill_worker_failed_to_start", avoid: []*lane.Worker{rt.pre.w},
			err: &RequestError{Status: http.StatusServiceUnavailable, Code: "prefill_worker_failed_to_start", Message: err.Error(), Cause: err}}
	}
	*sent = append(*sent, ps)
	ds, err := rt.dec.w.SubmitQuiet(rt.dec.id, p.rid, p.dec)
	if err != nil {
		ps.Abort(err)
		abortEncodes(err)
		return attempt{}, &attemptErr{class: submitFailureKind(err), metric: "decode_worker_failed_to_start", avoid: []*lane.Worker{rt.dec.w}, decode: true,
			err: &RequestError{Status: http.StatusServiceUnavailable, Code: "decode_worker_failed_to_start", Message: err.Error(), Cause: err}}
	}
	*sent = append(*sent, ds)
	a.pre.s, a.pre.wake = ps, ps.Wake()
	a.dec.s, a.dec.wake = ds, ds.Wake()
	return a, nil
}

// mintRID is an attempt's engine rid from 64 random bits.
func mintRID(client string, bits uint64) string {
	suffix := strconv.FormatUint(bits, 36)
	if client == "" {
		return "gen-" + suffix
	}
	// PD: a client rid always gets a per-attempt suffix (docs/protocol.md §8.5).
	return client + "-" + suffix
}

// failedLeg is the attempt's end when its leg named name ("prefill",
// "decode") failed: its engine died, stalled or aborted it, or the lane
// failed it. The next attempt avoids that worker, whose breaker counts it.
func failedLeg(name string, l leg, err error, decode bool) *attemptErr {
	return &attemptErr{class: legFailureKind(err), metric: legFailure(name+"_failed", err), decode: decode,
		err: fmt.Errorf("%s leg failed: %w", name, err), avoid: []*lane.Worker{l.w}, blame: []*lane.Worker{l.w}}
}

package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/lane"
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
	sp.JSONSchema, sp.Regex, sp.EBNF = s.JSONSchema, s.Regex, s.EBNF
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
	case r.TopLogprobsNum < 0 || r.TopLogprobsNum > gen.MaxTopLogprobs:
		return badRequest("top_logprobs_num", "top_logprobs_num must be between 0 and %d, got %d", gen.MaxTopLogprobs, r.TopLogprobsNum)
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

// leg is one chosen engine rank for one request.
type leg struct {
	w  *lane.Worker
	id int
}

// rankSource is what routing reads of a worker: its routable ranks and
// its DP size. *lane.Worker implements it; tests use a fake whose ranks
// vanish between calls.
type rankSource interface {
	Routable() []lane.RankLoad
	DPSize() int
}

// legChoice is a routing decision: the index of the worker in its pool
// and the engine identity on it.
type legChoice struct{ worker, identity int }

// errNoPrefill and errNoDecode are the refusals while no worker of a
// kind can take a request; Generate waits for one (QueueTimeout) first.
var (
	errNoPrefill = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_prefill_worker", Message: "no prefill engine rank is registered and routed"}
	errNoDecode  = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_decode_worker", Message: "no decode engine rank is registered and routed"}
)

// chooseLegs is one routing decision over one read of each worker's
// routable ranks: each worker's Routable is called exactly once, so ranks
// that vanish meanwhile can make a later Submit fail cleanly but never
// make the choice index an empty list (the 1P-dp2 kill test's
// "index out of range [-1]"). The prefill leg goes to DP rank room mod dp,
// or the room moves to a rank that is up.
func chooseLegs(pPolicy, dPolicy string, pre, dec []rankSource, pSeq, dSeq, pRnd, dRnd, room uint64) (p, d legChoice, _ uint64, _ error) {
	pw, pranks := pickWorker(pPolicy, pre, pSeq, pRnd)
	if pw < 0 {
		return p, d, room, errNoPrefill
	}
	dw, dranks := pickWorker(dPolicy, dec, dSeq, dRnd)
	if dw < 0 {
		return p, d, room, errNoDecode
	}
	dp := pre[pw].DPSize()
	want := PrefillRank(room, dp)
	p = legChoice{worker: pw, identity: -1}
	for _, r := range pranks {
		if r.DPRank == want {
			p.identity = r.Identity
		}
	}
	if p.identity < 0 {
		// The room's rank is down: move the room to a rank that is up, so
		// the decode still fetches from room mod dp.
		i := Pick(LeastLoad, rankCandidates(pranks), room, 0)
		p.identity = pranks[i].Identity
		room = RoomForRank(room, dp, pranks[i].DPRank)
	}
	d = legChoice{worker: dw, identity: dranks[Pick(LeastLoad, rankCandidates(dranks), room, 0)].Identity}
	return p, d, room, nil
}

func rankCandidates(ranks []lane.RankLoad) []Candidate {
	c := make([]Candidate, len(ranks))
	for i, r := range ranks {
		c[i] = Candidate{InFlight: r.InFlight}
	}
	return c
}

// pick chooses the prefill rank (room mod dp) and the decode rank.
func (g *Dispatcher) pick(room uint64) (pre, dec leg, _ uint64, _ error) {
	if h := g.opts.HookPick; h != nil {
		h()
	}
	p, d, room, err := chooseLegs(g.prefill.policy, g.decode.policy, g.prefill.src, g.decode.src,
		g.prefill.seq.Add(1)-1, g.decode.seq.Add(1)-1, g.rng.Uint64(), g.rng.Uint64(), room)
	if err != nil {
		return pre, dec, room, err
	}
	return leg{w: g.prefill.workers[p.worker], id: p.identity}, leg{w: g.decode.workers[d.worker], id: d.identity}, room, nil
}

// pickWorker applies a policy over the workers that have a routable rank
// (a worker's load is its in-flight count) and returns the chosen index
// with the ranks it was chosen on, or -1.
func pickWorker(policy string, ws []rankSource, seq, rnd uint64) (int, []lane.RankLoad) {
	var live []int
	var ranks [][]lane.RankLoad
	var c []Candidate
	for i, w := range ws {
		if rs := w.Routable(); len(rs) > 0 {
			n := 0
			for _, r := range rs {
				n += r.InFlight
			}
			live = append(live, i)
			ranks = append(ranks, rs)
			c = append(c, Candidate{InFlight: n})
		}
	}
	i := Pick(policy, c, seq, rnd)
	if i < 0 {
		return -1, nil
	}
	return live[i], ranks[i]
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
func (g *Dispatcher) Generate(ctx context.Context, r gen.Request) (events <-chan gen.Event, err error) {
	// Generate runs in its caller's goroutine (an HTTP handler, an OpenAI
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
		events, err = nil, &RequestError{Status: http.StatusInternalServerError, Code: "internal_error", Message: perr.Error()}
	}()
	return g.generate(ctx, r, &sent)
}

// generate dispatches one request in steps: admit (validate it) → pick
// its legs (waiting for a routable worker) → encode each leg's request →
// submit the legs → start its flight. Each step counts its own refusal.
func (g *Dispatcher) generate(ctx context.Context, r gen.Request, sent *[]*lane.Stream) (<-chan gen.Event, error) {
	traffic.FromContext(ctx).ID(r.RID) // issue 19: the access line's id unless the client sent one
	sp, err := g.admit(&r)
	if err != nil {
		g.metrics.reqError("invalid_request")
		return nil, err
	}
	room := Room(g.rng.Uint64())
	pre, dec, room, err := g.pickQueued(ctx, room, len(r.Images) > 0)
	if err != nil {
		if ctx.Err() != nil {
			g.metrics.reqError("client_disconnected")
			traffic.FromContext(ctx).Gone(ctx.Err()) // logged 499
		} else {
			g.metrics.reqError("no_workers")
		}
		return nil, err
	}
	p, err := g.encodeLegs(r, sp, pre, room)
	if err != nil {
		return nil, err
	}
	// The engines log this rid: on the access line it joins the gateway's
	// line to theirs. Every rid minted for the request goes there (a
	// retry's fresh one too).
	traffic.FromContext(ctx).EngineRID(p.rid)
	ls, err := g.submit(p, pre, dec, sent)
	if err != nil {
		return nil, err
	}
	recordLegs(ctx, pre, dec, ls.encs, len(r.InputIDs)) // issue 19
	return g.start(ctx, r, pre, dec, ls, sent)
}

// admit checks a request before any worker is chosen and returns its
// sampling in wire form.
func (g *Dispatcher) admit(r *gen.Request) (wire.SamplingParams, error) {
	if err := validate(r); err != nil {
		return wire.SamplingParams{}, err
	}
	if err := g.checkImages(r); err != nil {
		return wire.SamplingParams{}, err
	}
	if err := g.checkPromptLen(r); err != nil {
		return wire.SamplingParams{}, err
	}
	sp, err := wireSampling(r.Sampling)
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
// both PD legs, in EPD an encode request per image.
func (g *Dispatcher) encodeLegs(r gen.Request, sp wire.SamplingParams, pre leg, room uint64) (legPayloads, error) {
	p := legPayloads{rid: g.mintRID(r.RID)}
	host, port, err := splitBootstrap(pre.w.Bootstrap())
	if err != nil {
		g.metrics.reqError("bootstrap")
		return p, &RequestError{Status: http.StatusInternalServerError, Code: "bootstrap_address", Message: err.Error()}
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
		if p.legs, err = epd.PlanLegs(p.rid, prepared(r), g.EncodeRing(), g.encoderAddr, room, g.rng.Uint64); err != nil {
			g.metrics.reqError("no_workers")
			return p, &RequestError{Status: http.StatusServiceUnavailable, Code: "no_encode_worker", Message: err.Error()}
		}
		q.MultimodalInputs = p.legs.Prefill
	}
	if p.pre, err = wire.EncodeGenerateRequest(q); err != nil {
		g.metrics.reqError("encode")
		return p, &RequestError{Status: http.StatusInternalServerError, Code: "encode_failed", Message: err.Error()}
	}
	p.dec = p.pre
	if p.wantPrompt || len(r.Images) > 0 {
		qd := q
		qd.ReturnLogprob, qd.LogprobStartLen = r.ReturnLogprob, -1
		if len(r.Images) > 0 {
			qd.MultimodalInputs = p.legs.Decode
		}
		if p.dec, err = wire.EncodeGenerateRequest(qd); err != nil {
			g.metrics.reqError("encode")
			return p, &RequestError{Status: http.StatusInternalServerError, Code: "encode_failed", Message: err.Error()}
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
// A failure aborts what was already sent.
func (g *Dispatcher) submit(p legPayloads, pre, dec leg, sent *[]*lane.Stream) (legStreams, error) {
	ls := legStreams{start: time.Now()}
	var err error
	if len(p.legs.Encode) > 0 {
		ls.encs, err = g.submitEncodes(p.legs)
		*sent = append(*sent, ls.encs...)
		if err != nil {
			g.metrics.reqError("encode_worker_failed_to_start")
			return ls, &RequestError{Status: http.StatusServiceUnavailable, Code: "encode_worker_failed_to_start", Message: err.Error()}
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
		g.metrics.reqError("prefill_worker_failed_to_start")
		return ls, &RequestError{Status: http.StatusServiceUnavailable, Code: "prefill_worker_failed_to_start", Message: err.Error()}
	}
	*sent = append(*sent, ls.ps)
	if ls.ds, err = dec.w.SubmitQuiet(dec.id, p.rid, p.dec); err != nil {
		ls.ps.Abort(err)
		ls.abortEncodes(err)
		g.metrics.reqError("decode_worker_failed_to_start")
		return ls, &RequestError{Status: http.StatusServiceUnavailable, Code: "decode_worker_failed_to_start", Message: err.Error()}
	}
	*sent = append(*sent, ls.ds)
	return ls, nil
}

// start hands the submitted legs to their flight (runSafe); with prompt
// logprobs asked it first joins the prefill's (awaitPrompt), so that a
// refusal is still a clean error before any response.
func (g *Dispatcher) start(ctx context.Context, r gen.Request, pre, dec leg, ls legStreams, sent *[]*lane.Stream) (<-chan gen.Event, error) {
	var preRes *legResult
	var promptLP []float64
	if r.LogprobStartLen >= 0 {
		res, perr := g.awaitPrompt(ctx, ls.ps, ls.ds, r)
		if perr != nil {
			ls.abortEncodes(nil)
			return nil, perr
		}
		preRes, promptLP = &res, res.out.PromptLogprobs
		ls.ds.Expect()
	}
	g.inflight.Add(1)
	g.metrics.dispatched(pre, dec, len(r.InputIDs))
	events := make(chan gen.Event, 16)
	*sent = nil // run owns the legs now
	go g.runSafe(ctx, ls.ps, ls.ds, ls.encs, events, ls.start, preRes, promptLP)
	return events, nil
}

// pickQueued is pick that waits, up to QueueTimeout, while no worker of a
// kind the request needs is routable (the only decode drains or restarts,
// say): each lane change (a rank's state, a role's routing) wakes it to
// try again, and the client going away ends the wait. Then the refusal is
// a 503 that says how long it waited; every 503 carries Retry-After.
func (g *Dispatcher) pickQueued(ctx context.Context, room uint64, images bool) (pre, dec leg, _ uint64, _ error) {
	var timeout <-chan time.Time
	waited := false
	for {
		changed := g.lane.Changed() // before looking, so no change is missed
		var err error
		if images && len(g.encodeReady()) == 0 {
			err = errNoEncode
		} else {
			var r uint64
			if pre, dec, r, err = g.pick(room); err == nil {
				if waited {
					g.metrics.Queued.WithLabelValues("routed").Inc()
				}
				return pre, dec, r, nil
			}
		}
		if g.opts.QueueTimeout < 0 {
			return pre, dec, room, err
		}
		if timeout == nil {
			t := time.NewTimer(g.opts.QueueTimeout)
			defer t.Stop()
			timeout = t.C
			waited = true
			g.queuedNow.Add(1)
			defer g.queuedNow.Add(-1)
		}
		select {
		case <-changed:
		case <-timeout:
			g.metrics.Queued.WithLabelValues("timeout").Inc()
			re := *err.(*RequestError)
			re.Message += fmt.Sprintf(" (waited %s for one)", g.opts.QueueTimeout)
			return pre, dec, room, &re
		case <-ctx.Done():
			g.metrics.Queued.WithLabelValues("client_gone").Inc()
			return pre, dec, room, ctx.Err()
		case <-g.shutdown:
			return pre, dec, room, err
		}
	}
}

// errNoEncode refuses an image request while no encode worker is ready.
var errNoEncode = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_encode_worker", Message: "no encode engine rank is registered and routed"}

// runSafe is run behind the request's recover boundary: a panic ends this
// one request with an error event and aborts its legs. It owns the end of
// events and the in-flight count, which run's own defers must not touch
// (a deferred close would run before the recover and the error event
// would be sent on a closed channel).
func (g *Dispatcher) runSafe(parent context.Context, ps, ds *lane.Stream, encs []*lane.Stream, events chan<- gen.Event, start time.Time, pre *legResult, promptLP []float64) {
	defer close(events)
	defer g.inflight.Add(-1)
	defer g.recoverHere("request", func(err error) {
		ps.Abort(err)
		ds.Abort(err)
		for _, s := range encs {
			s.Abort(err)
		}
		g.metrics.reqError("panic")
		traffic.FromContext(parent).Fail("panic") // issue 19
		select {
		case events <- gen.Event{Err: fmt.Errorf("%w; both legs aborted", err)}:
		case <-parent.Done():
		}
	})
	g.run(parent, ps, ds, encs, events, start, pre, promptLP)
}

// awaitPrompt waits for the prefill leg's terminal output when prompt
// logprobs were asked, so that an engine which cannot compute them is a
// clean 400 before any response (streaming included) has started. The
// decode leg's outputs queue on its stream meanwhile; in PD it cannot
// produce a token before the prefill's KV arrives anyway. A prefill abort
// for another reason is returned as the result for run to report.
func (g *Dispatcher) awaitPrompt(ctx context.Context, ps, ds *lane.Stream, r gen.Request) (legResult, error) {
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
			traffic.FromContext(ctx).Gone(ctx.Err())
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

func (g *Dispatcher) mintRID(client string) string {
	suffix := strconv.FormatUint(g.rng.Uint64(), 36)
	if client == "" {
		return "gen-" + suffix
	}
	// PD: a client rid always gets a per-attempt suffix (docs/protocol.md §8.5).
	return client + "-" + suffix
}

type legResult struct {
	out lane.Output
	err error
}

// flight is one dispatched request as run drives it, in steps: its legs,
// what has been seen of them, and where its events go. Only run's
// goroutine touches it (docs/architecture.md §3.2).
type flight struct {
	g           *Dispatcher
	parent, ctx context.Context
	ps, ds      *lane.Stream
	encs        []*lane.Stream
	events      chan<- gen.Event
	start       time.Time
	promptLP    []float64 // rides on the first event

	// Both legs are read in run's own select (lane.Stream.Wake and Poll),
	// not by a reader goroutine per leg: an n=1 request costs the handler
	// and run's goroutine. pollLegs moves what arrived into preCh (the
	// prefill's terminal output; its other outputs carry nothing the
	// client needs) and decCh (the decode's next output), each holding at
	// most one result for the select to take.
	preCh, decCh     chan legResult
	preWake, decWake <-chan struct{}

	// Encode legs end with their own terminal output (encCh). Once one
	// has finished, its engine still holds the embedding until the
	// prefill fetched it: that engine's death before the prefill leg ends
	// fails the request now (deathCh), not after the prefill's embedding
	// timeout.
	encCh     <-chan encodeResult
	encLeft   int
	deathCh   chan encodeDeath
	watched   map[*lane.Worker]bool
	stopWatch chan struct{}
	stopOnce  sync.Once
	releases  []func() // pending embeddings this request holds (DrainCount)

	preDone, succeeded bool
	first              bool
	last               time.Time
	promptTk           int

	rec *traffic.Rec // the request's record in the traffic account (issue 19)
}

// run drives one PD request: it relays decode outputs, watches the
// prefill leg, and aborts both legs on the first failure, client cancel or
// the deadline.
// pre, when set, is the prefill's terminal output already received
// (awaitPrompt); promptLP rides on the first event.
func (g *Dispatcher) run(parent context.Context, ps, ds *lane.Stream, encs []*lane.Stream, events chan<- gen.Event, start time.Time, pre *legResult, promptLP []float64) {
	if h := g.opts.HookRun; h != nil {
		h()
	}
	f := &flight{g: g, rec: traffic.FromContext(parent), parent: parent, ps: ps, ds: ds, encs: encs, events: events, start: start, promptLP: promptLP,
		preCh: make(chan legResult, 1), decCh: make(chan legResult, 1), decWake: ds.Wake(),
		encLeft: len(encs), watched: map[*lane.Worker]bool{}, stopWatch: make(chan struct{}), first: true}
	defer f.endEncodes()
	if f.encLeft > 0 {
		f.encCh = g.watchEncodes(encs)
	}
	defer f.stopWatching()
	var cancel context.CancelFunc
	f.ctx, cancel = context.WithTimeout(parent, g.opts.RequestTimeout)
	defer cancel()
	if pre != nil {
		f.preCh <- *pre
	} else {
		f.preWake = ps.Wake()
	}
	for {
		f.pollLegs()
		if f.step() {
			return
		}
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
		o, ok, err := f.ps.Poll()
		if !ok {
			break
		}
		if err != nil || o.Finished != "" {
			f.preCh <- legResult{o, err}
			f.preWake = nil
		}
	}
	if f.decWake != nil && len(f.decCh) == 0 {
		if o, ok, err := f.ds.Poll(); ok {
			f.decCh <- legResult{o, err}
			if err != nil || o.Finished != "" {
				f.decWake = nil
			}
		}
	}
}

// endEncodes ends encode legs still running when the request ends: now
// on failure, after the drain grace on success (their answer may be in
// flight).
func (f *flight) endEncodes() {
	if f.encLeft == 0 {
		return
	}
	encs, g := f.encs, f.g
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
	f.stopOnce.Do(func() {
		close(f.stopWatch)
		for _, r := range f.releases {
			r()
		}
	})
}

func (f *flight) emit(ev gen.Event) bool {
	select {
	case f.events <- ev:
		return true
	case <-f.parent.Done():
		return false
	}
}

func (f *flight) fail(kind string, ev gen.Event) {
	f.g.metrics.reqError(kind)
	f.rec.Fail(kind) // issue 19
	f.emit(ev)
}

// abortLegs ends both PD legs with err.
func (f *flight) abortLegs(err error) {
	f.ps.Abort(err)
	f.ds.Abort(err)
}

// onDeadline: the client went away or the request deadline passed.
func (f *flight) onDeadline() bool {
	f.abortLegs(f.ctx.Err())
	if f.parent.Err() != nil {
		f.g.metrics.reqError("client_disconnected")
		f.rec.Gone(f.parent.Err())
		return true // nobody is listening
	}
	f.fail("timeout", gen.Event{Err: fmt.Errorf("request deadline of %s exceeded; both legs aborted", f.g.opts.RequestTimeout)})
	return true
}

// onEncode: an encode leg ended; on success its encoder is watched until
// the prefill fetched the embedding.
func (f *flight) onEncode(er encodeResult) bool {
	if err := encodeFailure(er); err != nil {
		if f.ctx.Err() != nil {
			return false // onDeadline reports it
		}
		f.abortLegs(err)
		f.fail("encode_failed", gen.Event{Err: err})
		return true
	}
	if f.encLeft--; f.encLeft == 0 {
		f.encCh = nil
		f.ps.Expect() // the embeddings exist: the prefill owes output now
	}
	if w := f.encs[er.item].Worker(); !f.preDone && !f.watched[w] {
		if f.deathCh == nil {
			f.deathCh = make(chan encodeDeath, len(f.encs))
		}
		f.watched[w] = true
		f.releases = append(f.releases, f.g.holdEmbed(w.Role()))
		f.g.watchEncoder(f.encs[er.item], f.start, f.stopWatch, f.deathCh)
	}
	return false
}

// onEncoderDeath: an encoder holding this request's embedding died.
func (f *flight) onEncoderDeath(d encodeDeath) bool {
	if f.ps.Done() || f.ctx.Err() != nil {
		// The prefill's end (or onDeadline) is reported instead.
		f.deathCh = nil
		return false
	}
	err := fmt.Errorf("encode worker %s died before prefill %s received the image embedding (%s); both legs aborted", d.role, f.ps.Worker().Role(), d.why)
	f.abortLegs(err)
	f.fail("encode_worker_died", gen.Event{Err: err})
	return true
}

// onPrefill: the prefill leg ended; a failure or abort ends the request.
func (f *flight) onPrefill(pr legResult) bool {
	f.preCh = nil
	f.preDone = true
	f.stopWatching()
	f.deathCh = nil
	f.ds.Expect() // its KV is ready (or the request ends below)
	switch {
	case pr.err != nil && f.ctx.Err() != nil:
		// onDeadline reports it
	case pr.err != nil:
		f.ds.Abort(pr.err)
		f.fail(legFailure("prefill_failed", pr.err), gen.Event{Err: fmt.Errorf("prefill leg failed: %w", pr.err)})
		return true
	case pr.out.Finished == wire.FinishAbort || pr.out.Finished == wire.FinishError:
		f.ds.Abort(nil)
		f.fail("prefill_aborted", gen.Event{PromptTokens: pr.out.PromptTokens, Finish: &gen.Finish{Reason: gen.FinishAbort, Message: "prefill leg aborted (" + pr.out.Finished + ")"}})
		return true
	}
	return false
}

// onDecode relays one decode output; its terminal one ends the request.
func (f *flight) onDecode(dr legResult) bool {
	if dr.err != nil {
		if f.ctx.Err() != nil {
			return false // onDeadline reports it
		}
		if errors.Is(dr.err, io.EOF) {
			dr.err = errors.New("decode stream ended without a finish")
		}
		f.ps.Abort(dr.err)
		f.fail(legFailure("decode_failed", dr.err), gen.Event{Err: fmt.Errorf("decode leg failed: %w", dr.err)})
		return true
	}
	o := dr.out
	now := time.Now()
	f.observeTokens(len(o.TokenIDs), now)
	if o.PromptTokens > 0 {
		f.promptTk = o.PromptTokens
	}
	ev := gen.Event{TokenIDs: o.TokenIDs, Logprobs: o.Logprobs, PromptTokens: f.promptTk, OutputTokens: o.CompletionTokens, PromptLogprobs: f.promptLP,
		TopLogprobs: topLogprobs(o.TopLogprobs, o.TopLogprobIDs)}
	f.promptLP = nil
	if o.Finished != "" {
		f.finish(ev, o.Finished, now)
		return true
	}
	if !f.emit(ev) {
		f.abortLegs(f.parent.Err())
		f.g.metrics.reqError("client_disconnected")
		f.rec.Gone(f.parent.Err())
		return true
	}
	return false
}

// observeTokens counts n new output tokens (TTFT, ITL, throughput).
func (f *flight) observeTokens(n int, now time.Time) {
	if n == 0 {
		return
	}
	recordOutput(f.rec, f.ds.Worker().Role(), f.first, now.Sub(f.last), n) // issue 19
	m := f.g.metrics
	if f.first {
		m.TTFT.Observe(now.Sub(f.start).Seconds())
		m.RouterTTFT.Observe(now.Sub(f.start).Seconds())
		f.first = false
	} else {
		m.ITL.Observe(now.Sub(f.last).Seconds() / float64(n))
	}
	f.last = now
	m.OutTokens.Add(float64(n))
}

// finish sends the terminal event; a prefill leg still running is given
// the drain grace to deliver its own terminal output.
func (f *flight) finish(ev gen.Event, finished string, now time.Time) {
	ev.Finish = finishOf(finished)
	if !f.preDone {
		ps, g := f.ps, f.g
		time.AfterFunc(g.opts.DrainGrace, func() {
			defer g.recoverHere("prefill drain", nil)
			ps.Abort(nil)
		})
	}
	f.g.metrics.finished(ev.Finish.Reason, now.Sub(f.start))
	f.succeeded = ev.Finish.Reason != gen.FinishAbort
	if ev.Finish.Reason == gen.FinishAbort {
		f.ps.Abort(nil)
		f.g.metrics.reqError("engine_abort")
		f.rec.Fail("engine_abort") // issue 19
	}
	f.emit(ev)
}

// legFailure is the error_type a failed leg is counted under: stalls and
// the supervisor's aborts get their own, so /metrics tells them from
// engine deaths.
// topLogprobs pairs each token's alternatives' values and ids.
func topLogprobs(vals [][]float64, ids [][]int32) [][]gen.TopLogprob {
	if len(vals) == 0 {
		return nil
	}
	out := make([][]gen.TopLogprob, len(vals))
	for t, vs := range vals {
		alts := make([]gen.TopLogprob, len(vs))
		for j, v := range vs {
			alts[j] = gen.TopLogprob{ID: ids[t][j], Logprob: v}
		}
		out[t] = alts
	}
	return out
}

func legFailure(kind string, err error) string {
	switch {
	case errors.Is(err, lane.ErrRankStalled):
		return "rank_stalled"
	case errors.Is(err, lane.ErrRoleAborted):
		return "role_aborted"
	}
	return kind
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

package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/cmd/ts-fake/kvpub"
	"github.com/tsd-project/tsd/gateway/bootstrap"
	"github.com/tsd-project/tsd/gateway/kvevents"
	"github.com/tsd-project/tsd/gateway/wire"
)

// Request lifecycle inside one rank's scheduler.
type reqState int

const (
	stWaiting      reqState = iota // admitted, waiting for a batch slot
	stFetching                     // decode: waiting for the prefill's KV
	stRunning                      // generating one token per step
	stSending                      // prefill: first token sampled, KV being fetched by decode
	stEmbedding                    // EPD prefill: waiting for image embeddings from encode servers
	stPrefilling                   // its uncached prompt tokens are being computed (--fake-prefill-us-per-token, --fake-perf)
	stTransferring                 // decode under --fake-perf: its KV is arriving from the prefill (until readyAt)
)

// request is one rid in the scheduler. Only the scheduler goroutine
// touches it.
type request struct {
	rid        string
	promptLen  int
	params     fakemodel.Params
	stream     bool
	interval   int
	logprob    bool
	room       *uint64
	bootstrap  string // host:port of the prefill's rendezvous (decode)
	state      reqState
	invalid    string // validation failure: one terminal abort
	tokens     []int  // generated so far
	sent       int    // tokens already emitted
	cancel     context.CancelFunc
	firstToken *int // decode: the prefill's token from the KV
	inputIDs   []int32
	promptLP   int           // prefill: logprob_start_len of a prompt-logprob request; -1 none
	topN       int           // top-k alternatives per token asked (return_logprob with top_logprobs_num); 0 none
	cached     int           // prompt tokens found in the prefix cache at admission
	pinned     []*cachedPage // cache pages it uses (never evicted meanwhile)
	readyAt    time.Time     // stPrefilling: when its prompt is computed; stTransferring: when its KV has arrived
	done       int           // --fake-perf: prompt tokens in its KV (cached, then each chunk computed)
}

// pdResult comes back from a transfer goroutine.
type pdResult struct {
	rid string
	req *request
	kv  bootstrap.KV
	err error
}

// outEntry is one rid's column values in an output batch.
type outEntry struct {
	rid       string
	ids       []int
	finish    string
	prompt    int
	completed int
	cached    int
	lpVal     []float64
	lpIdx     []int
	// topVal and topIdx are each token's top-k alternatives (sent in the
	// full variant, tsd's design: docs/protocol.md §6.7).
	topVal [][]float64
	topIdx [][]int32

	// full sends this rid in the full BatchTokenIDOut variant (tsd's
	// design for prompt logprobs): abort message and input logprobs.
	full    bool
	message string
	inVal   []float64
	inIdx   []int32
}

// engine is one leader rank's scheduler: a single goroutine owns every
// request; a reader goroutine feeds it decoded input, PD goroutines feed
// it transfer results.
type engine struct {
	r        *rank
	cfg      config
	in       zmq4.Socket
	transfer *bootstrap.TransferServer

	inbox   chan wire.InputMessage
	encIn   chan encodeMsg
	embDone chan embResult
	pdDone  chan pdResult
	reqs    map[string]*request
	order   []*request // admission order of live requests (waiting, running)
	aborted map[string]time.Time
	pending []outEntry // terminal outputs decided outside a step (aborts, PD results)
	cap     int        // max running requests on this rank
	clients map[string]*bootstrap.Client

	received int // ADDs seen, for the request-count fault knobs
	batches  int // output batches sent
	hung     bool
	vocab    *fakemodel.Vocab // see vocabulary

	cache     *prefixCache     // nil: no prefix cache (decode, encode, caching off)
	kvPub     *kvpub.Publisher // nil: no KV events
	kvBatches int              // event batches made (--fake-kv-events-drop)
	busyUntil time.Time        // prompts are computed one at a time

	inflight *perfStep // --fake-perf: the step being computed (nil: none)
	waitWhy  string    // --fake-perf: why admission last stopped, logged when it changes
}

func newEngine(r *rank, in zmq4.Socket, t *bootstrap.TransferServer, pub *kvpub.Publisher) *engine {
	e := &engine{
		r: r, cfg: r.cfg, in: in, transfer: t,
		inbox:   make(chan wire.InputMessage, 256),
		encIn:   make(chan encodeMsg, 256),
		embDone: make(chan embResult, 256),
		pdDone:  make(chan pdResult, 256),
		reqs:    map[string]*request{},
		aborted: map[string]time.Time{},
		cap:     max(1, r.cfg.maxNumSeqs/r.cfg.dp),
		clients: map[string]*bootstrap.Client{},
		kvPub:   pub,
	}
	if hasPrefixCache(r.cfg) {
		e.cache = newPrefixCache(r.cfg.prefixGranularity, r.cfg.maxTotalTokens, pub != nil)
	}
	return e
}

// hasPrefixCache: prefill and plain engines reuse prompt prefixes; a
// decode receives its KV from the prefill and an encode has no KV cache
// (docs/protocol.md §16.6).
func hasPrefixCache(cfg config) bool {
	return cfg.prefixCaching && (cfg.mode == "prefill" || cfg.mode == "null") && cfg.prefixGranularity > 0
}

// run never returns: the process ends by signal, crash or launcher.
func (e *engine) run() {
	go e.readInput()
	var hangTimer <-chan time.Time
	if e.cfg.hangAfter > 0 {
		hangTimer = time.After(e.cfg.hangAfter)
	}
	if e.cfg.perf != nil {
		e.runPerf(hangTimer)
		return
	}
	var period time.Duration
	if e.cfg.tokensPerS > 0 {
		period = time.Duration(float64(time.Second) / e.cfg.tokensPerS)
	}
	timer := time.NewTimer(time.Hour)
	ready := time.NewTimer(time.Hour)
	next := time.Now()
	for {
		if e.hung {
			e.r.log.warn("ts-fake.py:1", "fake: scheduler hung (stops reading and stepping)")
			select {}
		}
		if !e.hasWork() {
			// Nothing to step until something arrives or a prompt being
			// computed is done.
			var due <-chan time.Time
			if t, ok := e.nextReadyAt(stPrefilling); ok {
				ready.Reset(time.Until(t))
				due = ready.C
			}
			if e.take(due, hangTimer) {
				e.drain()
				if !e.hung {
					e.step()
				}
			}
			next = time.Now()
			continue
		}
		if wait := time.Until(next); wait > 0 {
			timer.Reset(wait)
			if !e.take(timer.C, hangTimer) {
				continue
			}
		}
		e.drain()
		if e.hung {
			continue
		}
		e.step()
		next = next.Add(period)
		if now := time.Now(); next.Before(now) {
			next = now
		}
	}
}

// take waits for one arrival (a request, an encode, a finished transfer or
// the hang knob's moment) and handles it, or for due: the next step's
// time (nil: no step pending). It reports whether the step is due.
func (e *engine) take(due, hang <-chan time.Time) bool {
	select {
	case m := <-e.inbox:
		e.handle(m)
	case m := <-e.encIn:
		e.handleEncode(m)
	case res := <-e.embDone:
		e.handleEmbeddings(res)
	case res := <-e.pdDone:
		e.handlePD(res)
	case <-hang:
		e.hung = true
	case <-due:
		return true
	}
	return false
}

// drain takes everything already queued so one step batches it, as a real
// scheduler admits all arrivals since its last iteration.
func (e *engine) drain() {
	for {
		select {
		case m := <-e.inbox:
			e.handle(m)
		case m := <-e.encIn:
			e.handleEncode(m)
		case res := <-e.embDone:
			e.handleEmbeddings(res)
		case res := <-e.pdDone:
			e.handlePD(res)
		default:
			return
		}
	}
}

// hasWork says a step now would do something: an output to send, a
// request running, or one waiting with a slot free for it.
func (e *engine) hasWork() bool {
	if len(e.pending) > 0 {
		return true
	}
	busy, waiting := 0, false
	for _, q := range e.order {
		switch q.state {
		case stRunning:
			return true
		case stWaiting:
			waiting = true
		case stFetching, stSending, stPrefilling:
			busy++
		}
	}
	return waiting && busy < e.cap
}

// nextReadyAt is the earliest readyAt of the requests in state: when the
// next prompt being computed is done (stPrefilling), or the next decode
// request's KV has arrived (stTransferring, under the performance model).
func (e *engine) nextReadyAt(state reqState) (time.Time, bool) {
	var t time.Time
	ok := false
	for _, q := range e.order {
		if q.state == state && (!ok || q.readyAt.Before(t)) {
			t, ok = q.readyAt, true
		}
	}
	return t, ok
}

// readInput decodes the input DEALER; what fails to decode is dropped with
// a warning and the engine keeps reading (docs/protocol.md §5.1).
func (e *engine) readInput() {
	log := e.r.log
	for {
		msg, err := e.in.Recv()
		if err != nil {
			// zmq4 reports a lost connection as a Recv error; libzmq would
			// silently reconnect, so keep reading.
			log.plain("msgpack recv: input connection lost: %v", err)
			continue
		}
		if len(msg.Frames) >= 2 && len(msg.Frames[0]) == 1 && msg.Frames[0][0] == wire.TypeAdd {
			// EPD framing (tsd's design): an EncodeRequest travels as an
			// ADD (type 0x00) whose payload carries the EncodeRequest tag;
			// frames after the payload are its out-of-band tensors.
			if tag, err := wire.PeekTag(msg.Frames[1]); err == nil && tag == wire.TagEncodeRequest {
				if m, ok := e.decodeEncode(msg.Frames[1], msg.Frames[2:]); ok {
					e.encIn <- m
				}
				continue
			}
		}
		m, err := wire.DecodeInputFrames(msg.Frames)
		if err != nil {
			log.plain("msgpack recv: dropping undecodable message: %v", err)
			continue
		}
		e.inbox <- m
	}
}

func (e *engine) handle(m wire.InputMessage) {
	switch m.Type {
	case wire.TypeAbort:
		for _, rid := range m.Abort.RIDs {
			e.abort(rid)
		}
	case wire.TypeAdd:
		e.received++
		e.add(*m.Generate)
		if k := e.cfg.exitAfterReqs; k > 0 && e.received == k {
			e.r.report("exit " + strconv.Itoa(e.cfg.exitCode))
		}
		if k := e.cfg.hangAfterReqs; k > 0 && e.received >= k {
			e.hung = true
		}
		if k := e.cfg.kvClearAfter; k > 0 && e.received == k && e.cache != nil {
			e.r.log.warn("ts-fake.py:1", "fake: clearing the prefix cache (--fake-kv-clear-after-requests)")
			e.cache.clear()
			e.publishKV()
		}
	}
}

// abort is a client abort: no output at all. Unknown rids are remembered
// for 300 s because an abort may overtake its ADD (docs/protocol.md §5.6).
func (e *engine) abort(rid string) {
	q, ok := e.reqs[rid]
	if !ok {
		now := time.Now()
		for k, t := range e.aborted {
			if now.Sub(t) > 300*time.Second {
				delete(e.aborted, k)
			}
		}
		e.aborted[rid] = now
		return
	}
	e.remove(q)
}

func (e *engine) remove(q *request) {
	if q.cancel != nil {
		q.cancel()
	}
	if e.cache != nil {
		e.cache.unpin(q.pinned)
		q.pinned = nil
	}
	delete(e.reqs, q.rid)
	for i, o := range e.order {
		if o == q {
			e.order = append(e.order[:i], e.order[i+1:]...)
			break
		}
	}
}

// add admits one ADD: seed, validation, length clamp (docs/protocol.md §5.4).
func (e *engine) add(g wire.GenerateRequest) {
	if t, ok := e.aborted[g.RID]; ok && time.Since(t) <= 300*time.Second {
		delete(e.aborted, g.RID)
		return
	}
	sp := g.Sampling
	if !sp.IsNormalized {
		sp = sp.Normalized()
	}
	seed := fakemodel.Seed(g.RID)
	if sp.Seed != nil {
		seed = uint32(*sp.Seed)
	}
	q := &request{rid: g.RID, promptLen: len(g.InputIDs), stream: g.Stream, logprob: g.ReturnLogprob,
		inputIDs: g.InputIDs, promptLP: -1}
	if (e.cfg.mode == "prefill" || e.cfg.mode == "null") && g.ReturnLogprob && g.LogprobStartLen >= 0 {
		// The engines that compute the prompt: a prefill answers them on
		// its terminal output, an aggregated engine on its first
		// (docs/protocol.md §6.6).
		q.promptLP = g.LogprobStartLen
	}
	if g.ReturnLogprob && g.TopLogprobsNum > 0 && e.cfg.topLogprobs {
		q.topN = g.TopLogprobsNum
	}
	q.interval = e.cfg.streamInterval
	if sp.StreamInterval != nil && *sp.StreamInterval > 0 {
		q.interval = *sp.StreamInterval
	}
	stops := make([]int, len(sp.StopTokenIDs))
	for i, s := range sp.StopTokenIDs {
		stops[i] = int(s)
	}
	q.params = fakemodel.Params{Seed: seed, MinNewTokens: sp.MinNewTokens, StopTokenIDs: stops,
		IgnoreEOS: sp.IgnoreEOS, EOS: e.cfg.eos, Vocab: e.cfg.vocab, TokenMin: e.cfg.tokenMin}
	limit := e.cfg.maxModelLen - q.promptLen - 1
	q.params.MaxNewTokens = limit
	if sp.MaxNewTokens != nil && *sp.MaxNewTokens < limit {
		q.params.MaxNewTokens = *sp.MaxNewTokens
	}
	switch {
	case g.RID == "":
		q.invalid = "empty rid"
	case len(g.InputIDs) == 0:
		q.invalid = "empty input_ids"
	case limit <= 0:
		q.invalid = fmt.Sprintf("input of %d tokens does not fit max_model_len %d", q.promptLen, e.cfg.maxModelLen)
	case g.ReturnLogprob && !e.cfg.logprobs:
		q.invalid = "logprobs were requested but the server was started without --enable-output-logprobs"
	case q.promptLP >= 0 && !e.cfg.promptLogprobs:
		q.invalid = "prompt logprobs (logprob_start_len >= 0) are not supported by this engine"
	case q.promptLP >= len(g.InputIDs):
		q.invalid = fmt.Sprintf("logprob_start_len %d is not below the prompt length %d", q.promptLP, len(g.InputIDs))
	case e.cfg.perf != nil && q.promptLen > e.cfg.maxTotalTokens:
		q.invalid = fmt.Sprintf("input of %d tokens exceeds the KV pool of %d tokens", q.promptLen, e.cfg.maxTotalTokens)
	}
	if q.invalid == "" {
		q.invalid = checkMultimodal(g)
	}
	if q.invalid == "" {
		if id, ok := g.SessionID(); ok {
			q.invalid = "session " + id + " does not exist"
		} else if err := sp.Validate(e.cfg.vocab); err != nil {
			q.invalid = err.Error()
		}
	}
	if q.invalid == "" {
		q.params.Reply, q.invalid = e.scriptedReply(g, sp)
	}
	if _, dup := e.reqs[q.rid]; dup && q.invalid == "" {
		// Upstream does not detect duplicates; the newer one wins here so
		// the scheduler's map stays consistent.
		e.remove(e.reqs[q.rid])
	}
	if q.invalid != "" {
		e.r.log.warn("request_handler.py:402", "Request %s failed validation: %s", q.rid, q.invalid)
		e.finishNow(q, "abort")
		return
	}
	if k := e.cfg.abortReqs; k > 0 && e.received <= k {
		e.r.log.warn("ts-fake.py:1", "fake: request %s aborted (--fake-abort-requests: %d of the first %d)", q.rid, e.received, k)
		e.finishNow(q, "abort")
		return
	}
	if e.cfg.mode == "prefill" || e.cfg.mode == "decode" {
		if g.BootstrapRoom == nil {
			e.r.log.errorf("request_handler.py:441", "Request %s has no bootstrap_room in %s mode", q.rid, e.cfg.mode)
			e.finishNow(q, "abort")
			return
		}
		q.room = g.BootstrapRoom
		host, port := bootstrapHost(e.cfg), e.cfg.bootstrapPort
		if g.BootstrapHost != nil && *g.BootstrapHost != "" {
			host = *g.BootstrapHost
		}
		if g.BootstrapPort != nil {
			port = *g.BootstrapPort // nil: the engine substitutes its own flag
		}
		q.bootstrap = net.JoinHostPort(host, strconv.Itoa(port))
	}
	e.reqs[q.rid] = q
	e.order = append(e.order, q)
	if e.cfg.mode == "decode" {
		e.startFetch(q)
	}
	if e.cfg.mode == "prefill" {
		e.startEmbeddingWait(q, g)
	}
}

// finishNow queues a terminal output with no tokens.
func (e *engine) finishNow(q *request, reason string) {
	// A prompt-logprob request learns why in the full variant's message.
	e.pending = append(e.pending, outEntry{rid: q.rid, ids: []int{}, finish: reason, prompt: q.promptLen,
		full: q.promptLP >= 0, message: q.invalid})
	e.logFinish(q.rid, q.promptLen, 0, reason)
}

func (e *engine) logFinish(rid string, prompt, completion int, reason string) {
	e.logFinishCached(rid, prompt, completion, 0, reason)
}

// logFinishCached is the finish line with the prompt tokens the prefix
// cache held (request_stats' cache_tokens upstream).
func (e *engine) logFinishCached(rid string, prompt, completion, cached int, reason string) {
	if e.cfg.logRequests {
		e.r.log.info("request_handler.py:512", "Req: %s Finish! prompt_tokens=%d, completion_tokens=%d, cached_tokens=%d, finish_reason=%s", rid, prompt, completion, cached, reason)
	}
}

func (e *engine) client(addr string) *bootstrap.Client {
	c := e.clients[addr]
	if c == nil {
		c = bootstrap.NewClient(addr, 5*time.Second)
		e.clients[addr] = c
	}
	return c
}

// startFetch: the decode waits (up to --fake-kv-timeout) for the prefill
// of its room: it looks up the prefill's DP group `room mod dp` at the
// rendezvous and long-polls that rank's transfer endpoint.
func (e *engine) startFetch(q *request) {
	q.state = stFetching
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.kvTimeout)
	q.cancel = cancel
	c, room, rid, done, hb := e.client(q.bootstrap), *q.room, q.rid, e.pdDone, e.cfg.heartbeat
	go func() {
		kv, err := fetchKVWatched(ctx, c, room, hb)
		if ctx.Err() == context.Canceled {
			return // aborted by the client
		}
		done <- pdResult{rid: rid, req: q, kv: kv, err: err}
	}()
}

// fetchKVWatched is fetchKV while polling the rendezvous' /health every
// interval; two misses in a row mean the prefill is dead and the fetch
// fails early, as upstream's decode heartbeat does.
func fetchKVWatched(ctx context.Context, c *bootstrap.Client, room uint64, interval time.Duration) (bootstrap.KV, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if interval > 0 {
		go func() {
			misses := 0
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				hctx, hcancel := context.WithTimeout(ctx, interval)
				err := c.Health(hctx)
				hcancel()
				if err == nil {
					misses = 0
					continue
				}
				if misses++; misses >= 2 {
					cancel(fmt.Errorf("prefill bootstrap server failed %d heartbeats: %w", misses, err))
					return
				}
			}
		}()
	}
	kv, err := fetchKV(ctx, c, room)
	if cause := context.Cause(ctx); err != nil && cause != nil && cause != ctx.Err() {
		return kv, cause
	}
	return kv, err
}

func fetchKV(ctx context.Context, c *bootstrap.Client, room uint64) (bootstrap.KV, error) {
	var info bootstrap.ParallelInfo
	var addr bootstrap.RankAddr
	err := retry(ctx, func() (err error) { info, err = c.ParallelInfo(ctx); return err })
	if err != nil {
		//lint:ignore ST1005 the wording is the upstream decode's, which logs readers grep for
		return bootstrap.KV{}, fmt.Errorf("Could not fetch prefill parallel info from bootstrap_addr: %w", err)
	}
	group := bootstrap.DPGroup(room, info.PrefillDPSize)
	err = retry(ctx, func() (err error) { addr, err = c.RankAddr(ctx, 0, group); return err })
	if err != nil {
		return bootstrap.KV{}, fmt.Errorf("could not fetch prefill rank of dp group %d: %w", group, err)
	}
	return bootstrap.Fetch(ctx, addr, room)
}

// retry repeats f until it succeeds or ctx ends (the prefill may register
// after our request arrived).
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startSend: the prefill offers its KV under the room and waits (up to
// --fake-send-timeout) for the decode to fetch it; only then does it emit
// its terminal output.
func (e *engine) startSend(q *request) {
	q.state = stSending
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.sendTimeout)
	q.cancel = cancel
	kv := bootstrap.KV{Room: *q.room, Rid: q.rid, PromptLen: q.promptLen, FirstToken: q.tokens[0]}
	t, rid, done := e.transfer, q.rid, e.pdDone
	go func() {
		err := t.Send(ctx, kv)
		if ctx.Err() == context.Canceled {
			return
		}
		done <- pdResult{rid: rid, req: q, kv: kv, err: err}
	}()
}

func (e *engine) handlePD(res pdResult) {
	q, ok := e.reqs[res.rid]
	if !ok || q != res.req {
		return // aborted meanwhile
	}
	if res.err == nil && res.kv.Error != "" && q.state == stFetching {
		res.err = fmt.Errorf("prefill aborted the request: %s", res.kv.Error)
	}
	if res.err != nil {
		e.r.log.errorf("conn.py:633", "KV transfer failed for request %s (room %d): %v", q.rid, *q.room, res.err)
		e.remove(q)
		e.pending = append(e.pending, outEntry{rid: q.rid, ids: []int{}, finish: "abort", prompt: q.promptLen, completed: len(q.tokens)})
		e.logFinish(q.rid, q.promptLen, len(q.tokens), "abort")
		return
	}
	switch q.state {
	case stFetching:
		tok := res.kv.FirstToken
		q.firstToken = &tok
		q.state = stRunning
		if e.cfg.perf != nil {
			q.state = stWaiting // for a batch slot and KV room, then the transfer (perfsched.go)
		}
	case stSending:
		reason := q.params.Finish(0, q.tokens[0])
		if reason == "" {
			reason = "length"
		}
		e.remove(q)
		o := e.entry(q, reason)
		if q.promptLP >= 0 {
			o.full = true
			o.inVal, o.inIdx = promptLogprobs(q.inputIDs, q.promptLP)
		}
		e.pending = append(e.pending, o)
		e.logFinishCached(q.rid, q.promptLen, 1, q.cached, reason)
	}
}

// entry builds q's output columns from its unsent tokens.
func (e *engine) entry(q *request, reason string) outEntry {
	ids := append([]int{}, q.tokens[q.sent:]...)
	o := outEntry{rid: q.rid, ids: ids, finish: reason, prompt: q.promptLen, completed: len(q.tokens), cached: q.cached}
	if q.logprob {
		o.lpVal = make([]float64, len(ids))
		o.lpIdx = ids
		for i := range ids {
			o.lpVal[i] = fakemodel.Logprob(q.params.Seed, q.sent+i)
		}
	}
	if e.cfg.mode == "null" && q.promptLP >= 0 && q.sent == 0 {
		o.full = true
		o.inVal, o.inIdx = promptLogprobs(q.inputIDs, q.promptLP)
	}
	if q.topN > 0 {
		o.full = true
		o.topVal, o.topIdx = make([][]float64, len(ids)), make([][]int32, len(ids))
		lo, n := q.params.TokenRange()
		for i, tok := range ids {
			vals, alt := fakemodel.TopLogprobs(q.params.Seed, q.sent+i, tok, q.topN, lo, n)
			o.topVal[i], o.topIdx[i] = vals, toInt32(alt)
		}
	}
	q.sent = len(q.tokens)
	return o
}

// emitNow is the cadence of docs/protocol.md §6.4 for a running request.
func emitNow(q *request) bool {
	n := len(q.tokens)
	if q.stream {
		k := max(q.interval, 1)
		if k == 1 {
			return true
		}
		return n%k == 1
	}
	return n == 1 || n%50 == 0
}

// step is one scheduler iteration: admit, give every running request one
// token, send one batch with everything worth reporting.
func (e *engine) step() {
	now := time.Now()
	running := 0
	for _, q := range e.order {
		if q.state == stRunning || q.state == stFetching || q.state == stSending || q.state == stPrefilling {
			running++
		}
	}
	batch := e.pending
	e.pending = nil
	var done []*request
	for _, q := range e.order {
		if q.state == stWaiting {
			if running >= e.cap {
				continue
			}
			running++
			e.admitRunning(q, now)
		}
		if q.state == stPrefilling && !now.Before(q.readyAt) {
			q.state = stRunning
			e.computed(q)
		}
		if q.state != stRunning {
			continue
		}
		if e.advance(q, &batch) {
			done = append(done, q)
		}
	}
	e.endStep(done, batch)
}

// endStep closes a scheduler step (step, and finishPerf under the
// performance model): the finished requests leave, the step's outputs go
// out in one batch, and the prefix cache's changes are published.
func (e *engine) endStep(done []*request, batch []outEntry) {
	for _, q := range done {
		e.remove(q)
	}
	if len(batch) > 0 {
		e.send(batch)
	}
	e.publishKV()
}

// advance gives running request q its next token and adds what is worth
// reporting to batch; it reports whether q finished (the caller removes
// it). A prefill request hands its first token to the transfer instead.
func (e *engine) advance(q *request, batch *[]outEntry) bool {
	i := len(q.tokens)
	tok := q.params.Token(i)
	if i == 0 && q.firstToken != nil {
		tok = *q.firstToken
	}
	q.tokens = append(q.tokens, tok)
	reason := q.params.Finish(i, tok)
	if e.cfg.mode == "prefill" {
		e.startSend(q) // no intermediate output; terminal after the transfer
		return false
	}
	if reason != "" {
		*batch = append(*batch, e.entry(q, reason))
		e.logFinishCached(q.rid, q.promptLen, len(q.tokens), q.cached, reason)
		e.finished(q)
		return true
	}
	if emitNow(q) {
		*batch = append(*batch, e.entry(q, ""))
	}
	return false
}

// admitRunning gives a waiting request its slot: the prefix cache finds
// what of its prompt is computed already; the rest costs
// --fake-prefill-us-per-token each, computed after the prompts before it
// (one at a time, as one GPU does). A decode request has no prompt to
// compute: its KV comes from the prefill.
func (e *engine) admitRunning(q *request, now time.Time) {
	q.state = stRunning
	if e.cfg.mode != "prefill" && e.cfg.mode != "null" {
		return
	}
	if e.cache != nil {
		q.cached, q.pinned = e.cache.match(q.inputIDs)
	}
	if us := e.cfg.prefillUsPerToken; us > 0 {
		cost := time.Duration(float64(q.promptLen-q.cached) * us * float64(time.Microsecond))
		start := now
		if e.busyUntil.After(start) {
			start = e.busyUntil
		}
		q.readyAt = start.Add(cost)
		e.busyUntil = q.readyAt
		if e.cfg.logRequests {
			e.r.log.info("scheduler.py:402", "fake: prefill of %s: %d uncached prompt tokens, %s", q.rid, q.promptLen-q.cached, cost)
		}
		if q.readyAt.After(now) {
			q.state = stPrefilling
			return
		}
	}
	e.computed(q)
}

// computed: q's prompt is in the KV cache now; its whole pages are
// cached (a prefill's prompt plus its first token, less the last token,
// is the prompt: docs/protocol.md §16.6).
func (e *engine) computed(q *request) {
	if e.cache == nil {
		return
	}
	pins := e.cache.store(q.inputIDs, len(q.inputIDs)/e.cache.page)
	e.cache.unpin(q.pinned)
	q.pinned = pins
}

// finished: a plain (non-PD) engine also caches the pages its output
// filled, all but the last token's.
func (e *engine) finished(q *request) {
	if e.cache == nil || e.cfg.mode != "null" {
		return
	}
	all := make([]int32, 0, len(q.inputIDs)+len(q.tokens))
	all = append(all, q.inputIDs...)
	for _, t := range q.tokens {
		all = append(all, int32(t))
	}
	pins := e.cache.store(all, (len(all)-1)/e.cache.page)
	e.cache.unpin(q.pinned)
	q.pinned = pins
}

// publishKV sends what the cache did since the last batch as one
// KVEventBatch, as the engine does after each scheduler step.
func (e *engine) publishKV() {
	if e.cache == nil || e.kvPub == nil {
		return
	}
	evs := e.cache.takeEvents()
	if len(evs) == 0 {
		return
	}
	b := kvevents.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: evs, DPRank: e.r.dpRank, HasDPRank: true}
	e.kvBatches++
	if e.kvBatches == e.cfg.kvDropAt {
		e.r.log.warn("ts-fake.py:1", "fake: KV event batch %d not sent on the PUB (--fake-kv-events-drop)", e.kvBatches-1)
		e.kvPub.PublishUnsent(b)
		return
	}
	e.kvPub.Publish(b)
}

// send writes one output batch (and, once, a malformed frame before it
// when --fake-malformed-output asks).
func (e *engine) send(batch []outEntry) {
	var full []outEntry
	slim := batch[:0:0]
	for _, o := range batch {
		if o.full {
			full = append(full, o)
		} else {
			slim = append(slim, o)
		}
	}
	if len(full) > 0 {
		b, err := encodeFullBatch(full)
		if err != nil {
			e.r.log.errorf("zmq_msgpack.py:260", "encode full output batch: %v", err)
		} else {
			e.write(b)
		}
	}
	if len(slim) == 0 {
		return
	}
	batch = slim
	e.batches++
	if e.cfg.malformed != "" && e.batches == e.cfg.malformedAt {
		e.r.log.warn("ts-fake.py:1", "fake: injecting a malformed output frame (%s)", e.cfg.malformed)
		e.write(malformedFrame(e.cfg.malformed, e.r.index))
	}
	b, err := encodeBatch(batch, e.r.index)
	if err != nil {
		e.r.log.errorf("zmq_msgpack.py:260", "encode output batch: %v", err)
		return
	}
	e.write(b)
}

func (e *engine) write(b []byte) {
	e.r.outMu.Lock()
	out := e.r.out
	e.r.outMu.Unlock()
	if err := out.Send(zmq4.NewMsg(b)); err != nil {
		e.r.log.errorf("zmq_msgpack.py:265", "send output batch: %v", err)
	}
}

package kvevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RankEndpoints is where one DP rank publishes (docs/protocol.md §16.2):
// its PUB and its replay ROUTER, as the gateway dials them.
type RankEndpoints struct {
	Publish string // tcp://HOST:PORT
	Replay  string // tcp://HOST:PORT; "" when the engine has no replay socket
}

// EngineConfig is one prefill engine whose events the gateway follows.
type EngineConfig struct {
	Worker string          // role instance name, as Match is asked
	Ranks  []RankEndpoints // DP rank i at index i
	Topic  string          // "" subscribes to everything the rank publishes
}

// Options tune a Subscriber; zero values are sensible.
type Options struct {
	Logger *slog.Logger
	// OnPanic hears a panic a goroutine of the subscriber recovered from.
	OnPanic func(where string, v any, stack []byte)
	Limits  Limits
	// MaxTokens caps each rank's index (0: DefaultMaxTokens).
	MaxTokens int
	// DialTimeout bounds one connection attempt with its handshake; 0: 2 s.
	DialTimeout time.Duration
	// RetryMin and RetryMax bound the wait between connection attempts
	// while an engine starts (doubling); 0: 100 ms and 2 s.
	RetryMin, RetryMax time.Duration
	// ReplayTimeout bounds one replay answer; 0: 5 s.
	ReplayTimeout time.Duration
	// CatchUp is how often a connected rank asks its replay socket for
	// anything past its last batch, which finds batches lost without a
	// later one showing the gap (the publisher's first batches before the
	// subscription took, or the last ones before a quiet spell); 0: 5 s,
	// negative: never.
	CatchUp time.Duration
	// MaxPending bounds the live batches held while a replay runs; 0: 4096.
	MaxPending int
	// MaxReplay bounds the batches of one replay answer; 0: twice the
	// engine's default buffer (20,000).
	MaxReplay int
	// MaxHeldBytes bounds the payload bytes of the live batches held
	// during a replay, and separately those of one replay answer; 0:
	// 64 MiB. (A step's batch is tens of KB; a hostile publisher stops
	// here.)
	MaxHeldBytes int
	// OnChange is called by an engine's owner after its state changed
	// (tests wait on it; it must not block).
	OnChange func(worker string)
	// Now is the clock of the predicted blocks' claims; nil: time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 100 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 2 * time.Second
	}
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = 5 * time.Second
	}
	if o.CatchUp == 0 {
		o.CatchUp = 5 * time.Second
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 4096
	}
	if o.MaxReplay <= 0 {
		o.MaxReplay = 2 * DefaultBufferSteps
	}
	if o.MaxHeldBytes <= 0 {
		o.MaxHeldBytes = 64 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Limits = o.Limits.withDefaults()
	return o
}

// Subscriber follows the KV events of a set of prefill engines and
// answers Match from an exact index per DP rank (dispatch.KVIndex). One
// owner goroutine per engine owns its ranks' indexes and sequence state;
// per rank one goroutine reads the SUB socket and one serves replays,
// each feeding the owner's inbox.
type Subscriber struct {
	opts Options
	// set is the engines followed, by worker and in order: an immutable
	// value, swapped under mu when tsd apply adds, removes or renames a
	// prefill (live.go).
	set     atomic.Pointer[engineSet]
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started atomic.Bool
}

// New prepares a subscriber; Start dials.
func New(engines []EngineConfig, o Options) *Subscriber {
	o = o.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{opts: o, ctx: ctx, cancel: cancel}
	set := &engineSet{engines: map[string]*engine{}}
	for _, c := range engines {
		if len(c.Ranks) == 0 || set.engines[c.Worker] != nil {
			continue
		}
		set = set.with(c.Worker, s.newEngine(c))
	}
	s.set.Store(set)
	return s
}

// Start dials every rank's publisher; connecting goes on in the
// background for as long as it takes the engines to start.
func (s *Subscriber) Start() {
	if !s.started.CompareAndSwap(false, true) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.set.Load()
	for _, w := range set.order {
		s.run(set.engines[w])
	}
}

// Close stops every goroutine and closes every connection.
func (s *Subscriber) Close() {
	s.cancel()
	s.wg.Wait()
}

// Workers are the engines followed, in configuration order.
func (s *Subscriber) Workers() []string { return append([]string(nil), s.set.Load().order...) }

// Match implements dispatch.KVIndex: per DP rank of worker, the leading
// tokens of prompt its cache would reuse (whole pages, never the last
// token), published or predicted (Predict), and whether the worker's
// events are live. An engine not followed, or not live, answers (nil,
// false) at once.
func (s *Subscriber) Match(worker string, prompt []int32) ([]int, bool) {
	e := s.set.Load().engines[worker]
	if e == nil {
		return nil, false
	}
	st := e.status.Load()
	if !st.Live {
		return nil, false
	}
	per := make([]int, len(e.ranks))
	if MatchPages(len(prompt), PredictPage) == 0 && (st.blockSize == 0 || MatchPages(len(prompt), st.blockSize) == 0) {
		return per, true // a prompt shorter than a page
	}
	q := queryPool.Get().(*query)
	q.prompt, q.bs, q.per, q.predict = prompt, st.blockSize, per, false
	q.keys = q.keys[:0]
	if st.blockSize > 0 {
		q.keys = PageKeys(q.keys, prompt, st.blockSize)
	}
	live := false
	select {
	case e.queries <- q:
		live = <-q.reply
	case <-e.ctx.Done():
	}
	q.prompt, q.per = nil, nil
	queryPool.Put(q)
	if !live {
		return nil, false
	}
	return per, true
}

// Predict counts prompt's blocks as DP rank dpRank's of worker for ttl, or
// until the rank's events publish or remove them (docs/protocol.md
// §16.8): the gateway has just routed the prompt there. It returns once
// the engine's owner has taken it, so a Match after it sees it.
func (s *Subscriber) Predict(worker string, dpRank int, prompt []int32, ttl time.Duration) {
	e := s.set.Load().engines[worker]
	if e == nil || dpRank < 0 || dpRank >= len(e.ranks) || len(prompt) < PredictPage || ttl <= 0 {
		return
	}
	q := queryPool.Get().(*query)
	q.prompt, q.predict, q.rank, q.ttl = prompt, true, dpRank, ttl
	select {
	case e.queries <- q:
		<-q.reply
	case <-e.ctx.Done():
	}
	q.prompt = nil
	queryPool.Put(q)
}

// Registered tells the subscriber that DP rank dpRank of worker completed
// a handshake with the lane: a (re)started engine, whose cache is empty,
// so its index is reset unless its publisher already showed a new start.
func (s *Subscriber) Registered(worker string, dpRank int) {
	e := s.set.Load().engines[worker]
	if e == nil || dpRank < 0 || dpRank >= len(e.ranks) {
		return
	}
	select {
	case e.regs <- dpRank:
	case <-e.ctx.Done():
	}
}

// EngineStatus is one engine's events as the dashboard shows them.
type EngineStatus struct {
	Worker string
	Live   bool   // every rank subscribed, no unrecovered gap
	Note   string // why not live, or ""
	Ranks  []RankStatus

	blockSize int // the ranks' common block size (0 until known)
}

// RankStatus is one DP rank's subscription and index.
type RankStatus struct {
	DPRank    int
	Connected bool // the SUB socket is connected
	Live      bool
	Blocks    int // blocks its cache holds
	BlockSize int
	Note      string // why not live, or ""
}

// Status is every followed engine's current state.
func (s *Subscriber) Status() []EngineStatus {
	set := s.set.Load()
	out := make([]EngineStatus, 0, len(set.order))
	for _, w := range set.order {
		st := *set.engines[w].status.Load()
		st.Worker = w // its name now (a rename moves it)
		out = append(out, st)
	}
	return out
}

// StatusOf is one engine's state; ok is false when it is not followed.
func (s *Subscriber) StatusOf(worker string) (EngineStatus, bool) {
	e := s.set.Load().engines[worker]
	if e == nil {
		return EngineStatus{}, false
	}
	st := *e.status.Load()
	st.Worker = worker
	return st, true
}

// --- the owner --------------------------------------------------------------

type noteKind int

const (
	noteConnected noteKind = iota
	noteDisconnected
	noteMessage
	noteBadMessage // a batch that cannot be decoded: lost for good
	noteReplayItem
	noteReplayDone
	noteReplayFailed
)

// note is what a rank's reader or replayer tells the owner.
type note struct {
	rank  int
	kind  noteKind
	seq   uint64
	batch Batch
	err   error
	id    uint64 // replay request the item answers
	size  int    // the payload's bytes (the held-bytes budgets)
}

type replayReq struct {
	id   uint64
	from uint64
}

// query is a Match or, with predict, a Predict, for the engine's owner.
type query struct {
	prompt  []int32
	keys    []uint64
	bs      int
	per     []int
	reply   chan bool
	predict bool
	rank    int
	ttl     time.Duration
}

var queryPool = sync.Pool{New: func() any { return &query{reply: make(chan bool, 1)} }}

type engine struct {
	s       *Subscriber
	ctx     context.Context // ends with the subscriber, or when the engine is no longer followed
	cancel  context.CancelFunc
	cfg     EngineConfig
	log     *slog.Logger
	inbox   chan note
	queries chan *query
	regs    chan int
	status  atomic.Pointer[EngineStatus]

	ranks    []*rankState // the owner's alone
	replayID uint64
}

// rankState is one rank's sequence and index; the owner's alone.
type rankState struct {
	idx       *Index
	connected bool
	// synced: the replay that follows each connection finished, so
	// batches published before the subscription took (a SUB misses what
	// its PUB sent before it processed the subscription) are in the
	// index, and a restarted publisher was told from the one the index
	// followed; until then the rank is not live.
	synced  bool
	started bool    // a batch was applied since the last reset
	next    uint64  // the sequence expected next
	lastTS  float64 // ts of the last batch applied
	fresh   bool    // no batch yet since the SUB (re)connected
	// newStream: a publisher start (its first batch, or a sequence
	// restart) was seen since the SUB last disconnected; a registration
	// then needs no reset, the stream already reset the index.
	newStream bool
	broken    string // an unrecovered loss: not live until a restart or AllBlocksCleared
	// suspect: its last connection ended in a protocol violation; not
	// live until it delivers a valid batch again.
	suspect bool
	note    string // the last problem worth showing

	replaying  bool
	replay     uint64 // id of the replay in flight
	replayNeed uint64 // a known gap ends below this
	verify     bool   // the replay in flight also checks the publisher's identity
	answer     []pendingBatch
	pending    []pendingBatch // live batches held while the replay runs
	answerB    int            // payload bytes in answer
	pendingB   int            // payload bytes in pending
	replays    chan replayReq
	lastReplay time.Time
}

type pendingBatch struct {
	seq   uint64
	batch Batch
}

func (e *engine) own() {
	tick := make(<-chan time.Time)
	if e.s.opts.CatchUp > 0 {
		t := time.NewTicker(e.s.opts.CatchUp)
		defer t.Stop()
		tick = t.C
	}
	ctx := e.ctx
	for {
		// Queries first: Match runs per request and must not wait
		// behind a burst of events.
		select {
		case q := <-e.queries:
			e.safe("match", func() { e.answer(q) }, func() { q.reply <- false })
			continue
		default:
		}
		select {
		case <-ctx.Done():
			return
		case q := <-e.queries:
			e.safe("match", func() { e.answer(q) }, func() { q.reply <- false })
		case n := <-e.inbox:
			e.safe("event", func() { e.handle(n) }, e.resetAll)
		case r := <-e.regs:
			e.safe("registration", func() { e.registered(r) }, e.resetAll)
		case <-tick:
			e.safe("catch-up", e.catchUp, e.resetAll)
		}
	}
}

// supervise runs loop until the subscriber closes: a panic that escapes
// it is reported and the loop starts again (the daemon never dies of a
// publisher).
func (e *engine) supervise(what string, loop func()) {
	for e.ctx.Err() == nil {
		panicked := false
		func() {
			defer func() {
				if v := recover(); v != nil {
					panicked = true
					if h := e.s.opts.OnPanic; h != nil {
						h("kv events "+what+" of "+e.cfg.Worker, v, debug.Stack())
					}
				}
			}()
			loop()
		}()
		if panicked && !e.sleep(e.s.opts.RetryMax) {
			return // not a tight loop on a panic that repeats
		}
	}
}

// safe runs f; a panic is reported and then undo restores a sane state.
func (e *engine) safe(where string, f, undo func()) {
	defer func() {
		if v := recover(); v != nil {
			if h := e.s.opts.OnPanic; h != nil {
				h("kv events "+where+" of "+e.cfg.Worker, v, debug.Stack())
			}
			undo()
		}
	}()
	f()
}

func (e *engine) resetAll() {
	for _, r := range e.ranks {
		r.idx.Reset()
		r.started, r.next, r.replaying, r.pending, r.answer, r.pendingB, r.answerB = false, 0, false, nil, nil, 0, 0
		r.broken = "index reset after an internal error"
	}
	e.publish()
}

func (e *engine) answer(q *query) {
	now := e.s.opts.Now()
	if q.predict {
		e.ranks[q.rank].idx.Predict(q.prompt, now, q.ttl)
		q.reply <- true
		return
	}
	live := true
	var keys []uint64
	for i, r := range e.ranks {
		if !r.connected || !r.synced || r.suspect || r.broken != "" {
			live = false
			break
		}
		bs := r.idx.BlockSize()
		switch {
		case bs == q.bs:
			q.per[i] = r.idx.MatchAt(q.prompt, q.keys, now)
		default:
			keys = PageKeys(keys[:0], q.prompt, bs)
			q.per[i] = r.idx.MatchAt(q.prompt, keys, now)
		}
	}
	q.reply <- live
}

func (e *engine) handle(n note) {
	r := e.ranks[n.rank]
	current := r.replaying && n.id == r.replay
	switch n.kind {
	case noteConnected:
		r.connected, r.fresh, r.synced = true, true, false
		if !r.suspect {
			r.note = ""
			e.log.Info("kv events: subscribed", "dp_rank", n.rank, "endpoint", e.cfg.Ranks[n.rank].Publish)
		}
		// Catch up on what was published before the subscription took,
		// and tell a restarted publisher from the one the index follows.
		e.requestReplay(n.rank, 0, true)
		if !r.replaying {
			r.synced = true // no replay socket: nothing to catch up with
		}
	case noteDisconnected:
		var pe protocolError
		bad := errors.As(n.err, &pe)
		switch {
		case bad && !r.suspect:
			e.log.Warn("kv events: the publisher sent bad data; connection cut, not trusted until it sends a valid batch", "dp_rank", n.rank, "err", pe.Error())
		case r.connected && !r.suspect:
			e.log.Info("kv events: publisher connection lost; reconnecting", "dp_rank", n.rank, "err", errText(n.err))
		}
		r.connected, r.newStream, r.synced = false, false, false
		r.note = "publisher not connected"
		if bad {
			r.suspect = true
			r.note = "publisher sent bad data: " + pe.Error()
		} else if r.suspect {
			r.note = "publisher not connected (it sent bad data before)"
		}
		// A replay in flight is given up; the replay after the next
		// connection brings whatever it would have.
		e.abandonReplay(n.rank)
		r.pending, r.pendingB = nil, 0
	case noteMessage:
		if r.replaying {
			if len(r.pending) >= e.s.opts.MaxPending || r.pendingB+n.size > e.s.opts.MaxHeldBytes {
				e.abandonReplay(n.rank)
				r.pending, r.pendingB = nil, 0
				e.lose(n.rank, fmt.Sprintf("more than %d batches (%d bytes) arrived during a replay", e.s.opts.MaxPending, e.s.opts.MaxHeldBytes), n.seq+1)
				e.publish()
				return
			}
			r.pending = append(r.pending, pendingBatch{n.seq, n.batch})
			r.pendingB += n.size
			return
		}
		e.consume(n.rank, n.seq, n.batch)
	case noteBadMessage:
		e.lose(n.rank, "undecodable batch "+fmt.Sprint(n.seq)+": "+errText(n.err), n.seq+1)
	case noteReplayItem:
		if !current {
			return // a replay given up on
		}
		if len(r.answer) >= e.s.opts.MaxReplay || r.answerB+n.size > e.s.opts.MaxHeldBytes {
			e.replayEnded(n.rank, fmt.Errorf("replay answer of more than %d batches or %d bytes", e.s.opts.MaxReplay, e.s.opts.MaxHeldBytes))
			e.publish()
			return
		}
		r.answer = append(r.answer, pendingBatch{n.seq, n.batch})
		r.answerB += n.size
	case noteReplayDone:
		if current {
			e.replayEnded(n.rank, nil)
		}
	case noteReplayFailed:
		if current {
			e.replayEnded(n.rank, n.err)
		}
	}
	e.publish()
}

// consume takes one live batch (docs/protocol.md §16.5).
func (e *engine) consume(rank int, seq uint64, b Batch) {
	r := e.ranks[rank]
	act, from := decideSeq(r.started, r.fresh, r.next, seq)
	r.fresh = false
	switch act {
	case actApply:
		if !r.started {
			r.newStream = true
		}
		e.apply(rank, seq, b)
	case actSkip:
	case actRestart:
		e.log.Info("kv events: publisher restarted (batch 0 again); index reset", "dp_rank", rank)
		e.resetRank(r)
		r.newStream = true
		e.apply(rank, seq, b)
	case actRestartReplay:
		e.log.Info("kv events: publisher restarted; index reset, replaying its first batches", "dp_rank", rank, "first_seen", seq)
		e.resetRank(r)
		r.newStream = true
		r.pending = append(r.pending, pendingBatch{seq, b})
		e.requestReplay(rank, seq, false)
	case actReplay:
		if !r.started {
			r.newStream = true
		}
		r.pending = append(r.pending, pendingBatch{seq, b})
		e.requestReplay(rank, max(seq, from), false)
	}
}

func (e *engine) resetRank(r *rankState) {
	r.idx.Reset()
	r.started, r.next, r.lastTS, r.broken = false, 0, 0, ""
}

// apply puts batch seq into the index; it is the next one.
func (e *engine) apply(rank int, seq uint64, b Batch) {
	r := e.ranks[rank]
	r.started, r.next, r.lastTS = true, seq+1, b.TS
	st, err := r.idx.Apply(b.Events)
	if err != nil {
		e.lose(rank, "batch "+fmt.Sprint(seq)+" refused: "+err.Error(), seq+1)
		return
	}
	if r.suspect {
		r.suspect, r.note = false, ""
	}
	for _, ev := range b.Events {
		if ev.Kind == KindAllBlocksCleared && r.broken != "" {
			e.log.Info("kv events: AllBlocksCleared; the index is exact again", "dp_rank", rank)
			r.broken = ""
		}
	}
	if st.UnknownKinds > 0 && r.note == "" {
		r.note = "ignoring events of unknown kinds"
	}
}

// requestReplay asks the rank's replayer for the batches the index may
// lack: from its next sequence, or (verify, after a reconnect) from the
// last one it applied, to check the publisher too. need > 0: a known gap
// ends below it.
func (e *engine) requestReplay(rank int, need uint64, verify bool) {
	r := e.ranks[rank]
	if r.replaying && !verify {
		r.replayNeed = max(r.replayNeed, need)
		return
	}
	if e.cfg.Ranks[rank].Replay == "" {
		if need > 0 {
			e.lose(rank, "the engine has no replay endpoint", r.resumeAt())
			e.drainPending(rank)
		}
		return
	}
	from := r.next
	if verify && r.started && r.next > 0 {
		from = r.next - 1
	}
	e.replayID++
	r.replaying, r.replay, r.replayNeed, r.verify, r.answer, r.answerB = true, e.replayID, need, verify, nil, 0
	r.lastReplay = time.Now()
	req := replayReq{id: e.replayID, from: from}
	select {
	case r.replays <- req:
	default:
		// The replayer has not taken an older request yet; its id is
		// stale now, so swap it for this one.
		select {
		case <-r.replays:
		default:
		}
		r.replays <- req
	}
}

// abandonReplay forgets the replay in flight (its answers are ignored).
func (e *engine) abandonReplay(rank int) {
	r := e.ranks[rank]
	r.replaying, r.answer, r.answerB = false, nil, 0
}

// replayEnded applies a finished replay answer (err: it failed) and then
// the live batches held meanwhile.
func (e *engine) replayEnded(rank int, err error) {
	r := e.ranks[rank]
	items, verify, need := r.answer, r.verify, r.replayNeed
	r.replaying, r.answer, r.answerB, r.replayNeed, r.verify = false, nil, 0, 0, false
	r.synced = r.connected
	switch {
	case err != nil && need == 0:
		// Nothing known to be missing: no loss (a catch-up finds it later).
		e.log.Debug("kv events: catch-up replay failed", "dp_rank", rank, "err", err)
	case err != nil:
		e.lose(rank, "replay failed: "+err.Error(), r.resumeAt())
	default:
		keys := make([]replayKey, len(items))
		for i, it := range items {
			keys[i] = replayKey{it.seq, it.batch.TS}
		}
		plan := decideReplayAnswer(r.started, r.next, r.lastTS, verify, need, keys)
		if plan.restart {
			e.log.Info("kv events: publisher restarted; index reset", "dp_rank", rank)
			e.resetRank(r)
			r.newStream = true
		}
		for _, it := range items[plan.from:] {
			e.apply(rank, it.seq, it.batch)
		}
		if plan.lost != "" {
			e.lose(rank, plan.lost, r.resumeAt())
		}
		if verify {
			r.fresh = false
		}
		if plan.again {
			// The restarted publisher's batches from 0; the live ones
			// stay held until they are in.
			e.requestReplay(rank, 0, false)
			return
		}
	}
	e.drainPending(rank)
}

// resumeAt is where the stream is followed again after a loss: the first
// live batch held, or the next expected.
func (r *rankState) resumeAt() uint64 {
	if len(r.pending) > 0 {
		return r.pending[0].seq
	}
	return r.next
}

// drainPending consumes the live batches held during a replay; one of
// them may start another replay, which holds the rest again.
func (e *engine) drainPending(rank int) {
	r := e.ranks[rank]
	held := r.pending
	r.pending, r.pendingB = nil, 0
	for i, p := range held {
		if r.replaying {
			r.pending = append(r.pending, held[i:]...)
			return
		}
		e.consume(rank, p.seq, p.batch)
	}
}

// lose records an unrecoverable loss: the rank's index is reset, and
// from resume on the stream is followed again (the index then holds a
// subset of the cache, so it is not trusted for routing).
func (e *engine) lose(rank int, why string, resume uint64) {
	r := e.ranks[rank]
	if r.broken == "" {
		e.log.Warn("kv events: lost cache state; index reset, routing this engine by cache_aware until it restarts or clears its cache", "dp_rank", rank, "why", why)
	}
	r.idx.Reset()
	r.broken = why
	r.started, r.next, r.fresh = true, resume, false
}

// registered: the lane saw the rank register, so the engine (re)started.
func (e *engine) registered(rank int) {
	r := e.ranks[rank]
	if r.newStream {
		r.newStream = false // its publisher's new stream already reset the index
		e.publish()
		return
	}
	if r.started || r.idx.Blocks() > 0 || r.broken != "" {
		e.log.Info("kv events: rank registered again (engine restart); index reset", "dp_rank", rank)
	}
	e.resetRank(r)
	r.fresh = true
	e.abandonReplay(rank)
	r.pending, r.pendingB = nil, 0
	if r.connected {
		e.requestReplay(rank, 0, false) // anything its new publisher sent already
	}
	e.publish()
}

func (e *engine) catchUp() {
	now := e.s.opts.Now()
	for i, r := range e.ranks {
		r.idx.Prune(now)
		if r.connected && !r.replaying && time.Since(r.lastReplay) >= e.s.opts.CatchUp/2 {
			e.requestReplay(i, 0, false)
		}
	}
	e.publish()
}

// publish makes the owner's state visible to Match and the dashboard.
func (e *engine) publish() {
	st := &EngineStatus{Worker: e.cfg.Worker, Live: true, Ranks: make([]RankStatus, len(e.ranks))}
	var notes []string
	for i, r := range e.ranks {
		rs := RankStatus{DPRank: i, Connected: r.connected, Blocks: r.idx.Blocks(), BlockSize: r.idx.BlockSize(), Note: r.note}
		switch {
		case !r.connected:
			if rs.Note == "" {
				rs.Note = "publisher not connected"
			}
		case r.suspect: // r.note says what it sent
		case !r.synced:
			rs.Note = "catching up"
		case r.broken != "":
			rs.Note = "events lost: " + r.broken
		default:
			rs.Live = true
		}
		if !rs.Live {
			st.Live = false
			notes = append(notes, fmt.Sprintf("rank %d: %s", i, rs.Note))
		}
		if rs.BlockSize > 0 && st.blockSize == 0 {
			st.blockSize = rs.BlockSize
		}
		st.Ranks[i] = rs
	}
	st.Note = strings.Join(notes, "; ")
	e.status.Store(st)
	if f := e.s.opts.OnChange; f != nil {
		f(e.cfg.Worker)
	}
}

func errText(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}

// --- the rank goroutines ------------------------------------------------------

func (e *engine) notify(n note) bool {
	select {
	case e.inbox <- n:
		return true
	case <-e.ctx.Done():
		return false
	}
}

// sleep waits d or until the subscriber closes; false: it closed.
func (e *engine) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.ctx.Done():
		return false
	}
}

// readLoop keeps rank's SUB connected and feeds its batches to the owner.
// Connection attempts while the engine starts are quiet: one line when
// the wait begins, one when it ends.
func (e *engine) readLoop(rank int) {
	o, ctx, ep := e.s.opts, e.ctx, e.cfg.Ranks[rank].Publish
	wait := o.RetryMin
	waiting := false
	for ctx.Err() == nil {
		z, err := e.dialSub(ctx, ep)
		if err != nil {
			if !waiting {
				waiting = true
				e.log.Info("kv events: waiting for the publisher", "dp_rank", rank, "endpoint", ep, "err", err)
			}
			if !e.sleep(wait) {
				return
			}
			wait = min(2*wait, o.RetryMax)
			continue
		}
		waiting = false
		if !e.notify(note{rank: rank, kind: noteConnected}) {
			z.close()
			return
		}
		err = e.readSub(rank, z)
		z.close()
		if !e.notify(note{rank: rank, kind: noteDisconnected, err: err}) {
			return
		}
		var pe protocolError
		if !errors.As(err, &pe) {
			wait = o.RetryMin
			continue
		}
		// A publisher that breaks the protocol is not redialled at once.
		if !e.sleep(wait) {
			return
		}
		wait = min(2*wait, o.RetryMax)
	}
}

func (e *engine) dialSub(ctx context.Context, ep string) (*zconn, error) {
	z, err := dialZMTP(ctx, ep, typeSUB, e.s.opts.Limits, e.s.opts.DialTimeout)
	if err != nil {
		return nil, err
	}
	if err := z.subscribe(e.cfg.Topic); err != nil {
		z.close()
		return nil, err
	}
	return z, nil
}

// readSub reads until the connection fails; a panic while decoding ends
// the connection (the next one starts afresh), never the process.
func (e *engine) readSub(rank int, z *zconn) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if h := e.s.opts.OnPanic; h != nil {
				h("kv events reader of "+e.cfg.Worker, v, debug.Stack())
			}
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	stop := context.AfterFunc(e.ctx, z.close)
	defer stop()
	for {
		frames, err := z.recv()
		if err != nil {
			return err
		}
		m, err := DecodeMessage(frames)
		if err != nil {
			return protocolError{err} // not a KV event publisher: reconnect
		}
		if e.cfg.Topic != "" && !strings.HasPrefix(string(m.Topic), e.cfg.Topic) {
			continue
		}
		b, err := DecodeBatch(m.Payload)
		n := note{rank: rank, kind: noteMessage, seq: m.Seq, batch: b, size: len(m.Payload)}
		if err != nil {
			n = note{rank: rank, kind: noteBadMessage, seq: m.Seq, err: err}
		}
		if !e.notify(n) {
			return e.ctx.Err()
		}
	}
}

// replayLoop serves the owner's replay requests for rank over one DEALER
// connection, kept open between requests.
func (e *engine) replayLoop(rank int) {
	ctx := e.ctx
	r := e.ranks[rank]
	var z *zconn
	defer func() {
		if z != nil {
			z.close()
		}
	}()
	for {
		var req replayReq
		select {
		case <-ctx.Done():
			return
		case req = <-r.replays:
		}
		reused := z != nil
		var err error
		var answered bool
		z, answered, err = e.serveReplay(rank, z, req)
		if err != nil && reused && !answered && ctx.Err() == nil {
			// The kept connection may be to a publisher that has since
			// gone (an engine restart): try once on a new one.
			z, _, err = e.serveReplay(rank, nil, req)
		}
		if err != nil {
			if z != nil {
				z.close()
				z = nil
			}
			if !e.notify(note{rank: rank, kind: noteReplayFailed, id: req.id, err: err}) {
				return
			}
		}
	}
}

// serveReplay asks for req and forwards the answer; answered says any of
// it arrived. On error the connection should not be reused.
func (e *engine) serveReplay(rank int, z *zconn, req replayReq) (_ *zconn, answered bool, err error) {
	if z != nil {
		defer func() {
			if err != nil {
				z.close()
			}
		}()
	}
	defer func() {
		if v := recover(); v != nil {
			if h := e.s.opts.OnPanic; h != nil {
				h("kv events replay of "+e.cfg.Worker, v, debug.Stack())
			}
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	o, ctx := e.s.opts, e.ctx
	ep := e.cfg.Ranks[rank].Replay
	if z == nil {
		if z, err = dialZMTP(ctx, ep, typeDEALER, o.Limits, o.DialTimeout); err != nil {
			return nil, false, err
		}
	}
	stop := context.AfterFunc(ctx, z.close)
	defer stop()
	if err := z.send(ReplayRequest(req.from)); err != nil {
		return z, false, fmt.Errorf("send replay request to %s: %w", ep, err)
	}
	z.setReadDeadline(time.Now().Add(o.ReplayTimeout))
	defer z.setReadDeadline(time.Time{})
	for {
		frames, err := z.recv()
		if err != nil {
			return z, answered, fmt.Errorf("read replay answer from %s: %w", ep, err)
		}
		answered = true
		it, err := DecodeReplay(frames)
		if err != nil {
			return z, true, err
		}
		if it.End {
			if !e.notify(note{rank: rank, kind: noteReplayDone, id: req.id}) {
				return z, true, ctx.Err()
			}
			return z, true, nil
		}
		b, err := DecodeBatch(it.Payload)
		if err != nil {
			return z, true, fmt.Errorf("replayed batch %d: %w", it.Seq, err)
		}
		if !e.notify(note{rank: rank, kind: noteReplayItem, id: req.id, seq: it.Seq, batch: b, size: len(it.Payload)}) {
			return z, true, ctx.Err()
		}
	}
}

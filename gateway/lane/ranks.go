package lane

// A worker's ranks have one owner: the rank book's goroutine. It alone
// changes a rank's handshake state, registration and stall verdict,
// from what its inputs bring: the handshake and input sockets' messages
// and the input socket's peer events (forwarded by the worker's socket
// readers), its ticker (the stall rule and the silence backstop), a
// stalled rank speaking again (from the output path), and commands (the
// supervisor's view, an engine's ENGINE_CORE_DEAD). After every change
// it publishes the rank's event to subscribers and an immutable
// rankView, which every reader (routing, submit's errors, status) takes
// without a lock. The rank's state is mirrored into the stream table in
// the same step as the streams it ends are taken (streams.go), so the
// table alone decides what a submit may join.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/snapshot"
)

// rank is one engine rank as the rank book keeps it.
type rank struct {
	st snapshot.RankStatus
	// stalled is the lane's own verdict (no output for StallTimeout while
	// it owed some); its next output lifts it.
	stalled bool
	// unaborted are the rids the stall verdict ended here but not on the
	// engine: the engine sends nothing for an aborted rid (docs/protocol.md,
	// abort), so a rank that recovers is only heard from through the work
	// it still runs. Their ABORT goes out when it speaks again.
	unaborted []string
}

// up reports a rank that completed its registration and has not gone
// away since; it may be stalled.
func up(r *rank) bool {
	return r.st.State == snapshot.RankRegistered || r.st.State == snapshot.RankStalled
}

// rankView is the rank book's state as last published: immutable, read
// without a lock.
type rankView struct {
	ranks     []snapshot.RankStatus // by identity
	expected  int                   // ranks awaited: the plan's DP until a registration says
	maxLen    int                   // the smallest max_model_len the registered ranks declared (0: none)
	bootstrap string                // the rendezvous host:port (registration's, else the plan's)
}

// routable lists the registered ranks, by identity, without their load.
func (v *rankView) routable() []RankLoad {
	var out []RankLoad
	for _, st := range v.ranks {
		if st.State == snapshot.RankRegistered {
			out = append(out, RankLoad{Identity: st.Identity, DPRank: st.DPRank, Since: st.Since})
		}
	}
	return out
}

// registered counts the ranks that are up (registered or stalled).
func (v *rankView) registered() int {
	n := 0
	for _, st := range v.ranks {
		if st.State == snapshot.RankRegistered || st.State == snapshot.RankStalled {
			n++
		}
	}
	return n
}

// rankInput is a message of the handshake or input socket, or an input
// socket peer event, for the rank book.
type rankInput struct {
	src    int // fromHandshake, fromInput, fromPeer
	frames [][]byte
	ev     PeerEvent
}

const (
	fromHandshake = iota
	fromInput
	fromPeer
)

// rankBook owns a worker's ranks.
type rankBook struct {
	w     *Worker
	table *streamTable

	// The owner's state: touched only by run's goroutine.
	ranks    map[int]*rank
	expected int
	learned  bool   // expected came from a registration
	regBoot  string // bootstrap host:port from a registration, if any
	ticker   *time.Ticker

	view   atomic.Pointer[rankView]
	inputs chan rankInput
	cmds   chan func()
	spoken *queue[int] // stalled ranks that spoke again (streamTable.spoke)
	stop   chan struct{}
	done   chan struct{}
}

func newRankBook(w *Worker, t *streamTable) *rankBook {
	b := &rankBook{w: w, table: t, ranks: map[int]*rank{}, expected: w.plan.DP,
		inputs: make(chan rankInput), cmds: make(chan func()), spoken: newQueue[int](), stop: make(chan struct{}), done: make(chan struct{})}
	t.spoke = func(id int) { b.spoken.push(id) }
	now := w.now()
	for r := range w.plan.DP {
		id := w.plan.EngineIndex + r
		b.ranks[id] = &rank{st: snapshot.RankStatus{Identity: id, DPRank: r, State: snapshot.RankWaiting, Since: now}}
		b.publish(b.ranks[id], "")
	}
	return b
}

// run is the owner's loop; it ends when stop closes.
func (b *rankBook) run() {
	defer close(b.done)
	defer func() {
		if b.ticker != nil {
			b.ticker.Stop()
		}
	}()
	// guard's labels, one per kind of input (the gateway's panic metric
	// names the kind), built again only when the role changes.
	role, where := "", [5]string{}
	for {
		var tick <-chan time.Time
		if b.ticker != nil {
			tick = b.ticker.C
		}
		var fn func()
		site := 3 // a command
		select {
		case in := <-b.inputs:
			fn, site = func() { b.onInput(in) }, in.src
		case c := <-b.cmds:
			fn = c
		case <-b.spoken.wake:
			fn = func() {
				ids, _ := b.spoken.take()
				for _, id := range ids {
					b.onSpoke(id)
				}
			}
		case <-tick:
			fn, site = b.watch, 4
		case <-b.stop:
			return
		}
		if r := b.w.Role(); r != role || where[0] == "" {
			role = r
			for i, k := range []string{"handshake message", "input message", "peer event", "rank book", "watchdog"} {
				where[i] = r + " " + k
			}
		}
		guard(b.w.lane.opts.OnPanic, where[site], fn)
	}
}

// do runs fn in the owner's goroutine and waits for it; false when the
// owner has stopped (fn did not run).
func (b *rankBook) do(fn func()) bool {
	ran := make(chan struct{})
	select {
	case b.cmds <- func() { defer close(ran); fn() }:
	case <-b.done:
		return false
	}
	<-ran
	return true
}

// post runs fn in the owner's goroutine without waiting for it to run.
func (b *rankBook) post(fn func()) {
	select {
	case b.cmds <- fn:
	case <-b.done:
	}
}

// feed hands the owner one input; false once it has stopped.
func (b *rankBook) feed(in rankInput) bool {
	select {
	case b.inputs <- in:
		return true
	case <-b.done:
		return false
	}
}

// startWatch starts the owner's ticker: the per-rank stall check and the
// whole-worker silence backstop.
func (b *rankBook) startWatch() {
	o := b.w.lane.opts
	every := min(o.SilenceTimeout/4, time.Second)
	if o.StallTimeout > 0 {
		every = min(every, o.StallTimeout/4)
	}
	b.post(func() { b.ticker = time.NewTicker(every) })
}

func (b *rankBook) close() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
}

// publish sends the rank's whole state to subscribers and publishes the
// book's view. Only the owner (or newRankBook, before it runs) calls it,
// which keeps events of one worker in order.
func (b *rankBook) publish(r *rank, errMsg string) {
	v := &rankView{expected: b.expected, bootstrap: b.bootstrap(), ranks: make([]snapshot.RankStatus, 0, len(b.ranks))}
	for _, o := range b.ranks {
		st := o.st
		if st.Registration != nil {
			reg := *st.Registration
			st.Registration = &reg
			if st.State == snapshot.RankRegistered && reg.MaxModelLen > 0 && (v.maxLen == 0 || int(reg.MaxModelLen) < v.maxLen) {
				v.maxLen = int(reg.MaxModelLen)
			}
		}
		v.ranks = append(v.ranks, st)
	}
	sort.Slice(v.ranks, func(i, j int) bool { return v.ranks[i].Identity < v.ranks[j].Identity })
	b.view.Store(v)
	st := r.st
	st.InFlight = b.table.inflightOf(st.Identity)
	if st.Registration != nil {
		reg := *st.Registration
		st.Registration = &reg
	}
	b.w.lane.broker.publish(snapshot.RankEvent{Role: b.w.Role(), Rank: st, Err: errMsg})
}

func (b *rankBook) rankOf(id int) *rank {
	r := b.ranks[id]
	if r == nil {
		dp := id - b.w.plan.EngineIndex
		r = &rank{st: snapshot.RankStatus{Identity: id, DPRank: dp, State: snapshot.RankWaiting, Since: b.w.now()}}
		b.ranks[id] = r
	}
	return r
}

// move sets r's state (mirrored into the stream table); with take, the
// rank's streams are taken in the same step and returned.
func (b *rankBook) move(r *rank, state string, take bool) (time.Time, []*Stream) {
	now := b.w.now()
	r.st.State = state
	r.st.Since = now
	return now, b.table.setState(r.st.Identity, state, r.stalled, take)
}

func (b *rankBook) setState(r *rank, state string) time.Time {
	now, _ := b.move(r, state, false)
	return now
}

func (b *rankBook) onInput(in rankInput) {
	switch in.src {
	case fromHandshake:
		b.onHandshake(in.frames)
	case fromInput:
		b.onRegistrationMsg(in.frames)
	case fromPeer:
		b.onPeerDown(in.ev)
	}
}

func (b *rankBook) onHandshake(f [][]byte) {
	log := b.w.lane.log
	if len(f) != 2 {
		log.Warn("handshake message dropped: want [identity, payload]", "worker", b.w.Role(), "frames", len(f))
		return
	}
	idx, err := wire.DecodeIdentity(f[0])
	if err != nil {
		log.Warn("handshake message dropped", "worker", b.w.Role(), "err", err)
		return
	}
	id := int(idx)
	m, err := wire.DecodeHandshake(f[1])
	if err != nil {
		b.rankErr(id, fmt.Sprintf("bad handshake message: %v", err))
		return
	}
	switch m.Status {
	case wire.StatusHello:
		b.onHello(id, f[0])
	case wire.StatusReady:
		b.onReady(id)
	default:
		b.rankErr(id, fmt.Sprintf("unexpected handshake status %q", m.Status))
	}
}

func (b *rankBook) rankErr(id int, msg string) {
	b.w.lane.log.Warn("engine rank protocol error", "worker", b.w.Role(), "identity", id, "err", msg)
	b.publish(b.rankOf(id), msg)
}

// onHello starts (or restarts) a rank's handshake and answers INIT at once
// (SMG replies to each HELLO as it arrives). A HELLO from an identity we
// already know is a restarted engine: its old requests cannot complete.
func (b *rankBook) onHello(id int, identity []byte) {
	w := b.w
	if why := w.helloRefusal(identity); why != "" {
		w.lane.log.Warn("engine HELLO refused", "worker", w.Role(), "identity", id, "peer", peerAddrs(w.hs, identity), "why", why)
		refuseHandshakePeer(w.hs, identity)
		return
	}
	r := b.rankOf(id)
	restart := r.st.State != snapshot.RankWaiting && r.st.State != snapshot.RankDisconnected
	// A HELLO is a new run of the engine: the lane's stall verdict on the
	// old one does not carry over. The supervisor's is in its view and is
	// its to lift: a role's exit clears it before its next run can greet.
	r.stalled, r.unaborted = false, nil
	now, failed := b.move(r, snapshot.RankHello, restart)
	r.st.HelloAt = now
	r.st.InitAt, r.st.ReadyAt, r.st.RegisteredAt = time.Time{}, time.Time{}, time.Time{}
	r.st.Registration = nil
	b.publish(r, "")
	// INIT goes out right below; recording it first keeps the state
	// ordered even when READY and the registration arrive before the
	// send returns.
	r.st.InitAt = b.setState(r, snapshot.RankInitSent)
	b.publish(r, "")
	for _, s := range failed {
		s.fail(w.errf(id, ErrRankRestarted))
	}
	// The send may wait for a peer that does not read (WriteTimeout):
	// not in the owner's goroutine, which every rank needs.
	helloAt, payload := now, w.initPayload
	go func() {
		err := w.hs.Send([][]byte{identity, payload})
		if err == nil {
			return
		}
		b.post(func() {
			if r.st.State == snapshot.RankInitSent && r.st.HelloAt.Equal(helloAt) {
				b.setState(r, snapshot.RankHello)
				r.st.InitAt = time.Time{}
			}
			b.publish(r, fmt.Sprintf("send INIT: %v", err))
		})
	}()
}

func (b *rankBook) onReady(id int) {
	r := b.rankOf(id)
	switch r.st.State {
	case snapshot.RankInitSent, snapshot.RankHello:
		r.st.ReadyAt = b.setState(r, snapshot.RankReady)
		b.publish(r, "")
	case snapshot.RankRegistered, snapshot.RankStalled:
		// The registration (input socket) overtook READY (handshake socket).
		if r.st.ReadyAt.IsZero() {
			r.st.ReadyAt = b.w.now()
		}
	default:
		b.publish(r, "READY without HELLO")
	}
}

func (b *rankBook) onRegistrationMsg(f [][]byte) {
	log := b.w.lane.log
	if len(f) < 2 || len(f[1]) == 0 {
		log.Warn("input message dropped: want [identity, registration]", "worker", b.w.Role(), "frames", len(f))
		return
	}
	idx, err := wire.DecodeIdentity(f[0])
	if err != nil {
		log.Warn("input message dropped", "worker", b.w.Role(), "err", err)
		return
	}
	reg, err := wire.DecodeRegistration(f[1])
	if err != nil {
		b.rankErr(int(idx), fmt.Sprintf("bad registration: %v", err))
		return
	}
	b.onRegistration(int(idx), reg)
}

// onRegistration admits a rank. The first registration of a worker says
// how many ranks to await (data_parallel_size) and where they start.
func (b *rankBook) onRegistration(id int, reg wire.Registration) {
	w := b.w
	r := b.rankOf(id)
	var problems []string
	if up(r) {
		problems = append(problems, "second registration from a registered rank")
	}
	if r.st.State == snapshot.RankWaiting || r.st.State == snapshot.RankDisconnected {
		problems = append(problems, "registration without a handshake")
	}
	d := max(reg.DataParallelSize, 1)
	if !b.learned {
		b.learned = true
		b.expected = d
		base := id - reg.DataParallelRank
		for rid, rr := range b.ranks {
			if (rid < base || rid >= base+d) && rr.st.State == snapshot.RankWaiting {
				// Planned, but the engine says its ranks live elsewhere
				// (another --zmq-engine-index or DP size): say so once, then
				// drop it from the registry.
				b.publish(rr, fmt.Sprintf("not awaited: the engine declared identities %d..%d", base, base+d-1))
				delete(b.ranks, rid)
				b.table.forget(rid)
				w.lane.broker.forget(w.Role(), rid)
			}
		}
		for k := range d {
			if _, ok := b.ranks[base+k]; !ok {
				nr := b.rankOf(base + k)
				nr.st.DPRank = k
				b.publish(nr, "")
			}
		}
	} else if d != b.expected {
		problems = append(problems, fmt.Sprintf("declares data_parallel_size %d, the worker's first rank declared %d", d, b.expected))
	}
	for oid, o := range b.ranks {
		if oid != id && up(o) && o.st.DPRank == reg.DataParallelRank {
			problems = append(problems, fmt.Sprintf("data_parallel_rank %d already registered by identity %d", reg.DataParallelRank, oid))
		}
	}
	if reg.BootstrapHost != nil || reg.BootstrapPort != nil {
		b.regBoot = bootstrapFrom(reg, w.plan.Bootstrap)
	}
	r.stalled = false
	now := b.setState(r, b.upState(r))
	r.st.RegisteredAt = now
	if r.st.ReadyAt.IsZero() {
		r.st.ReadyAt = now
	}
	r.st.DPRank = reg.DataParallelRank
	r.st.Registration = registrationStatus(reg, b.bootstrap())
	msg := ""
	if len(problems) > 0 {
		msg = fmt.Sprint(problems)
		w.lane.log.Warn("engine registration problem", "worker", w.Role(), "identity", id, "err", msg)
	}
	b.publish(r, msg)
}

// bootstrapFrom resolves host:port from a registration, filling gaps from
// the plan's address and TokenSpeed's default port (docs/protocol.md §3.7).
func bootstrapFrom(reg wire.Registration, planned string) string {
	host, port := "127.0.0.1", strconv.Itoa(wire.DefaultBootstrapPort)
	if h, p, err := net.SplitHostPort(planned); err == nil {
		host, port = h, p
	}
	if reg.BootstrapHost != nil && *reg.BootstrapHost != "" {
		host = *reg.BootstrapHost
	}
	if reg.BootstrapPort != nil && *reg.BootstrapPort > 0 {
		port = strconv.Itoa(*reg.BootstrapPort)
	}
	return net.JoinHostPort(host, port)
}

func registrationStatus(reg wire.Registration, boot string) *snapshot.Registration {
	s := &snapshot.Registration{
		MaxModelLen:       int64(reg.MaxModelLen),
		NumGPUBlocks:      int64(reg.NumGPUBlocks),
		PrefixGranularity: int64(reg.Granularity()),
		Dtype:             reg.Dtype,
		Version:           reg.VllmVersion,
		WorldSize:         int64(reg.WorldSize),
		DPSize:            int64(reg.DataParallelSize),
		DPRank:            int64(reg.DataParallelRank),
		TPSize:            int64(reg.TensorParallelSize),
		MaxNumSeqs:        int64(reg.MaxNumSeqs),
		InstanceID:        reg.InstanceID,
		Bootstrap:         boot,
	}
	if reg.KVCacheSizeTokens != nil {
		s.KVCacheTokens = int64(*reg.KVCacheSizeTokens)
	}
	if reg.DisaggregationMode != nil {
		s.DisaggMode = *reg.DisaggregationMode
	}
	return s
}

func (b *rankBook) bootstrap() string {
	if b.regBoot != "" {
		return b.regBoot
	}
	return b.w.plan.Bootstrap
}

// onPeerDown turns the input socket's last connection of an identity
// going away into the rank's death. Only the input socket's connection
// is a rank's data-plane lifeline: the engine closes its handshake DEALER
// on purpose after READY, and PUSH peers carry no identity.
func (b *rankBook) onPeerDown(ev PeerEvent) {
	idx, err := wire.DecodeIdentity(ev.Identity)
	if err != nil {
		return
	}
	if b.w.in.Live(ev.Identity) > 0 {
		// A restarted engine's new connection came up before this event
		// about its old one was read: the rank is not down, and its new
		// registration must not lose its requests.
		return
	}
	b.onDisconnect(int(idx), ErrRankDown, "input connection closed")
}

// onDisconnect marks a registered rank dead and fails its requests. Ranks
// still handshaking are left alone: a restarted engine's old connection
// may close after its new HELLO.
func (b *rankBook) onDisconnect(id int, cause error, why string) {
	r := b.ranks[id]
	if r == nil || !up(r) {
		return
	}
	r.stalled, r.unaborted = false, nil
	_, failed := b.move(r, snapshot.RankDisconnected, true)
	b.publish(r, why)
	for _, s := range failed {
		s.fail(b.w.errf(id, cause))
	}
}

// onWorkerDead handles what kills the whole engine (sentinel, silence):
// every registered rank is down and every request fails.
func (b *rankBook) onWorkerDead(cause error, why string) {
	for _, r := range b.ranks {
		if up(r) || r.st.State == snapshot.RankReady {
			r.stalled, r.unaborted = false, nil
			b.setState(r, snapshot.RankDisconnected)
			b.publish(r, why)
		}
	}
	for _, s := range b.table.take(everyStream) {
		s.fail(b.w.errf(s.Identity, cause))
	}
}

// engineDead is an engine's ENGINE_CORE_DEAD, read on its output
// connection. A planned restart or stop takes the worker out of routing
// before it signals the engine, so a death then is expected (INFO); only
// one while routed is news (WARN).
func (b *rankBook) engineDead() {
	w := b.w
	level := slog.LevelWarn
	if !w.Routed() {
		level = slog.LevelInfo
	}
	w.lane.log.Log(context.Background(), level, "engine sent ENGINE_CORE_DEAD", "worker", w.Role(), "expected", level == slog.LevelInfo)
	b.do(func() { b.onWorkerDead(ErrEngineDead, "engine sent ENGINE_CORE_DEAD") })
}

// pendingAbort is the ABORT owed to one rank for rids a stall ended.
type pendingAbort struct {
	id   int
	rids []string
}

func takeUnaborted(r *rank) pendingAbort {
	p := pendingAbort{r.st.Identity, r.unaborted}
	r.unaborted = nil
	return p
}

// upState is the state a rank that is up shows: stalled while the lane
// or the supervisor (its view) judges it so, else registered.
func (b *rankBook) upState(r *rank) string {
	if r.stalled || heldStalled(b.w.view.Load()) {
		return snapshot.RankStalled
	}
	return snapshot.RankRegistered
}

// refresh moves an up rank between registered and stalled after a
// verdict changed and publishes the change; it reports whether it did.
func (b *rankBook) refresh(r *rank, why string) bool {
	if !up(r) {
		return false
	}
	want := b.upState(r)
	if r.st.State == want {
		b.table.setState(r.st.Identity, want, r.stalled, false) // the table's verdict follows the book's
		return false
	}
	b.setState(r, want)
	b.publish(r, why)
	return true
}

// onSpoke re-admits a rank the lane judged stalled that sent output
// again, and sends the ABORTs the verdict owed it.
func (b *rankBook) onSpoke(id int) {
	r := b.ranks[id]
	if r == nil || !r.stalled {
		return
	}
	w := b.w
	r.stalled = false
	p := takeUnaborted(r)
	readmitted := b.refresh(r, "") && r.st.State == snapshot.RankRegistered
	w.send.pending([]pendingAbort{p})
	if readmitted {
		m := fmt.Sprintf("%s rank %d speaks again: back in routing", w.Role(), id)
		w.lane.log.Info("engine rank re-admitted", "worker", w.Role(), "msg", m)
		w.lane.event("readmit", w.Role(), m)
	}
}

// watch is the owner's tick: the per-rank stall check and the
// whole-worker silence backstop.
func (b *rankBook) watch() {
	w := b.w
	silence, stall := w.lane.opts.SilenceTimeout, w.lane.opts.StallTimeout
	if stall > 0 {
		b.checkStalls(stall)
	}
	last := time.Unix(0, w.lastOut.Load())
	if b.table.busy() && w.now().Sub(last) > silence {
		w.lane.log.Warn("engine silent with requests in flight", "worker", w.Role(), "for", silence)
		b.onWorkerDead(ErrEngineSilent, fmt.Sprintf("no output for %s with requests in flight", silence))
	}
}

// checkStalls takes every rank that stalled out of routing and ends its
// requests with a StallError; the next message from it re-admits it.
func (b *rankBook) checkStalls(base time.Duration) {
	w := b.w
	timeout := stallTimeoutFor(w.plan.Kind, base)
	verdicts := b.table.stalls(w.now(), timeout, func(id int) bool {
		r := b.ranks[id]
		return r != nil && up(r) && !r.stalled
	})
	ids := make([]int, 0, len(verdicts))
	for id := range verdicts {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		streams := verdicts[id]
		r := b.ranks[id]
		r.stalled = true
		msg := fmt.Sprintf("%s rank %d stalled: no output for %s with %d requests in flight", w.Role(), id, timeout, len(streams))
		b.refresh(r, msg)
		for _, s := range streams {
			r.unaborted = append(r.unaborted, s.RID)
		}
		err := &StallError{Msg: msg}
		w.lane.log.Warn("engine rank stalled", "worker", w.Role(), "identity", id, "err", msg)
		// The event first: whoever sees a request fail can find its cause.
		w.lane.event("stall", w.Role(), msg)
		for _, s := range streams {
			s.fail(err)
		}
	}
}

// setView takes the supervisor's view in the owner (SetView): the
// ranks' shown state moves with it.
func (b *rankBook) setView(v snapshot.RoleView) (ViewChange, []pendingAbort) {
	w := b.w
	c := stepView(w.view.Load(), v, w.plan.Remote)
	w.view.Store(&v)
	var aborts []pendingAbort
	if c.StallBegins || c.StallEnds {
		why := ""
		if c.StallBegins {
			why = v.Reason
		}
		for _, r := range b.ranks {
			if c.StallEnds {
				r.stalled = false
				aborts = append(aborts, takeUnaborted(r))
			}
			b.refresh(r, why)
		}
	}
	return c, aborts
}

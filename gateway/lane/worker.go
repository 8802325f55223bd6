package lane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Errors that end streams; wrapped with the worker and rank they concern.
var (
	ErrRankDown      = errors.New("engine rank disconnected")
	ErrEngineDead    = errors.New("engine reported ENGINE_CORE_DEAD")
	ErrEngineSilent  = errors.New("engine silent with requests in flight")
	ErrRankRestarted = errors.New("engine rank restarted")
	ErrNotRouted     = errors.New("role taken out of routing")
	ErrRankNotReady  = errors.New("engine rank not registered")
	ErrDuplicateRID  = errors.New("request id already in flight on this worker")
	ErrLaneClosed    = errors.New("gateway lane closed")
	ErrAborted       = errors.New("request aborted by the gateway")
	ErrRankStalled   = errors.New("engine rank stalled")
	ErrRoleAborted   = errors.New("request ended by tsd")
)

// StallError ends the requests of a rank judged stalled; its text names
// the role, rank and why, e.g. "decode-1 rank 0 stalled: no output for 30s
// with 3 requests in flight". errors.Is(err, ErrRankStalled) holds.
type StallError struct{ Msg string }

func (e *StallError) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, ErrRankStalled) hold.
func (e *StallError) Unwrap() error { return ErrRankStalled }

// engineCoreDead is the raw shutdown sentinel frame (docs/protocol.md §7.2).
var engineCoreDead = []byte("ENGINE_CORE_DEAD")

// Request type bytes on the input socket (docs/protocol.md §5.1).
const (
	typeAdd   = 0x00
	typeAbort = 0x01
)

// Worker is one engine's socket set and the ranks that dialled it.
type Worker struct {
	lane *Lane
	plan profiles.WorkerPlan
	name atomic.Pointer[string] // the role's name now (plan.Role until a rename)

	hs, in, out Socket
	initPayload []byte

	mu       sync.Mutex
	ranks    map[int]*rank
	expected int    // ranks to await: the plan's DP until a registration says
	learned  bool   // expected came from a registration
	regBoot  string // bootstrap host:port from a registration, if any
	streams  map[string]*Stream
	inflight map[int]int
	// inflightTok is, per identity, the tokens its streams were weighed
	// at (Stream.Weigh): routing's in-flight token load.
	inflightTok map[int]int
	total       int
	closed      bool

	// view is the supervisor's view of the role (view.go; nil until its
	// first): stored under mu, read without it.
	view atomic.Pointer[snapshot.RoleView]

	lastOut atomic.Int64 // unix nanos of the last output (or of going busy)
	// maxLen is the smallest max_model_len its registered ranks declared
	// (0: none registered), kept by publishLocked: every request's body
	// bound and context checks read it, and copying Ranks for them cost
	// a request more than its tokenizer-cache hit.
	maxLen atomic.Int64
	sendQ  *queue[sendJob]
	stop   chan struct{}
	wg     sync.WaitGroup
}

type rank struct {
	st snapshot.RankStatus
	// owed counts this rank's streams that expect output now (Stream.Expect);
	// heard is when it last sent any, or when owed rose from 0; gap is
	// its recent gap between outputs while it owed some (quiet.go).
	owed  int
	heard time.Time
	gap   time.Duration
	// stalled is the lane's own verdict (no output for StallTimeout while
	// owed > 0); the next message from the rank lifts it.
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

type sendJob struct {
	frames [][]byte
	stream *Stream // failed when the send fails; nil for aborts
}

func newWorker(l *Lane, p profiles.WorkerPlan) *Worker {
	w := &Worker{
		lane:        l,
		plan:        p,
		ranks:       map[int]*rank{},
		expected:    p.DP,
		streams:     map[string]*Stream{},
		inflight:    map[int]int{},
		inflightTok: map[int]int{},
		sendQ:       newQueue[sendJob](),
		stop:        make(chan struct{}),
	}
	name := p.Role
	w.name.Store(&name)
	now := l.opts.Now()
	for r := range p.DP {
		id := p.EngineIndex + r
		w.ranks[id] = &rank{st: snapshot.RankStatus{Identity: id, DPRank: r, State: snapshot.RankWaiting, Since: now}}
		w.publishLocked(w.ranks[id], "")
	}
	return w
}

// Role is the role instance name (tsd apply may rename it); Kind is
// encode, prefill or decode.
func (w *Worker) Role() string { return *w.name.Load() }

// Kind is the worker's role kind.
func (w *Worker) Kind() string { return w.plan.Kind }

// Plan is the worker's plan with bind addresses filled in.
func (w *Worker) Plan() profiles.WorkerPlan {
	p := w.plan
	p.Role = w.Role()
	return p
}

// Endpoints are the concrete input and output endpoints sent in INIT
// (empty before Bind).
func (w *Worker) Endpoints() (input, output string) {
	if w.in == nil || w.out == nil {
		return "", ""
	}
	return w.in.Endpoint(), w.out.Endpoint()
}

// HandshakeEndpoint is the bound handshake address (its port read back
// when the plan asked for port 0); engines dial it.
func (w *Worker) HandshakeEndpoint() string {
	if w.hs == nil {
		return ""
	}
	return w.hs.Endpoint()
}

func (w *Worker) bind() error {
	tr := w.lane.opts.Transport
	var paths []string
	for _, ep := range []string{w.plan.Input, w.plan.Output} {
		if p := ipcPath(ep); p != "" {
			paths = append(paths, p)
		}
	}
	if err := prepareIPC(paths...); err != nil {
		return err
	}
	bind := tr.Bind
	if ct, ok := tr.(CheckedTransport); ok {
		o := w.lane.bindOptions(w)
		bind = func(k SocketKind, ep string) (Socket, error) {
			ko := o
			if k == Pull {
				// Output goes from each engine connection's reader straight
				// to the streams (sink.go), not through Recv.
				ko.Sink = w.newOutputSink
			}
			return ct.BindWith(k, ep, ko)
		}
	}
	var err error
	if w.in, err = bind(Router, w.plan.Input); err != nil {
		return fmt.Errorf("bind input socket: %w", err)
	}
	if w.out, err = bind(Pull, w.plan.Output); err != nil {
		_ = w.in.Close()
		return fmt.Errorf("bind output socket: %w", err)
	}
	if w.hs, err = bind(Router, w.plan.Handshake); err != nil {
		_ = w.in.Close()
		_ = w.out.Close()
		return fmt.Errorf("bind handshake socket: %w", err)
	}
	w.initPayload, err = wire.EncodeInit(wire.NewInit(w.in.Endpoint(), w.out.Endpoint()))
	if err != nil {
		return fmt.Errorf("encode INIT: %w", err)
	}
	return nil
}

func (w *Worker) start() {
	loops := []func(){w.handshakeLoop, w.inputLoop, w.sendLoop, w.watchdog,
		func() { w.peerLoop(w.in, "input") }, func() { w.peerLoop(w.out, "output") }, func() { w.peerLoop(w.hs, "handshake") }}
	if s, ok := w.out.(interface{ sinks() bool }); !ok || !s.sinks() {
		loops = append(loops, w.outputLoop) // a transport without a sink
	}
	for i, f := range loops {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			// The loops guard each message themselves; this outer boundary
			// restarts a loop that still panicked, unless the worker closed.
			where := fmt.Sprintf("%s lane loop %d", w.Role(), i)
			for guard(w.lane.opts.OnPanic, where, f) {
				select {
				case <-w.stop:
					return
				default:
				}
			}
		}()
	}
}

func (w *Worker) close() error {
	w.mu.Lock()
	w.closed = true
	streams := w.takeStreamsLocked(func(*Stream) bool { return true })
	w.mu.Unlock()
	for _, s := range streams {
		s.fail(w.errf(s.Identity, ErrLaneClosed))
	}
	close(w.stop)
	w.sendQ.close()
	var errs []error
	for _, s := range []Socket{w.hs, w.in, w.out} {
		if s != nil {
			if err := s.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	w.wg.Wait()
	return errors.Join(errs...)
}

func (w *Worker) now() time.Time { return w.lane.opts.Now() }

func (w *Worker) errf(id int, err error) error {
	return fmt.Errorf("%s rank %d: %w", w.Role(), id, err)
}

// publishLocked sends the rank's whole state to subscribers. Callers hold
// w.mu (or own w exclusively), which keeps events of one worker in order.
func (w *Worker) publishLocked(r *rank, errMsg string) {
	w.maxLen.Store(int64(w.maxModelLenLocked()))
	st := r.st
	st.InFlight = w.inflight[st.Identity]
	if st.Registration != nil {
		reg := *st.Registration
		st.Registration = &reg
	}
	w.lane.broker.publish(snapshot.RankEvent{Role: w.Role(), Rank: st, Err: errMsg})
}

func (w *Worker) rankLocked(id int) *rank {
	r := w.ranks[id]
	if r == nil {
		dp := id - w.plan.EngineIndex
		r = &rank{st: snapshot.RankStatus{Identity: id, DPRank: dp, State: snapshot.RankWaiting, Since: w.now()}}
		w.ranks[id] = r
	}
	return r
}

func (w *Worker) setStateLocked(r *rank, state string) time.Time {
	now := w.now()
	r.st.State = state
	r.st.Since = now
	return now
}

func (w *Worker) handshakeLoop() {
	for {
		f, err := w.hs.Recv()
		if err != nil {
			return
		}
		guard(w.lane.opts.OnPanic, w.Role()+" handshake message", func() { w.onHandshake(f) })
	}
}

func (w *Worker) onHandshake(f [][]byte) {
	if len(f) != 2 {
		w.lane.log.Warn("handshake message dropped: want [identity, payload]", "worker", w.Role(), "frames", len(f))
		return
	}
	idx, err := wire.DecodeIdentity(f[0])
	if err != nil {
		w.lane.log.Warn("handshake message dropped", "worker", w.Role(), "err", err)
		return
	}
	id := int(idx)
	m, err := wire.DecodeHandshake(f[1])
	if err != nil {
		w.rankErr(id, fmt.Sprintf("bad handshake message: %v", err))
		return
	}
	switch m.Status {
	case wire.StatusHello:
		w.onHello(id, f[0])
	case wire.StatusReady:
		w.onReady(id)
	default:
		w.rankErr(id, fmt.Sprintf("unexpected handshake status %q", m.Status))
	}
}

func (w *Worker) rankErr(id int, msg string) {
	w.lane.log.Warn("engine rank protocol error", "worker", w.Role(), "identity", id, "err", msg)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.publishLocked(w.rankLocked(id), msg)
}

// onHello starts (or restarts) a rank's handshake and answers INIT at once
// (SMG replies to each HELLO as it arrives). A HELLO from an identity we
// already know is a restarted engine: its old requests cannot complete.
func (w *Worker) onHello(id int, identity []byte) {
	if why := w.helloRefusal(identity); why != "" {
		w.lane.log.Warn("engine HELLO refused", "worker", w.Role(), "identity", id, "peer", peerAddrs(w.hs, identity), "why", why)
		refuseHandshakePeer(w.hs, identity)
		return
	}
	w.mu.Lock()
	r := w.rankLocked(id)
	var failed []*Stream
	if r.st.State != snapshot.RankWaiting && r.st.State != snapshot.RankDisconnected {
		failed = w.takeStreamsLocked(func(s *Stream) bool { return s.Identity == id })
	}
	// A HELLO is a new run of the engine: the lane's stall verdict on the
	// old one does not carry over. The supervisor's is in its view and is
	// its to lift: a role's exit clears it before its next run can greet.
	r.stalled, r.unaborted = false, nil
	now := w.setStateLocked(r, snapshot.RankHello)
	r.st.HelloAt = now
	r.st.InitAt, r.st.ReadyAt, r.st.RegisteredAt = time.Time{}, time.Time{}, time.Time{}
	r.st.Registration = nil
	w.publishLocked(r, "")
	// INIT goes out right below; recording it first keeps the state
	// ordered even when READY and the registration (read by other
	// goroutines) arrive before this one runs again.
	r.st.InitAt = w.setStateLocked(r, snapshot.RankInitSent)
	w.publishLocked(r, "")
	w.mu.Unlock()
	for _, s := range failed {
		s.fail(w.errf(id, ErrRankRestarted))
	}

	if err := w.hs.Send([][]byte{identity, w.initPayload}); err != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		if r.st.State == snapshot.RankInitSent {
			w.setStateLocked(r, snapshot.RankHello)
			r.st.InitAt = time.Time{}
		}
		w.publishLocked(r, fmt.Sprintf("send INIT: %v", err))
	}
}

func (w *Worker) onReady(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.rankLocked(id)
	switch r.st.State {
	case snapshot.RankInitSent, snapshot.RankHello:
		r.st.ReadyAt = w.setStateLocked(r, snapshot.RankReady)
		w.publishLocked(r, "")
	case snapshot.RankRegistered, snapshot.RankStalled:
		// The registration (input socket) overtook READY (handshake socket).
		if r.st.ReadyAt.IsZero() {
			r.st.ReadyAt = w.now()
		}
	default:
		w.publishLocked(r, "READY without HELLO")
	}
}

func (w *Worker) inputLoop() {
	for {
		f, err := w.in.Recv()
		if err != nil {
			return
		}
		guard(w.lane.opts.OnPanic, w.Role()+" input message", func() { w.onInput(f) })
	}
}

func (w *Worker) onInput(f [][]byte) {
	if len(f) < 2 || len(f[1]) == 0 {
		w.lane.log.Warn("input message dropped: want [identity, registration]", "worker", w.Role(), "frames", len(f))
		return
	}
	idx, err := wire.DecodeIdentity(f[0])
	if err != nil {
		w.lane.log.Warn("input message dropped", "worker", w.Role(), "err", err)
		return
	}
	reg, err := wire.DecodeRegistration(f[1])
	if err != nil {
		w.rankErr(int(idx), fmt.Sprintf("bad registration: %v", err))
		return
	}
	w.onRegistration(int(idx), reg)
}

// onRegistration admits a rank. The first registration of a worker says
// how many ranks to await (data_parallel_size) and where they start.
func (w *Worker) onRegistration(id int, reg wire.Registration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.rankLocked(id)
	var problems []string
	if up(r) {
		problems = append(problems, "second registration from a registered rank")
	}
	if r.st.State == snapshot.RankWaiting || r.st.State == snapshot.RankDisconnected {
		problems = append(problems, "registration without a handshake")
	}
	d := max(reg.DataParallelSize, 1)
	if !w.learned {
		w.learned = true
		w.expected = d
		base := id - reg.DataParallelRank
		for rid, rr := range w.ranks {
			if (rid < base || rid >= base+d) && rr.st.State == snapshot.RankWaiting {
				// Planned, but the engine says its ranks live elsewhere
				// (another --zmq-engine-index or DP size): say so once, then
				// drop it from the registry.
				w.publishLocked(rr, fmt.Sprintf("not awaited: the engine declared identities %d..%d", base, base+d-1))
				delete(w.ranks, rid)
				w.lane.broker.forget(w.Role(), rid)
			}
		}
		for k := range d {
			if _, ok := w.ranks[base+k]; !ok {
				nr := w.rankLocked(base + k)
				nr.st.DPRank = k
				w.publishLocked(nr, "")
			}
		}
	} else if d != w.expected {
		problems = append(problems, fmt.Sprintf("declares data_parallel_size %d, the worker's first rank declared %d", d, w.expected))
	}
	for oid, o := range w.ranks {
		if oid != id && up(o) && o.st.DPRank == reg.DataParallelRank {
			problems = append(problems, fmt.Sprintf("data_parallel_rank %d already registered by identity %d", reg.DataParallelRank, oid))
		}
	}
	if reg.BootstrapHost != nil || reg.BootstrapPort != nil {
		w.regBoot = bootstrapFrom(reg, w.plan.Bootstrap)
	}
	r.stalled = false
	now := w.setStateLocked(r, w.upStateLocked(r))
	r.st.RegisteredAt = now
	if r.st.ReadyAt.IsZero() {
		r.st.ReadyAt = now
	}
	r.st.DPRank = reg.DataParallelRank
	r.st.Registration = registrationStatus(reg, w.bootstrapLocked())
	msg := ""
	if len(problems) > 0 {
		msg = fmt.Sprint(problems)
		w.lane.log.Warn("engine registration problem", "worker", w.Role(), "identity", id, "err", msg)
	}
	w.publishLocked(r, msg)
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

func (w *Worker) bootstrapLocked() string {
	if w.regBoot != "" {
		return w.regBoot
	}
	return w.plan.Bootstrap
}

// Bootstrap is the KV rendezvous host:port of a prefill (or encode)
// worker: from its registration when an engine reported one, else the
// plan's (docs/architecture.md §D5).
func (w *Worker) Bootstrap() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bootstrapLocked()
}

// peerLoop turns connection events into rank liveness. Only the input
// socket's connection is a rank's data-plane lifeline: the engine closes
// its handshake DEALER on purpose after READY, and PUSH peers carry no
// identity.
func (w *Worker) peerLoop(s Socket, name string) {
	for ev := range s.Events() {
		if name != "input" || ev.Up {
			w.lane.log.Debug("peer connection", "worker", w.Role(), "socket", name, "identity", ev.Identity, "up", ev.Up)
			continue
		}
		idx, err := wire.DecodeIdentity(ev.Identity)
		if err != nil {
			continue
		}
		if s.Live(ev.Identity) > 0 {
			// A restarted engine's new connection came up before this
			// event about its old one was read: the rank is not down, and
			// its new registration must not lose its requests.
			continue
		}
		guard(w.lane.opts.OnPanic, w.Role()+" peer event", func() { w.onDisconnect(int(idx), ErrRankDown, "input connection closed") })
	}
}

// onDisconnect marks a registered rank dead and fails its requests. Ranks
// still handshaking are left alone: a restarted engine's old connection
// may close after its new HELLO.
func (w *Worker) onDisconnect(id int, cause error, why string) {
	w.mu.Lock()
	r := w.ranks[id]
	if r == nil || !up(r) {
		w.mu.Unlock()
		return
	}
	r.stalled, r.unaborted = false, nil
	w.setStateLocked(r, snapshot.RankDisconnected)
	failed := w.takeStreamsLocked(func(s *Stream) bool { return s.Identity == id })
	w.publishLocked(r, why)
	w.mu.Unlock()
	for _, s := range failed {
		s.fail(w.errf(id, cause))
	}
}

// onWorkerDead handles what kills the whole engine (sentinel, silence):
// every registered rank is down and every request fails.
func (w *Worker) onWorkerDead(cause error, why string) {
	w.mu.Lock()
	for _, r := range w.ranks {
		if up(r) || r.st.State == snapshot.RankReady {
			r.stalled, r.unaborted = false, nil
			w.setStateLocked(r, snapshot.RankDisconnected)
			w.publishLocked(r, why)
		}
	}
	failed := w.takeStreamsLocked(func(*Stream) bool { return true })
	w.mu.Unlock()
	for _, s := range failed {
		s.fail(w.errf(s.Identity, cause))
	}
}

// outputLoop reads a transport without a sink (one that is not ours,
// e.g. an in-memory one) and hands every message to one sink, so such a
// transport takes the same in-place decode as our sockets' readers
// (sink.go): one reader goroutine, so one sink and its arena.
func (w *Worker) outputLoop() {
	sink := w.newOutputSink()
	for {
		f, err := w.out.Recv()
		if err != nil {
			return
		}
		sink(f)
	}
}

func (w *Worker) onOutput(f [][]byte) {
	if len(f) == 0 {
		return
	}
	if bytes.Equal(f[0], engineCoreDead) {
		// A planned restart or stop takes the worker out of routing before
		// it signals the engine, so a death then is expected (INFO); only
		// one while routed is news (WARN).
		level := slog.LevelWarn
		if !w.Routed() {
			level = slog.LevelInfo
		}
		w.lane.log.Log(context.Background(), level, "engine sent ENGINE_CORE_DEAD", "worker", w.Role(), "expected", level == slog.LevelInfo)
		w.onWorkerDead(ErrEngineDead, "engine sent ENGINE_CORE_DEAD")
		return
	}
	outs, err := decodeOutputs(f[0])
	if err != nil {
		w.lane.log.Warn("output batch dropped", "worker", w.Role(), "err", err)
		return
	}
	w.route(outs)
}

// route hands each rid's increment to its stream; a terminal one ends
// the stream. Outputs for unknown rids (aborted, already failed) are
// dropped, as the lane requires (docs/protocol.md, abort), but still count as the
// rank speaking: a batch comes from one rank, known by the streams it
// carries, else by its engine_index.
func (w *Worker) route(outs []ridOutput) {
	w.mu.Lock()
	h := hearing{w: w, now: w.now(), last: -1}
	for _, o := range outs {
		s := w.streams[o.RID]
		if s == nil {
			continue
		}
		h.hear(s.Identity)
		if o.Finished != "" {
			w.removeLocked(s)
		}
		s.deliver(o.Output)
	}
	if h.last < 0 && len(outs) > 0 {
		h.hear(outs[0].EngineIndex)
	}
	w.mu.Unlock()
	h.done()
}

// pendingAbort is the ABORT owed to one rank for rids a stall ended.
type pendingAbort struct {
	id   int
	rids []string
}

func (w *Worker) takeUnabortedLocked(id int, r *rank) pendingAbort {
	p := pendingAbort{id, r.unaborted}
	r.unaborted = nil
	return p
}

func (w *Worker) sendPending(ps []pendingAbort) {
	for _, p := range ps {
		if len(p.rids) > 0 {
			w.sendAborts(p.id, p.rids)
		}
	}
}

// upStateLocked is the state a rank that is up shows: stalled while the
// lane or the supervisor (its view) judges it so, else registered.
func (w *Worker) upStateLocked(r *rank) string {
	if r.stalled || heldStalled(w.view.Load()) {
		return snapshot.RankStalled
	}
	return snapshot.RankRegistered
}

// refreshLocked moves an up rank between registered and stalled after a
// verdict changed and publishes the change; it reports whether it did.
func (w *Worker) refreshLocked(r *rank, why string) bool {
	if !up(r) {
		return false
	}
	want := w.upStateLocked(r)
	if r.st.State == want {
		return false
	}
	w.setStateLocked(r, want)
	w.publishLocked(r, why)
	return true
}

// watchdog is the worker's one ticker: the per-rank stall check and the
// whole-worker silence backstop.
func (w *Worker) watchdog() {
	silence, stall := w.lane.opts.SilenceTimeout, w.lane.opts.StallTimeout
	every := min(silence/4, time.Second)
	if stall > 0 {
		every = min(every, stall/4)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		guard(w.lane.opts.OnPanic, w.Role()+" watchdog", func() {
			if stall > 0 {
				w.checkStalls(stall)
			}
			w.mu.Lock()
			busy := w.total > 0
			w.mu.Unlock()
			last := time.Unix(0, w.lastOut.Load())
			if busy && w.now().Sub(last) > silence {
				w.lane.log.Warn("engine silent with requests in flight", "worker", w.Role(), "for", silence)
				w.onWorkerDead(ErrEngineSilent, fmt.Sprintf("no output for %s with requests in flight", silence))
			}
		})
	}
}

// stallVerdict is the pure stall rule (docs/architecture.md, liveness): a
// rank that owes output and has said nothing for the timeout is stalled.
// Idle ranks and ranks whose requests all wait on another leg (a decode
// before its prefill's KV) owe nothing, so they never trip it.
func stallVerdict(owed int, silentFor, timeout time.Duration, already bool) bool {
	return !already && timeout > 0 && owed > 0 && silentFor > timeout
}

// stallTimeoutFor is the silence a rank of kind may keep while it owes
// output. A prefill's terminal output waits until its decode has fetched
// the KV, so a decode that stopped silences the prefill legs paired with
// it too; the prefill gets twice the timeout, so that the stopped decode's
// verdict comes first and its abort frees those legs, and only a prefill
// that is itself stuck is blamed.
func stallTimeoutFor(kind string, base time.Duration) time.Duration {
	if kind == profiles.KindPrefill {
		return 2 * base
	}
	return base
}

// checkStalls takes every rank that stalled out of routing and ends its
// requests with a StallError; the next message from it re-admits it.
func (w *Worker) checkStalls(base time.Duration) {
	timeout := stallTimeoutFor(w.plan.Kind, base)
	now := w.now()
	type verdict struct {
		err     *StallError
		id      int
		streams []*Stream
	}
	var vs []verdict
	w.mu.Lock()
	for id, r := range w.ranks {
		if !up(r) || !stallVerdict(r.owed, now.Sub(r.heard), timeout, r.stalled) {
			continue
		}
		r.stalled = true
		msg := fmt.Sprintf("%s rank %d stalled: no output for %s with %d requests in flight", w.Role(), id, timeout, w.inflight[id])
		w.refreshLocked(r, msg)
		v := verdict{&StallError{Msg: msg}, id, w.takeStreamsLocked(func(s *Stream) bool { return s.Identity == id })}
		for _, s := range v.streams {
			r.unaborted = append(r.unaborted, s.RID)
		}
		vs = append(vs, v)
	}
	w.mu.Unlock()
	for _, v := range vs {
		w.lane.log.Warn("engine rank stalled", "worker", w.Role(), "identity", v.id, "err", v.err.Msg)
		// The event first: whoever sees a request fail can find its cause.
		w.lane.event("stall", w.Role(), v.err.Msg)
		for _, s := range v.streams {
			s.fail(v.err)
		}
	}
}

// sendLoop is the input socket's one sender: it takes everything queued
// and, on a batchSender, sends it together (consecutive messages to one
// rank in one write).
func (w *Worker) sendLoop() {
	bs, batched := w.in.(batchSender)
	var msgs [][][]byte
	var errs []error
	// guard's label, built again only when the role changes: built per
	// batch, it was an allocation per request sent whenever the sender
	// kept up (the recover of sink.go's message has the same reason).
	role, where := "", ""
	for {
		jobs, ok := w.sendQ.wait(w.stop)
		if len(jobs) > 0 {
			msgs, errs = msgs[:0], errs[:0]
			for _, j := range jobs {
				msgs = append(msgs, j.frames)
				errs = append(errs, nil)
			}
			if r := w.Role(); r != role || where == "" {
				role, where = r, r+" send"
			}
			if guard(w.lane.opts.OnPanic, where, func() {
				if batched {
					bs.sendBatch(msgs, errs)
					return
				}
				for i, m := range msgs {
					errs[i] = w.in.Send(m)
				}
			}) {
				for i := range errs {
					errs[i] = errors.New("internal error while sending")
				}
			}
			for i, j := range jobs {
				if err := errs[i]; err != nil {
					if j.stream != nil {
						w.failStream(j.stream, fmt.Errorf("send request: %w", err))
					} else {
						w.lane.log.Debug("abort not delivered", "worker", w.Role(), "err", err)
					}
				}
			}
			clear(msgs) // the payloads are the requests': do not keep them
		}
		if !ok {
			return
		}
	}
}

// Submit registers a stream for rid on rank identity and queues the ADD.
// payload is an encoded TokenizedGenerateReqInput.
func (w *Worker) Submit(identity int, rid string, payload []byte) (*Stream, error) {
	return w.SubmitAux(identity, rid, payload, nil)
}

// SubmitAux is Submit for a payload followed by out-of-band frames: an EPD
// EncodeRequest whose tensors travel as frames [identity, ADD, payload,
// aux1, aux2, ...] (docs/protocol.md §9.4, tsd's framing).
func (w *Worker) SubmitAux(identity int, rid string, payload []byte, aux [][]byte) (*Stream, error) {
	return w.submit(identity, rid, payload, aux, true)
}

// SubmitQuiet is Submit for a leg that owes no output yet: a decode leg
// waits for its prefill's KV, so its silence until Expect is called is
// not a stall.
func (w *Worker) SubmitQuiet(identity int, rid string, payload []byte) (*Stream, error) {
	return w.submit(identity, rid, payload, nil, false)
}

func (w *Worker) submit(identity int, rid string, payload []byte, aux [][]byte, expect bool) (*Stream, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return nil, w.errf(identity, ErrLaneClosed)
	case !w.Routed():
		return nil, w.errf(identity, ErrNotRouted)
	}
	r := w.ranks[identity]
	if r != nil && r.st.State == snapshot.RankStalled {
		return nil, w.errf(identity, ErrRankStalled)
	}
	if r == nil || r.st.State != snapshot.RankRegistered {
		return nil, w.errf(identity, ErrRankNotReady)
	}
	if _, dup := w.streams[rid]; dup {
		return nil, fmt.Errorf("%s rid %q: %w", w.Role(), rid, ErrDuplicateRID)
	}
	s := newStream(w, rid, identity)
	w.streams[rid] = s
	w.inflight[identity]++
	if w.total == 0 {
		w.lastOut.Store(w.now().UnixNano()) // silence is measured from going busy
	}
	w.total++
	if expect {
		w.expectLocked(s)
	}
	id := wire.EncodeIdentity(uint16(identity))
	frames := make([][]byte, 0, 3+len(aux))
	frames = append(append(frames, id, []byte{typeAdd}, payload), aux...)
	w.sendQ.push(sendJob{frames: frames, stream: s})
	return s, nil
}

// expectLocked counts s as owing output from now on; the rank's silence
// clock starts when it goes from owing nothing to owing something.
func (w *Worker) expectLocked(s *Stream) {
	if s.owed || w.streams[s.RID] != s {
		return
	}
	s.owed = true
	if r := w.ranks[s.Identity]; r != nil {
		if r.owed == 0 {
			r.heard = w.now()
		}
		r.owed++
	}
}

func (w *Worker) expect(s *Stream) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expectLocked(s)
}

func (w *Worker) removeLocked(s *Stream) bool {
	if w.streams[s.RID] != s {
		return false
	}
	if s.owed {
		s.owed = false
		if r := w.ranks[s.Identity]; r != nil && r.owed > 0 {
			r.owed--
		}
	}
	delete(w.streams, s.RID)
	w.inflight[s.Identity]--
	if w.inflight[s.Identity] <= 0 {
		delete(w.inflight, s.Identity)
	}
	if s.tokens != 0 {
		if w.inflightTok[s.Identity] -= s.tokens; w.inflightTok[s.Identity] <= 0 {
			delete(w.inflightTok, s.Identity)
		}
		s.tokens = 0
	}
	w.total--
	return true
}

func (w *Worker) takeStreamsLocked(match func(*Stream) bool) []*Stream {
	var out []*Stream
	for _, s := range w.streams {
		if match(s) {
			out = append(out, s)
		}
	}
	for _, s := range out {
		w.removeLocked(s)
	}
	return out
}

func (w *Worker) failStream(s *Stream, err error) {
	w.mu.Lock()
	removed := w.removeLocked(s)
	w.mu.Unlock()
	if removed {
		s.fail(w.errf(s.Identity, err))
	}
}

// abort removes s and tells its engine to stop it. The engine sends no
// output for a client abort, so the stream ends here.
func (w *Worker) abort(s *Stream, err error) {
	w.mu.Lock()
	removed := w.removeLocked(s)
	w.mu.Unlock()
	if !removed {
		return
	}
	s.fail(err)
	w.sendAborts(s.Identity, []string{s.RID})
}

func (w *Worker) sendAborts(identity int, rids []string) {
	payload, err := encodeAbort(rids)
	if err != nil {
		w.lane.log.Warn("encode abort", "worker", w.Role(), "err", err)
		return
	}
	w.sendQ.push(sendJob{frames: [][]byte{wire.EncodeIdentity(uint16(identity)), {typeAbort}, payload}})
}

// Abort ends every in-flight request on the worker with err (wrapped with
// the rank) and aborts them on the engine; it returns how many it ended.
func (w *Worker) Abort(err error) int {
	w.mu.Lock()
	failed := w.takeStreamsLocked(func(*Stream) bool { return true })
	w.mu.Unlock()
	byID := map[int][]string{}
	for _, s := range failed {
		s.fail(w.errf(s.Identity, err))
		byID[s.Identity] = append(byID[s.Identity], s.RID)
	}
	for id, rids := range byID {
		w.sendAborts(id, rids)
	}
	return len(failed)
}

// RankLoad is one routable rank.
type RankLoad struct {
	Identity int
	DPRank   int
	InFlight int
	// InFlightTokens is the sum of its in-flight streams' weights
	// (Stream.Weigh): the prompt tokens routing expects them to cost.
	InFlightTokens int
	// Since is when the rank registered: a new value is a restarted
	// engine, whose caches started empty.
	Since time.Time
	// Quiet: the rank owes output and has been silent for much longer
	// than its recent gaps (quiet.go); routing avoids it while another
	// rank of the kind is routable.
	Quiet bool
}

// Routable lists the registered ranks (none when the worker is not
// routed), by identity.
func (w *Worker) Routable() []RankLoad {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.Routed() || w.closed {
		return nil
	}
	var out []RankLoad
	now, floor := w.now(), quietFloorFor(w.plan.Kind, w.lane.opts.QuietAfter)
	for id, r := range w.ranks {
		if r.st.State == snapshot.RankRegistered {
			out = append(out, RankLoad{Identity: id, DPRank: r.st.DPRank, InFlight: w.inflight[id], InFlightTokens: w.inflightTok[id], Since: r.st.Since,
				Quiet: quiet(r.owed, now.Sub(r.heard), r.gap, floor)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	return out
}

// DPSize is the number of ranks the worker awaits.
func (w *Worker) DPSize() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.expected
}

// Base is the identity of DP rank 0.
func (w *Worker) Base() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, r := range w.ranks {
		return id - r.st.DPRank
	}
	return w.plan.EngineIndex
}

// InFlight is the worker's in-flight request count, total and per identity.
func (w *Worker) InFlight() (int, map[int]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	per := make(map[int]int, len(w.inflight))
	for k, v := range w.inflight {
		per[k] = v
	}
	return w.total, per
}

// Ranks is every known rank's state, by identity.
func (w *Worker) Ranks() []snapshot.RankStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]snapshot.RankStatus, 0, len(w.ranks))
	for _, r := range w.ranks {
		st := r.st
		st.InFlight = w.inflight[st.Identity]
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	return out
}

// MaxModelLen is the smallest max_model_len the worker's registered
// ranks declared; 0 when none is registered or none declared one.
func (w *Worker) MaxModelLen() int { return int(w.maxLen.Load()) }

func (w *Worker) maxModelLenLocked() int {
	best := 0
	for _, r := range w.ranks {
		st := r.st
		if st.State != snapshot.RankRegistered || st.Registration == nil || st.Registration.MaxModelLen <= 0 {
			continue
		}
		if n := int(st.Registration.MaxModelLen); best == 0 || n < best {
			best = n
		}
	}
	return best
}

// Registered counts registered ranks and the ranks awaited.
func (w *Worker) Registered() (registered, expected int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.ranks {
		if up(r) {
			registered++
		}
	}
	return registered, w.expected
}

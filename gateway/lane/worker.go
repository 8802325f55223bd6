package lane

import (
	"errors"
	"fmt"
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

// Request type bytes on the input socket (docs/protocol.md §5.1).
const (
	typeAdd   = 0x00
	typeAbort = 0x01
)

// Worker is one engine's socket set and the ranks that dialled it. Its
// parts each have one job (docs/architecture.md §13): the rank book
// (ranks.go) owns the ranks in one goroutine and publishes their view;
// the stream table (streams.go) is the rid table and the ranks' load,
// the one lock on the output path; the sender (sendq.go) owns the input
// socket's writes. The Worker wires them to the sockets and answers the
// gateway.
type Worker struct {
	lane *Lane
	plan profiles.WorkerPlan
	name atomic.Pointer[string] // the role's name now (plan.Role until a rename)

	hs, in, out Socket
	initPayload []byte

	ranks   *rankBook
	streams *streamTable
	send    *sender

	// view is the supervisor's view of the role (view.go; nil until its
	// first): stored by the rank book, read without a lock.
	view    atomic.Pointer[snapshot.RoleView]
	lastOut atomic.Int64 // unix nanos of the last output (or of going busy)
	closed  atomic.Bool
	once    sync.Once
	stop    chan struct{}
	wg      sync.WaitGroup
}

func newWorker(l *Lane, p profiles.WorkerPlan) *Worker {
	w := &Worker{lane: l, plan: p, stop: make(chan struct{})}
	name := p.Role
	w.name.Store(&name)
	w.streams = newStreamTable(l.opts.Now)
	w.send = newSender(w)
	w.ranks = newRankBook(w, w.streams)
	go w.ranks.run()
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

// start runs the bound worker: the readers that feed the rank book (the
// handshake and input sockets' messages, the sockets' peer events), the
// sender, and for a transport without a sink the output reader.
func (w *Worker) start() {
	loops := []func(){
		func() { w.forward(w.hs, fromHandshake) }, func() { w.forward(w.in, fromInput) },
		func() { w.peers(w.in, "input") }, func() { w.peers(w.out, "output") }, func() { w.peers(w.hs, "handshake") },
		func() { w.send.run(w.stop) },
	}
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
	w.ranks.startWatch()
}

// forward hands a ROUTER's messages to the rank book.
func (w *Worker) forward(s Socket, src int) {
	for {
		f, err := s.Recv()
		if err != nil || !w.ranks.feed(rankInput{src: src, frames: f}) {
			return
		}
	}
}

// peers turns connection events into rank liveness: the input socket's
// last connection of an identity going away goes to the rank book; the
// rest is logged.
func (w *Worker) peers(s Socket, name string) {
	for ev := range s.Events() {
		if name != "input" || ev.Up {
			w.lane.log.Debug("peer connection", "worker", w.Role(), "socket", name, "identity", ev.Identity, "up", ev.Up)
			continue
		}
		if !w.ranks.feed(rankInput{src: fromPeer, ev: ev}) {
			return
		}
	}
}

// close fails what is in flight, stops the rank book and the loops and
// closes the sockets. Safe on a worker never bound, and more than once.
func (w *Worker) close() error {
	var errs []error
	w.once.Do(func() {
		w.closed.Store(true)
		for _, s := range w.streams.close() {
			s.fail(w.errf(s.Identity, ErrLaneClosed))
		}
		close(w.stop)
		w.send.close()
		for _, s := range []Socket{w.hs, w.in, w.out} {
			if s != nil {
				if err := s.Close(); err != nil {
					errs = append(errs, err)
				}
			}
		}
		w.ranks.close()
		w.wg.Wait()
	})
	return errors.Join(errs...)
}

func (w *Worker) now() time.Time { return w.lane.opts.Now() }

func (w *Worker) errf(id int, err error) error {
	return fmt.Errorf("%s rank %d: %w", w.Role(), id, err)
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

// onOutput takes an output message by the allocating path: the full
// variant (prompt logprobs, abort messages) and ENGINE_CORE_DEAD.
func (w *Worker) onOutput(f [][]byte) {
	if len(f) == 0 {
		return
	}
	if wire.IsShutdownSentinel(f[0]) {
		w.ranks.engineDead()
		return
	}
	outs, err := decodeOutputs(f[0])
	if err != nil {
		w.lane.log.Warn("output batch dropped", "worker", w.Role(), "err", err)
		return
	}
	w.streams.route(outs)
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
	if !w.Routed() && !w.closed.Load() {
		return nil, w.errf(identity, ErrNotRouted)
	}
	s := newStream(w, rid, identity)
	busy, err := w.streams.add(s, expect)
	switch {
	case errors.Is(err, ErrDuplicateRID):
		return nil, fmt.Errorf("%s rid %q: %w", w.Role(), rid, err)
	case err != nil:
		return nil, w.errf(identity, err)
	}
	if busy {
		w.lastOut.Store(w.now().UnixNano()) // silence is measured from going busy
	}
	id := wire.EncodeIdentity(uint16(identity))
	frames := make([][]byte, 0, 3+len(aux))
	frames = append(append(frames, id, []byte{typeAdd}, payload), aux...)
	w.send.push(sendJob{frames: frames, stream: s})
	return s, nil
}

// failStream ends s with err if it is still in flight.
func (w *Worker) failStream(s *Stream, err error) {
	if w.streams.remove(s) {
		s.fail(w.errf(s.Identity, err))
	}
}

// abort removes s and tells its engine to stop it. The engine sends no
// output for a client abort, so the stream ends here.
func (w *Worker) abort(s *Stream, err error) {
	if !w.streams.remove(s) {
		return
	}
	s.fail(err)
	w.send.aborts(s.Identity, []string{s.RID})
}

// Abort ends every in-flight request on the worker with err (wrapped with
// the rank) and aborts them on the engine; it returns how many it ended.
func (w *Worker) Abort(err error) int {
	failed := w.streams.take(everyStream)
	byID := map[int][]string{}
	for _, s := range failed {
		s.fail(w.errf(s.Identity, err))
		byID[s.Identity] = append(byID[s.Identity], s.RID)
	}
	for id, rids := range byID {
		w.send.aborts(id, rids)
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
// routed), by identity, with their load: the rank book's published view
// and the stream table's counts.
func (w *Worker) Routable() []RankLoad {
	if !w.Routed() || w.closed.Load() {
		return nil
	}
	out := w.ranks.view.Load().routable()
	if len(out) > 0 {
		w.streams.loads(out, quietFloorFor(w.plan.Kind, w.lane.opts.QuietAfter))
	}
	return out
}

// DPSize is the number of ranks the worker awaits.
func (w *Worker) DPSize() int { return w.ranks.view.Load().expected }

// Base is the identity of DP rank 0.
func (w *Worker) Base() int {
	for _, st := range w.ranks.view.Load().ranks {
		return st.Identity - st.DPRank
	}
	return w.plan.EngineIndex
}

// InFlight is the worker's in-flight request count, total and per identity.
func (w *Worker) InFlight() (int, map[int]int) { return w.streams.inFlight() }

// Ranks is every known rank's state, by identity.
func (w *Worker) Ranks() []snapshot.RankStatus {
	v := w.ranks.view.Load()
	out := make([]snapshot.RankStatus, len(v.ranks))
	copy(out, v.ranks)
	_, per := w.streams.inFlight()
	for i := range out {
		out[i].InFlight = per[out[i].Identity]
		if r := out[i].Registration; r != nil {
			reg := *r
			out[i].Registration = &reg
		}
	}
	return out
}

// MaxModelLen is the smallest max_model_len the worker's registered
// ranks declared; 0 when none is registered or none declared one. Every
// request's body bound and context check reads it: a load of the
// published view, no lock and no copy.
func (w *Worker) MaxModelLen() int { return w.ranks.view.Load().maxLen }

// Registered counts registered ranks and the ranks awaited.
func (w *Worker) Registered() (registered, expected int) {
	v := w.ranks.view.Load()
	return v.registered(), v.expected
}

// Bootstrap is the KV rendezvous host:port of a prefill (or encode)
// worker: from its registration when an engine reported one, else the
// plan's (docs/architecture.md §D5).
func (w *Worker) Bootstrap() string { return w.ranks.view.Load().bootstrap }

package lane

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Options tune a Lane. Zero values are sensible.
type Options struct {
	Transport Transport // nil: ZMQ4 with default limits
	Logger    *slog.Logger
	Now       func() time.Time
	// SilenceTimeout declares a worker dead when it sends nothing for this
	// long while requests are in flight (SMG: 300 s). Idle silence is fine.
	SilenceTimeout time.Duration
	// StallTimeout judges one rank stalled when it sends nothing for this
	// long while it owes output (worker.go, stall detection); 0 disables it.
	StallTimeout time.Duration
	// QuietAfter is the least silence, while it owes output, that makes a
	// rank quiet (quiet.go: routing avoids it while another is routable);
	// 0 means DefaultQuietAfter, negative turns it off.
	QuietAfter time.Duration
	// OnPanic hears panics caught at the lane's recover boundaries (socket
	// readers, the ZMTP watcher, the sender, the rank book's inputs and
	// its watchdog).
	OnPanic PanicFunc
	// OnEvent hears rank verdicts worth showing (kind "stall", "readmit")
	// on role; it is called outside every lane lock and must not block for
	// long.
	OnEvent func(kind, role, msg string)
	// PeerCheck, when set, vets every connection to a local role's
	// sockets (handshake, input, output) before it is admitted: the
	// supervisor answers "is peer.PID in this role's process tree"
	// (InProcessTree helps). Remote roles (plan Remote) are never checked:
	// their lane is unauthenticated (RemoteLaneWarning). Needs a
	// CheckedTransport (the one ZMQ4 returns is).
	PeerCheck func(role string, peer PeerInfo) error
}

// RemoteLaneWarning is what `tsd validate` prints and the gateway logs
// for a role whose engine runs on another host: nothing ties its lane
// connections to a process tsd owns, so any host that can reach its ports
// can register as one of its ranks.
func RemoteLaneWarning(role string) string {
	return fmt.Sprintf("role %s runs on another host: its lane (handshake, input, output sockets) is unauthenticated; keep its network trusted (see SECURITY.md)", role)
}

// bindOptions are the admission rules of one worker's sockets.
func (l *Lane) bindOptions(w *Worker) BindOptions {
	p := w.plan
	o := BindOptions{Role: p.Role, Logger: l.log}
	if check := l.opts.PeerCheck; check != nil && !p.Remote {
		// Under the name the worker has when the peer connects: a role
		// renamed by tsd apply is checked against its new name's run.
		o.Check = func(peer PeerInfo) error { return check(w.Role(), peer) }
	}
	return o
}

// helloRefusal says why a HELLO must be refused, or "". A rank whose
// input connection is live is a running engine: a HELLO for its identity
// from anyone else is a takeover attempt (a legitimate restart comes after
// the old process, and with it that connection, is gone). Accepting it
// would reset the rank and take it out of routing.
func (w *Worker) helloRefusal(identity []byte) string {
	if w.in != nil && w.in.Live(identity) > 0 {
		return "identity has a live input connection (a running rank); HELLO refused"
	}
	return ""
}

// peerAddrs names where an identity's connections on s come from.
func peerAddrs(s Socket, identity []byte) []string {
	if pa, ok := s.(PeerAddresser); ok {
		return pa.PeerAddrs(identity)
	}
	return nil
}

// Lane owns every worker's socket set and the rank registry.
type Lane struct {
	opts Options
	log  *slog.Logger
	// set is the workers, swapped whole when tsd apply adds, removes or
	// renames one (live.go); changes are made under mu.
	set     atomic.Pointer[workerSet]
	broker  *broker
	changed *notifier

	mu    sync.Mutex
	bound bool
}

// New checks the workers' addresses; nothing is bound until Bind.
func New(plans []profiles.WorkerPlan, opts Options) (*Lane, error) {
	if opts.Transport == nil {
		opts.Transport = ZMQ4(TransportOptions{OnPanic: opts.OnPanic})
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SilenceTimeout <= 0 {
		opts.SilenceTimeout = 300 * time.Second
	}
	if opts.StallTimeout < 0 {
		opts.StallTimeout = 0
	}
	if opts.QuietAfter == 0 {
		opts.QuietAfter = DefaultQuietAfter
	}
	l := &Lane{opts: opts, log: opts.Logger, changed: newNotifier()}
	l.broker = newBroker(l.changed.notify)
	set := &workerSet{byRole: map[string]*Worker{}}
	for _, p := range plans {
		addr, err := set.admit(p)
		if err != nil {
			return nil, err
		}
		set = set.with(newWorker(l, addr))
	}
	l.set.Store(set)
	return l, nil
}

// resolveAddrs fills in the bind addresses a hand-written plan may leave
// out (docs/protocol.md §1.2, §1.3) and refuses addresses that cannot work.
func resolveAddrs(p profiles.WorkerPlan) (profiles.WorkerPlan, error) {
	switch {
	case strings.HasPrefix(p.URL, "ipc://"):
		path := strings.TrimPrefix(p.URL, "ipc://")
		if p.Input == "" {
			p.Input = p.URL + "-in.sock"
		}
		if p.Output == "" {
			p.Output = p.URL + "-out.sock"
		}
		if p.Handshake == "" {
			p.Handshake = fmt.Sprintf("tcp://127.0.0.1:%d", wire.HandshakePort(path))
		}
	case strings.HasPrefix(p.URL, "tcp://"):
		hostport := strings.TrimPrefix(p.URL, "tcp://")
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			return p, fmt.Errorf("worker URL %q: %w", p.URL, err)
		}
		if p.Handshake == "" {
			p.Handshake = p.URL
		}
		if p.Input == "" {
			p.Input = "tcp://" + net.JoinHostPort(host, "0")
		}
		if p.Output == "" {
			p.Output = "tcp://" + net.JoinHostPort(host, "0")
		}
	default:
		return p, fmt.Errorf("worker URL %q: want ipc://PATH or tcp://HOST:PORT", p.URL)
	}
	if !strings.HasPrefix(p.Handshake, "tcp://") {
		return p, fmt.Errorf("handshake address %q must be tcp:// (engines always dial tcp)", p.Handshake)
	}
	for _, ep := range []string{p.Input, p.Output} {
		if hp, ok := strings.CutPrefix(ep, "tcp://"); ok {
			host, _, err := net.SplitHostPort(hp)
			if err != nil {
				return p, fmt.Errorf("data-plane address %q: %w", ep, err)
			}
			switch host {
			case "", "*", "0.0.0.0", "::":
				return p, fmt.Errorf("data-plane address %q binds a wildcard, which cannot be advertised in INIT; name an address engines can reach", ep)
			}
		}
	}
	if p.DP <= 0 {
		p.DP = 1
	}
	return p, nil
}

// Bind binds every worker's input ROUTER, output PULL and handshake
// ROUTER (in that order: INIT may only name bound sockets). On failure
// everything bound so far is closed again.
func (l *Lane) Bind() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bound {
		return errors.New("lane already bound")
	}
	workers := l.Workers()
	for i, w := range workers {
		if err := w.bind(); err != nil {
			for _, b := range workers[:i] {
				_ = b.close()
			}
			return fmt.Errorf("bind worker %s: %w", w.Role(), err)
		}
	}
	for _, w := range workers {
		if w.plan.Remote {
			l.log.Warn(RemoteLaneWarning(w.Role()))
		}
		w.start()
	}
	l.bound = true
	return nil
}

// Close unbinds every socket, removes ipc socket files and fails whatever
// is still in flight.
func (l *Lane) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	// A worker never bound has no sockets, but its rank book runs.
	for _, w := range l.Workers() {
		if err := w.close(); err != nil {
			errs = append(errs, fmt.Errorf("close worker %s: %w", w.Role(), err))
		}
	}
	l.bound = false
	return errors.Join(errs...)
}

// Workers lists the workers in plan order (the slice is never modified:
// a change makes a new one).
func (l *Lane) Workers() []*Worker { return l.set.Load().workers }

// Worker finds a worker by role instance name.
func (l *Lane) Worker(role string) (*Worker, bool) {
	w, ok := l.set.Load().byRole[role]
	return w, ok
}

// Changed returns a channel closed at the next change of any rank's state
// or any worker's routing: take it, look at Routable, then wait on it, and
// no change in between is missed.
func (l *Lane) Changed() <-chan struct{} { return l.changed.wait() }

func (l *Lane) event(kind, role, msg string) {
	if l.opts.OnEvent != nil {
		l.opts.OnEvent(kind, role, msg)
	}
}

// SubscribeRanks returns every rank's current state, then each change;
// cancel ends the subscription and closes the channel.
func (l *Lane) SubscribeRanks() ([]snapshot.RankEvent, <-chan snapshot.RankEvent, func()) {
	return l.broker.subscribe()
}

// broker hands each subscriber the current state and then every change,
// under one lock, so nobody misses or doubles an event.
type broker struct {
	onPublish func() // called after every publish (the lane's change notifier)

	mu   sync.Mutex
	cur  map[brokerKey]snapshot.RankEvent
	subs map[int]*queue[snapshot.RankEvent]
	next int
}

type brokerKey struct {
	role string
	id   int
}

func newBroker(onPublish func()) *broker {
	return &broker{onPublish: onPublish, cur: map[brokerKey]snapshot.RankEvent{}, subs: map[int]*queue[snapshot.RankEvent]{}}
}

func (b *broker) publish(ev snapshot.RankEvent) {
	b.mu.Lock()
	b.cur[brokerKey{ev.Role, ev.Rank.Identity}] = ev
	for _, q := range b.subs {
		q.push(ev)
	}
	b.mu.Unlock()
	if b.onPublish != nil {
		b.onPublish()
	}
}

// forget drops a rank that will never dial (a planned identity outside the
// DP range the engine declared).
func (b *broker) forget(role string, id int) {
	b.mu.Lock()
	delete(b.cur, brokerKey{role, id})
	b.mu.Unlock()
}

func (b *broker) subscribe() ([]snapshot.RankEvent, <-chan snapshot.RankEvent, func()) {
	b.mu.Lock()
	cur := make([]snapshot.RankEvent, 0, len(b.cur))
	for _, ev := range b.cur {
		cur = append(cur, ev)
	}
	q := newQueue[snapshot.RankEvent]()
	id := b.next
	b.next++
	b.subs[id] = q
	b.mu.Unlock()
	sort.Slice(cur, func(i, j int) bool {
		if cur[i].Role != cur[j].Role {
			return cur[i].Role < cur[j].Role
		}
		return cur[i].Rank.Identity < cur[j].Rank.Identity
	})
	out := make(chan snapshot.RankEvent)
	stop := make(chan struct{})
	go func() {
		defer close(out)
		for {
			items, ok := q.wait(stop)
			for _, ev := range items {
				select {
				case out <- ev:
				case <-stop:
					return
				}
			}
			if !ok {
				return
			}
		}
	}()
	var once sync.Once
	cancel := func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, id)
			b.mu.Unlock()
			q.close()
			close(stop)
		})
	}
	return cur, out, cancel
}

// refuseHandshakePeer drops the handshake connections of a refused
// identity, so the peer is neither answered nor kept.
func refuseHandshakePeer(s Socket, identity []byte) {
	if pa, ok := s.(PeerAddresser); ok {
		pa.Disconnect(identity)
	}
}

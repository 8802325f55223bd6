package lane

// The lane's Transport: ZMTP 3 (NULL mechanism) on tsd's own framing
// (gateway/zmtp), the sockets of docs/protocol.md §1.5. Every connection
// first passes the gate (gate.go: greeting and READY read concurrently
// under a deadline, identity and peer admitted or refused) and is then
// counted here, per identity, with up/down events for the 0→1 and 1→0
// transitions; after that it has one owner goroutine that reads it
// (sock.go), and a ROUTER writes to it directly (send.go). Liveness,
// frame and message caps, write timeouts and ROUTER_MANDATORY-like
// refusal are therefore ours. The package used to run on zmq4 (hence
// the constructor's name); docs/architecture.md §13 says why it no
// longer does.

import (
	"encoding/binary"
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

	"github.com/tsd-project/tsd/gateway/zmtp"
)

// ZMQ4 returns the lane's ZMTP Transport (named for the zmq4 library it
// once wrapped; its sockets interoperate with libzmq and zmq4 peers).
func ZMQ4(opts TransportOptions) Transport {
	opts = opts.withDefaults()
	return zmqTransport{opts: opts, adm: newAdmission(opts)}
}

// zmqTransport binds sockets that share one admission (churn.go): the
// sources' connection budgets and the cap on unsettled connections.
type zmqTransport struct {
	opts TransportOptions
	adm  *admission
}

func (t zmqTransport) Bind(kind SocketKind, endpoint string) (Socket, error) {
	return t.BindWith(kind, endpoint, BindOptions{})
}

// BindWith binds a socket whose connections are admitted by o.
func (t zmqTransport) BindWith(kind SocketKind, endpoint string, o BindOptions) (Socket, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if kind != Router && kind != Pull {
		return nil, fmt.Errorf("unknown socket kind %d", kind)
	}
	scheme, addr, ok := strings.Cut(endpoint, "://")
	if !ok {
		return nil, fmt.Errorf("endpoint %q: want tcp://HOST:PORT or ipc://PATH", endpoint)
	}
	s := &zsock{
		kind:    kind,
		opts:    t.opts,
		bind:    o,
		adm:     t.adm,
		refused: newRefusalLog(o.Logger, o.Role, kind.String()),
		live:    map[string]int{},
		conns:   map[string]map[*trackedConn]struct{}{},
		events:  newQueue[PeerEvent](),
		out:     make(chan PeerEvent),
		done:    make(chan struct{}),
	}
	network := "tcp"
	switch scheme {
	case "tcp":
	case "ipc":
		if addr == "" {
			return nil, fmt.Errorf("endpoint %q: empty ipc path", endpoint)
		}
		network = "unix"
		s.endpoint, s.ipcPath = endpoint, addr
	default:
		return nil, fmt.Errorf("endpoint %q: unsupported transport %q", endpoint, scheme)
	}
	sock, err := bindOwned(s, network, addr)
	if err != nil {
		return nil, fmt.Errorf("bind %s %s: %w", kind, endpoint, err)
	}
	go s.forwardEvents()
	return sock, nil
}

// zsock is a bound socket's connection books, shared by its gate, its
// connections' owners and its senders (under mu).
type zsock struct {
	kind     SocketKind
	opts     TransportOptions
	bind     BindOptions
	endpoint string
	ipcPath  string
	adm      *admission  // shared with the transport's other sockets
	refused  *refusalLog // refused connections, a line per interval

	mu      sync.Mutex
	live    map[string]int
	conns   map[string]map[*trackedConn]struct{} // admitted, by identity
	nconns  int                                  // admitted plus greeting
	pending int                                  // not settled yet (churn.go)
	events  *queue[PeerEvent]
	out     chan PeerEvent
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once
}

func (s *zsock) Endpoint() string { return s.endpoint }

func (s *zsock) Events() <-chan PeerEvent { return s.out }

func (s *zsock) Live(identity []byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[string(identity)]
}

// Send writes one message; frame 0 names the peer (send.go).
func (s *zsock) Send(frames [][]byte) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(frames) < 2 {
		return fmt.Errorf("send on %s %s: need identity and at least one frame", s.kind, s.endpoint)
	}
	var err [1]error
	s.sendBatch([][][]byte{frames}, err[:])
	return err[0]
}

func (s *zsock) admit(c *trackedConn, id string, vetted bool) error {
	s.mu.Lock()
	var old []*trackedConn
	if s.kind == Router && s.live[id] > 0 {
		if !vetted {
			s.mu.Unlock()
			return fmt.Errorf("identity %x already has a live connection", id)
		}
		// Forget the old connections now (release skips them later), so
		// the count is right the moment the new one is admitted.
		for o := range s.conns[id] {
			old = append(old, o)
			delete(s.conns[id], o)
			s.live[id]--
		}
	}
	s.live[id]++
	n := s.live[id]
	if s.conns[id] == nil {
		s.conns[id] = map[*trackedConn]struct{}{}
	}
	s.conns[id][c] = struct{}{}
	c.upID.Store(&id)
	s.mu.Unlock()
	if n == 1 && len(old) == 0 {
		s.events.push(PeerEvent{Identity: idBytes(id), Up: true, Live: n})
	}
	for _, o := range old {
		_ = o.Close()
	}
	return nil
}

// release undoes admit when an admitted connection ends.
func (s *zsock) release(c *trackedConn, id string) {
	s.mu.Lock()
	if _, ok := s.conns[id][c]; !ok {
		s.mu.Unlock()
		return // taken over (admit already uncounted it)
	}
	delete(s.conns[id], c)
	if len(s.conns[id]) == 0 {
		delete(s.conns, id)
	}
	s.live[id]--
	n := s.live[id]
	if n <= 0 {
		delete(s.live, id)
		n = 0
	}
	s.mu.Unlock()
	if n == 0 {
		s.events.push(PeerEvent{Identity: idBytes(id), Up: false})
	}
}

// enter admits a new connection from src to the gate, or says why not
// (churn.go): its source's token, then a place under MaxConns, the
// socket's MaxPending and the transport's MaxPendingTotal. The ticket
// holds the pending places until it settles; the MaxConns place is
// given back by unreserve when the connection closes.
func (s *zsock) enter(src string) (*ticket, string) {
	if !s.adm.limiter.take(src) {
		return nil, "rate"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.nconns >= s.opts.MaxConns:
		return nil, "too many connections"
	case s.pending >= s.opts.MaxPending:
		return nil, "too many unsettled connections"
	case !s.adm.reserve():
		return nil, "too many unsettled connections on the lane"
	}
	s.nconns++
	s.pending++
	return &ticket{sock: s, src: src}, ""
}

func (s *zsock) unreserve() {
	s.mu.Lock()
	s.nconns--
	s.mu.Unlock()
}

// Disconnect closes every connection of an identity.
func (s *zsock) Disconnect(identity []byte) {
	s.mu.Lock()
	var cs []*trackedConn
	for c := range s.conns[string(identity)] {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

// PeerAddrs names the remote addresses of an identity's live connections.
func (s *zsock) PeerAddrs(identity []byte) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for c := range s.conns[string(identity)] {
		out = append(out, c.RemoteAddr().String())
	}
	sort.Strings(out)
	return out
}

func idBytes(id string) []byte {
	if id == "" {
		return nil
	}
	return []byte(id)
}

func (s *zsock) forwardEvents() {
	defer close(s.out)
	for {
		items, ok := s.events.wait(s.done)
		for _, ev := range items {
			select {
			case s.out <- ev:
			case <-s.done:
				return
			}
		}
		if !ok {
			return
		}
	}
}

// trackedConn is an admitted connection: the bytes the gate already read
// (greeting, READY, perhaps the first messages) wait in replay for its
// owner's reader.
type trackedConn struct {
	net.Conn
	sock       *zsock
	p          zmtpParser
	replay     []byte // read by the gate, handed to the owner's reader
	firstMsg   atomic.Bool
	firstTimer atomic.Pointer[time.Timer]

	upID     atomic.Pointer[string]
	downOnce sync.Once
	// ticket is a ROUTER connection's place among the unsettled ones
	// until its first message (churn.go); nil once settled at the gate.
	ticket *ticket

	wmu  sync.Mutex // every write: the owner's READY and a ROUTER's sends (send.go)
	obuf []byte     // the sends' framing buffer, under wmu
	// zready is closed once our READY is out (or the connection is gone):
	// sends wait for it, so a peer never sees a message before our READY,
	// even when one is sent to an identity whose new connection the gate
	// has admitted but whose owner has not yet written it.
	zready     chan struct{}
	zreadyOnce sync.Once
}

func (c *trackedConn) markReady() {
	if c.zready != nil {
		c.zreadyOnce.Do(func() { close(c.zready) })
	}
}

// connReadBuf is the read buffer of an engine's output connection: a
// 512-rid decode step's output batch (about 20 KB, bench/results.md
// LanePull) fits whole. connSmallBuf is every other connection's, and an
// output connection's until its first message (churn.go).
const (
	connReadBuf  = 64 << 10
	connSmallBuf = 4 << 10
)

func (c *trackedConn) write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.sock.opts.WriteTimeout))
	n, err := c.Conn.Write(b)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// A half-written frame would corrupt the stream: cut the peer
			// off. The wrapped error is not a timeout: nothing retries on
			// this connection.
			_ = c.Conn.Close()
			c.down()
			return n, connError{fmt.Errorf("peer stopped reading for %s", c.sock.opts.WriteTimeout)}
		}
		c.down()
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.down()
	return err
}

func (c *trackedConn) down() {
	c.downOnce.Do(func() {
		c.markReady() // a send waiting for the handshake fails at once
		if t := c.firstTimer.Load(); t != nil {
			t.Stop()
		}
		if id := c.upID.Load(); id != nil {
			c.sock.release(c, *id)
		}
		c.ticket.settle(false)
		c.sock.unreserve()
	})
}

// connError is a non-timeout net.Error: a connection cut for a reason of
// ours, never worth retrying on.
type connError struct{ err error }

func (e connError) Error() string   { return e.err.Error() }
func (e connError) Unwrap() error   { return e.err }
func (e connError) Timeout() bool   { return false }
func (e connError) Temporary() bool { return false }

// zmtpParser follows the inbound ZMTP 3.x byte stream as the gate reads
// it, in whatever pieces it arrives: the 64-byte greeting, then frames.
// It extracts the peer's Identity and Socket-Type from its READY command
// and rejects oversized lengths and malformed metadata before anything
// is buffered for them.
type zmtpParser struct {
	maxFrame   int64
	maxMessage int64 // 0: no cap beyond maxFrame
	maxCommand int64 // the READY's cap; 0: zmtp.MaxCommand
	msgBytes   int64 // bytes of the message being received so far
	sawData    bool  // a message frame (not a command) has begun

	greeting []byte // until 64 bytes
	hdr      []byte // current frame header bytes
	flags    byte
	need     int64 // body bytes left in the current frame
	inBody   bool
	cmd      []byte // body of the first command, buffered
	cmdFrame bool

	ready    bool
	identity string
	sockType string // Socket-Type from READY
}

const (
	zmtpGreetingLen = zmtp.GreetingLen
	flagMore        = zmtp.FlagMore
	flagLong        = zmtp.FlagLong
	flagCommand     = zmtp.FlagCommand
	maxCommand      = zmtp.MaxCommand
)

func (p *zmtpParser) feed(b []byte) error {
	for len(b) > 0 {
		if len(p.greeting) < zmtpGreetingLen {
			k := min(zmtpGreetingLen-len(p.greeting), len(b))
			p.greeting = append(p.greeting, b[:k]...)
			b = b[k:]
			if len(p.greeting) == zmtpGreetingLen {
				if err := zmtp.CheckSignature(p.greeting); err != nil {
					return fmt.Errorf("zmtp: %w", err)
				}
			}
			continue
		}
		if p.inBody {
			k := int64(len(b))
			if k > p.need {
				k = p.need
			}
			if p.cmdFrame {
				p.cmd = append(p.cmd, b[:k]...)
			}
			p.need -= k
			b = b[k:]
			if p.need == 0 {
				if err := p.endFrame(); err != nil {
					return err
				}
			}
			continue
		}
		// Frame header: flags, then a 1- or 8-byte size.
		p.hdr = append(p.hdr, b[0])
		b = b[1:]
		flags := p.hdr[0]
		if flags&^(flagMore|flagLong|flagCommand) != 0 {
			return fmt.Errorf("zmtp: reserved flag bits set (%#x)", flags)
		}
		want := 2
		if flags&flagLong != 0 {
			want = 9
		}
		if len(p.hdr) < want {
			continue
		}
		var size int64
		if want == 2 {
			size = int64(p.hdr[1])
		} else {
			u := binary.BigEndian.Uint64(p.hdr[1:9])
			if u > uint64(p.maxFrame) {
				return fmt.Errorf("zmtp: frame of %d bytes exceeds the %d-byte limit", u, p.maxFrame)
			}
			size = int64(u)
		}
		if flags&flagCommand == 0 {
			p.sawData = true
			p.msgBytes += size
			if p.maxMessage > 0 && p.msgBytes > p.maxMessage {
				return fmt.Errorf("zmtp: message of more than %d bytes exceeds the %d-byte limit", p.msgBytes, p.maxMessage)
			}
			if flags&flagMore == 0 {
				p.msgBytes = 0
			}
		}
		p.flags = flags
		p.hdr = p.hdr[:0]
		p.cmdFrame = flags&flagCommand != 0 && !p.ready
		if p.cmdFrame && size > p.commandCap() {
			return fmt.Errorf("zmtp: command of %d bytes", size)
		}
		p.need = size
		p.inBody = true
		p.cmd = p.cmd[:0]
		if size == 0 {
			if err := p.endFrame(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *zmtpParser) commandCap() int64 {
	if p.maxCommand > 0 {
		return p.maxCommand
	}
	return maxCommand
}

func (p *zmtpParser) endFrame() error {
	p.inBody = false
	if !p.cmdFrame {
		return nil
	}
	p.cmdFrame = false
	id, typ, err := parseReadyProps(p.cmd)
	if err != nil {
		return err
	}
	p.identity, p.sockType = id, typ
	p.ready = true
	return nil
}

// parseReadyProps returns READY's Identity and Socket-Type properties.
func parseReadyProps(b []byte) (id, sockType string, err error) {
	c, err := zmtp.ParseCommand(b)
	if err != nil {
		return "", "", fmt.Errorf("zmtp: %w", err)
	}
	if c.Name != "READY" {
		return "", "", fmt.Errorf("zmtp: expected READY command, got %q", c.Name)
	}
	return c.Prop("Identity"), c.Prop("Socket-Type"), nil
}

package lane

// The zmq4 (pure Go) implementation of Transport. zmq4 has no socket
// monitor, no ROUTER_MANDATORY and no handshake, frame or message limits,
// runs each ZMTP greeting inside its accept loop and lets several
// connections share one identity. So every connection first passes the
// gate (gate.go: greeting and READY read concurrently under a deadline,
// identity and peer admitted or refused), and then a wrapper that keeps
// watching the ZMTP byte stream (frame and whole-message caps, a first
// message deadline) and reports connection up/down per identity.
// Liveness is therefore ours, not the library's. Past the gate, zmq4
// only reads the ROUTERs' connections: the output PULL (pull.go) and the
// ROUTERs' sends (send.go) are on our own framing (gateway/zmtp,
// docs/architecture.md §13).

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	ztransport "github.com/go-zeromq/zmq4/transport"

	"github.com/tsd-project/tsd/gateway/zmtp"
)

// ZMQ4 returns a Transport backed by github.com/go-zeromq/zmq4.
func ZMQ4(opts TransportOptions) Transport {
	registerOnce.Do(registerTransports)
	return zmqTransport{opts: opts.withDefaults()}
}

type zmqTransport struct{ opts TransportOptions }

// Scheme names under which the tracking transports are registered with
// zmq4 (its registry is global and already owns "tcp" and "ipc").
const (
	schemeTCP = "tsdtcp"
	schemeIPC = "tsdipc"
)

var (
	registerOnce sync.Once
	sinksMu      sync.Mutex
	sinks        = map[int64]*zsock{}
	sinkSeq      atomic.Int64
)

func registerTransports() {
	// Errors only on duplicate names, which registerOnce rules out.
	_ = zmq4.RegisterTransport(schemeTCP, trackingTransport{network: "tcp"})
	_ = zmq4.RegisterTransport(schemeIPC, trackingTransport{network: "unix"})
}

func (t zmqTransport) Bind(kind SocketKind, endpoint string) (Socket, error) {
	return t.BindWith(kind, endpoint, BindOptions{})
}

// BindWith binds a socket whose connections are admitted by o.
func (t zmqTransport) BindWith(kind SocketKind, endpoint string, o BindOptions) (Socket, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	scheme, addr, ok := strings.Cut(endpoint, "://")
	if !ok {
		return nil, fmt.Errorf("endpoint %q: want tcp://HOST:PORT or ipc://PATH", endpoint)
	}
	var zscheme string
	switch scheme {
	case "tcp":
		zscheme = schemeTCP
	case "ipc":
		zscheme = schemeIPC
		if addr == "" {
			return nil, fmt.Errorf("endpoint %q: empty ipc path", endpoint)
		}
	default:
		return nil, fmt.Errorf("endpoint %q: unsupported transport %q", endpoint, scheme)
	}
	s := &zsock{
		kind:   kind,
		opts:   t.opts,
		bind:   o,
		live:   map[string]int{},
		conns:  map[string]map[*trackedConn]struct{}{},
		events: newQueue[PeerEvent](),
		out:    make(chan PeerEvent),
		done:   make(chan struct{}),
	}
	if kind == Pull {
		network := "tcp"
		if scheme == "ipc" {
			network = "unix"
			s.endpoint, s.ipcPath = endpoint, addr
		}
		p, err := bindPull(s, network, addr)
		if err != nil {
			return nil, fmt.Errorf("bind %s %s: %w", kind, endpoint, err)
		}
		go s.forwardEvents()
		return p, nil
	}
	zopts := []zmq4.Option{
		zmq4.WithTimeout(t.opts.WriteTimeout),
		zmq4.WithLogger(log.New(io.Discard, "", 0)),
	}
	switch kind {
	case Router:
		s.z = zmq4.NewRouter(context.Background(), zopts...)
	default:
		return nil, fmt.Errorf("unknown socket kind %d", kind)
	}
	id := sinkSeq.Add(1)
	sinksMu.Lock()
	sinks[id] = s
	sinksMu.Unlock()
	s.sinkID = id
	if err := s.z.Listen(zscheme + "://" + addr + "#" + strconv.FormatInt(id, 10)); err != nil {
		s.unregister()
		_ = s.z.Close()
		return nil, fmt.Errorf("bind %s %s: %w", kind, endpoint, err)
	}
	switch scheme {
	case "tcp":
		s.endpoint = "tcp://" + s.z.Addr().String()
	case "ipc":
		s.endpoint = endpoint
		s.ipcPath = addr
	}
	go s.forwardEvents()
	return s, nil
}

type zsock struct {
	kind     SocketKind
	opts     TransportOptions
	bind     BindOptions
	z        zmq4.Socket
	sinkID   int64
	endpoint string
	ipcPath  string

	mu     sync.Mutex
	live   map[string]int
	conns  map[string]map[*trackedConn]struct{} // admitted, by identity
	nconns int                                  // admitted plus greeting
	events *queue[PeerEvent]
	out    chan PeerEvent
	done   chan struct{}
	closed atomic.Bool
	once   sync.Once
}

func (s *zsock) Endpoint() string { return s.endpoint }

func (s *zsock) Events() <-chan PeerEvent { return s.out }

func (s *zsock) Live(identity []byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[string(identity)]
}

func (s *zsock) Recv() ([][]byte, error) {
	for {
		msg, err := s.z.Recv()
		if s.closed.Load() {
			return nil, ErrClosed
		}
		if err != nil {
			// zmq4's PULL reports a departing peer as io.EOF; that is a
			// connection event (seen through the wrapper), not a failure.
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) {
				continue
			}
			if errors.Is(err, context.Canceled) {
				return nil, ErrClosed
			}
			return nil, fmt.Errorf("receive on %s %s: %w", s.kind, s.endpoint, err)
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		return msg.Frames, nil
	}
}

// Send writes one message. On a ROUTER it goes straight to the
// identity's connection in our own framing (send.go), not through zmq4.
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

func (s *zsock) Close() error {
	var err error
	s.once.Do(func() {
		s.closed.Store(true)
		s.unregister()
		err = s.z.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil // a peer's connection that was already gone
		}
		if s.ipcPath != "" {
			if rerr := os.Remove(s.ipcPath); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
				err = fmt.Errorf("remove %s: %w", s.ipcPath, rerr)
			}
		}
		s.events.close()
		close(s.done)
	})
	return err
}

func (s *zsock) unregister() {
	sinksMu.Lock()
	delete(sinks, s.sinkID)
	sinksMu.Unlock()
}

// admit decides whether a connection that finished its greeting joins
// the socket, and counts it. Per identity only the 0→1 and 1→0
// transitions are published, so a restarted peer that reconnects before
// its old connection is torn down never looks dead. On a ROUTER a second
// connection for a live identity is refused unless the peer passed the
// socket's Check (then it takes the identity over and the old
// connections are closed): zmq4 would otherwise send every message for
// that identity to each of them, and a rogue peer claiming a rank's
// identity would receive copies of that rank's requests.
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

// reserve counts a connection that has not finished its greeting against
// MaxConns; unreserve gives the slot back.
func (s *zsock) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nconns >= s.opts.MaxConns {
		return false
	}
	s.nconns++
	return true
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

// trackingTransport is registered with zmq4; the listen address carries
// "#<sink id>" so accepted connections find their socket.
type trackingTransport struct{ network string }

func (t trackingTransport) Dial(ctx context.Context, d ztransport.Dialer, addr string) (net.Conn, error) {
	addr, _, _ = cutSink(addr)
	return d.DialContext(ctx, t.network, addr)
}

func (t trackingTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	addr, id, err := cutSink(addr)
	if err != nil {
		return nil, err
	}
	sinksMu.Lock()
	s := sinks[id]
	sinksMu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("listen %s: unknown socket %d", addr, id)
	}
	l, err := net.Listen(t.network, addr)
	if err != nil {
		return nil, err
	}
	if ul, ok := l.(*net.UnixListener); ok {
		// We remove the file ourselves on Close; the stdlib unlinking on
		// close as well is harmless but would race a rebind.
		ul.SetUnlinkOnClose(false)
	}
	return newGateListener(l, s), nil
}

func (t trackingTransport) Addr(ep string) (string, error) { return ep, nil }

func cutSink(addr string) (string, int64, error) {
	i := strings.LastIndexByte(addr, '#')
	if i < 0 {
		return addr, 0, fmt.Errorf("address %q lacks a socket tag", addr)
	}
	id, err := strconv.ParseInt(addr[i+1:], 10, 64)
	if err != nil {
		return addr, 0, fmt.Errorf("address %q: bad socket tag: %w", addr, err)
	}
	return addr[:i], id, nil
}

// trackedConn is an admitted connection as zmq4 sees it: the bytes the
// gate already read (greeting, READY) are replayed to zmq4, its own
// greeting write is swallowed (the gate sent the same bytes), and every
// later byte still passes the ZMTP parser for the frame and message caps.
type trackedConn struct {
	net.Conn
	sock *zsock
	p    zmtpParser

	replay     []byte        // read by the gate, not yet by zmq4 (single reader)
	br         *bufio.Reader // zmq4's reads, after replay (single reader)
	swallow    []byte        // our greeting, which zmq4 writes again
	wbuf       []byte        // an outgoing message's bytes until its last frame (writeFramed)
	wframes    frameEnds     // where outgoing messages end
	firstMsg   atomic.Bool
	firstTimer atomic.Pointer[time.Timer]

	upID     atomic.Pointer[string]
	downOnce sync.Once

	wmu  sync.Mutex // every write: zmq4's handshake and our ROUTER sends (send.go)
	obuf []byte     // our sends' framing buffer, under wmu
	// zready is closed once zmq4's READY is out (or the connection is
	// gone): our sends wait for it, so a peer never sees a message before
	// our READY, even when one is sent to an identity whose new
	// connection is still finishing its handshake.
	zready     chan struct{}
	zreadyOnce sync.Once
}

func (c *trackedConn) markReady() {
	if c.zready != nil {
		c.zreadyOnce.Do(func() { close(c.zready) })
	}
}

// connReadBuf is the read buffer of one lane connection: a 512-rid decode
// step's output batch (about 20 KB, bench/results.md LanePull) fits whole.
const connReadBuf = 64 << 10

func (c *trackedConn) Read(b []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(b, c.replay)
		c.replay = c.replay[n:]
		return n, nil
	}
	// zmq4 reads each frame as a 2-byte header and then its body, each
	// with its own read: two syscalls per output message. Buffered, one
	// read brings in a message, or every message queued, at once.
	if c.br == nil {
		c.br = bufio.NewReaderSize(rawConnReader{c}, connReadBuf)
	}
	n, err := c.br.Read(b)
	if err != nil {
		// Only once zmq4 has read every message buffered before it.
		c.down()
	}
	return n, err
}

// rawConnReader is the connection's unbuffered read, where the watcher
// sees every byte as it arrives.
type rawConnReader struct{ c *trackedConn }

func (r rawConnReader) Read(b []byte) (int, error) { return r.c.readRaw(b) }

func (c *trackedConn) readRaw(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		// The watcher runs in zmq4's per-connection reader goroutine, which
		// nothing above recovers: a parser bug must cut this one peer off,
		// not end the process.
		var perr error
		if guard(c.sock.opts.OnPanic, "zmtp watcher", func() { perr = c.p.feed(b[:n]) }) {
			perr = errors.New("zmtp: internal error while parsing the peer's stream")
		}
		if perr != nil {
			c.sock.bind.Logger.Warn("lane connection cut", "worker", c.sock.bind.Role, "socket", c.sock.kind.String(), "peer", c.RemoteAddr().String(), "err", perr)
			_ = c.Conn.Close()
			c.down()
			return 0, connError{perr}
		}
		if c.p.sawData && !c.firstMsg.Load() {
			c.firstMsg.Store(true)
			if t := c.firstTimer.Load(); t != nil {
				t.Stop()
			}
		}
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.swallow) > 0 {
		k := min(len(c.swallow), len(b))
		if string(b[:k]) != string(c.swallow[:k]) {
			_ = c.Conn.Close()
			c.down()
			return 0, connError{errors.New("zmtp: zmq4 greeting differs from the one the gate sent")}
		}
		c.swallow = c.swallow[k:]
		if k == len(b) {
			return k, nil
		}
		n, err := c.writeFramed(b[k:])
		return k + n, err
	}
	return c.writeFramed(b)
}

// writeFramed holds the bytes of an outgoing message until its last frame
// is complete, then writes them in one syscall (zmq4 writes each frame's
// header and body separately). Only zmq4's sending goroutine for this
// connection writes (single writer).
func (c *trackedConn) writeFramed(b []byte) (int, error) {
	ended := c.wframes.feed(b)
	if ended {
		// The first thing zmq4 writes after its greeting is its READY.
		defer c.markReady()
	}
	if !ended && len(c.wbuf)+len(b) <= wbufMax {
		c.wbuf = append(c.wbuf, b...)
		return len(b), nil
	}
	if len(c.wbuf) == 0 {
		return c.write(b)
	}
	if len(c.wbuf)+len(b) <= wbufMax {
		c.wbuf = append(c.wbuf, b...)
		_, err := c.write(c.wbuf)
		c.wbuf = c.wbuf[:0]
		if err != nil {
			return 0, err
		}
		return len(b), nil
	}
	_, err := c.write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	if err != nil {
		return 0, err
	}
	return c.write(b)
}

func (c *trackedConn) write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.sock.opts.WriteTimeout))
	n, err := c.Conn.Write(b)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// A half-written frame would corrupt the stream: cut the peer
			// off. The wrapped error is not a timeout, so zmq4 reaps the
			// connection instead of reusing it.
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
		c.sock.unreserve()
	})
}

// connError is a non-timeout net.Error so zmq4 marks the connection closed.
type connError struct{ err error }

func (e connError) Error() string   { return e.err.Error() }
func (e connError) Unwrap() error   { return e.err }
func (e connError) Timeout() bool   { return false }
func (e connError) Temporary() bool { return false }

// zmtpParser follows the inbound ZMTP 3.x byte stream: the 64-byte
// greeting, then frames. It extracts the peer's Identity from its READY
// command and rejects what zmq4 would mishandle (oversized lengths it would
// allocate blindly, malformed metadata it would index out of range).
type zmtpParser struct {
	maxFrame   int64
	maxMessage int64 // 0: no cap beyond maxFrame
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
		if p.cmdFrame && size > maxCommand {
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

// parseReady validates a NULL-mechanism READY command body and returns the
// Identity property.
func parseReady(b []byte) (string, error) {
	id, _, err := parseReadyProps(b)
	return id, err
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

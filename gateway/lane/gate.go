package lane

// The gate runs every new connection's ZMTP greeting in its own goroutine,
// under a deadline, before the connection gets its owner (sock.go). zmq4,
// which the lane once ran on, greeted inside its accept loop, one after
// another, so one silent peer delayed every other peer (a restarted rank
// among them) by the whole handshake timeout. Only a connection whose
// greeting and READY command arrived, and whose identity and peer passed
// admission, is handed on, with the bytes the gate read past the READY.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/gateway/zmtp"
)

// serverGreeting is our 64-byte greeting (version 3.0, NULL, as-server
// 0). The gate sends it at once: a libzmq peer waits for our signature
// before it sends the rest of its greeting.
var serverGreeting = zmtp.Greeting()

type gateListener struct {
	net.Listener
	sock *zsock
	ch   chan *trackedConn
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	pending map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func newGateListener(l net.Listener, s *zsock) *gateListener {
	g := &gateListener{Listener: l, sock: s, ch: make(chan *trackedConn), done: make(chan struct{}), pending: map[net.Conn]struct{}{}}
	g.wg.Add(1)
	go g.acceptLoop()
	return g
}

func (g *gateListener) acceptLoop() {
	defer g.wg.Done()
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				// EMFILE and friends: back off instead of spinning; the
				// condition clears as connections close.
				select {
				case <-g.done:
					return
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			return
		}
		if !g.sock.reserve() {
			g.sock.bind.Logger.Warn("lane connection refused: too many connections", "worker", g.sock.bind.Role, "socket", g.sock.kind.String(), "peer", c.RemoteAddr().String(), "limit", g.sock.opts.MaxConns)
			_ = c.Close()
			continue
		}
		g.mu.Lock()
		g.pending[c] = struct{}{}
		g.mu.Unlock()
		g.wg.Add(1)
		go g.greet(c)
	}
}

// greet reads the peer's greeting and READY under the handshake deadline,
// admits it and hands it to its owner. Every failure closes the
// connection right away.
func (g *gateListener) greet(c net.Conn) {
	defer g.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			g.sock.bind.Logger.Error("lane greeting panicked", "worker", g.sock.bind.Role, "peer", c.RemoteAddr().String(), "panic", fmt.Sprint(r))
			g.fail(c)
		}
	}()
	tc, err := g.handshake(c)
	g.mu.Lock()
	delete(g.pending, c)
	g.mu.Unlock()
	if err != nil {
		g.sock.bind.Logger.Warn("lane connection refused", "worker", g.sock.bind.Role, "socket", g.sock.kind.String(), "peer", c.RemoteAddr().String(), "err", err)
		g.fail(c)
		return
	}
	select {
	case g.ch <- tc:
	case <-g.done:
		_ = tc.Close()
	}
}

func (g *gateListener) fail(c net.Conn) {
	_ = c.Close()
	g.sock.unreserve()
}

// handshake returns the admitted connection, or an error; the caller
// closes a refused connection.
func (g *gateListener) handshake(c net.Conn) (*trackedConn, error) {
	opts := g.sock.opts
	_ = c.SetDeadline(time.Now().Add(opts.HandshakeTimeout))
	if _, err := c.Write(serverGreeting); err != nil {
		return nil, fmt.Errorf("send greeting: %w", err)
	}
	p := zmtpParser{maxFrame: opts.MaxFrame, maxMessage: opts.MaxMessage}
	var got []byte
	buf := make([]byte, 512)
	for !p.ready {
		n, err := c.Read(buf)
		if n > 0 {
			if perr := p.feed(buf[:n]); perr != nil {
				return nil, perr
			}
			got = append(got, buf[:n]...)
			if len(got) > zmtpGreetingLen+maxCommand+16 {
				return nil, errors.New("zmtp: no READY command after the greeting")
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errors.New("peer closed during the greeting")
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, fmt.Errorf("no greeting within %s", opts.HandshakeTimeout)
			}
			return nil, fmt.Errorf("read greeting: %w", err)
		}
	}
	_ = c.SetDeadline(time.Time{})
	if string(p.greeting[12:16]) != "NULL" || p.greeting[16] != 0 {
		return nil, errors.New("zmtp: only the NULL mechanism is supported")
	}
	if !compatiblePeer(g.sock.kind, p.sockType) {
		return nil, fmt.Errorf("zmtp: a %s peer cannot talk to our %s", p.sockType, g.sock.kind)
	}
	peer := PeerInfo{Network: c.LocalAddr().Network(), Addr: c.RemoteAddr().String(), Identity: []byte(p.identity), UID: -1}
	vetted := false
	if check := g.sock.bind.Check; check != nil {
		peer.PID, peer.UID = peerProcess(c)
		if err := check(peer); err != nil {
			return nil, fmt.Errorf("peer check (pid %d): %w", peer.PID, err)
		}
		vetted = true
	}
	// The owner's reader starts from the bytes the gate read past READY.
	tc := &trackedConn{Conn: c, sock: g.sock, p: p, replay: got, zready: make(chan struct{})}
	if err := g.sock.admit(tc, p.identity, vetted); err != nil {
		return nil, err
	}
	if g.sock.kind == Router && !p.sawData {
		tc.firstTimer.Store(time.AfterFunc(opts.FirstMessageTimeout, func() {
			if !tc.firstMsg.Load() {
				g.sock.bind.Logger.Warn("lane connection closed: no message after the greeting", "worker", g.sock.bind.Role, "socket", g.sock.kind.String(), "peer", peer.Addr, "after", opts.FirstMessageTimeout)
				_ = tc.Close()
			}
		}))
	} else if p.sawData {
		tc.firstMsg.Store(true)
	}
	return tc, nil
}

// Close stops accepting and closes every connection still greeting.
func (g *gateListener) Close() error {
	var err error
	g.once.Do(func() {
		close(g.done)
		err = g.Listener.Close()
		g.mu.Lock()
		for c := range g.pending {
			_ = c.Close()
		}
		g.mu.Unlock()
		g.wg.Wait()
	})
	return err
}

// compatiblePeer mirrors ZMTP's socket-type pairs for the two kinds we
// bind.
func compatiblePeer(k SocketKind, peer string) bool {
	switch strings.ToUpper(peer) {
	case "DEALER", "REQ", "ROUTER":
		return k == Router
	case "PUSH":
		return k == Pull
	}
	return false
}

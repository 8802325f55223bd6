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
		// What the peer is (cheap: SO_PEERCRED, or one sock_diag
		// message) decides its source before a byte is read (churn.go).
		peer, diag := peerOf(c)
		t, why := g.sock.enter(sourceOf(peer))
		if why != "" {
			g.sock.refused.note(why, peer.Addr, nil)
			_ = c.Close()
			continue
		}
		g.mu.Lock()
		g.pending[c] = struct{}{}
		g.mu.Unlock()
		g.wg.Add(1)
		go g.greet(c, peer, diag, t)
	}
}

// greet reads the peer's greeting and READY under the handshake deadline,
// admits it and hands it to its owner. Every failure closes the
// connection right away.
func (g *gateListener) greet(c net.Conn, peer PeerInfo, diag bool, t *ticket) {
	defer g.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			g.sock.bind.Logger.Error("lane greeting panicked", "worker", g.sock.bind.Role, "peer", c.RemoteAddr().String(), "panic", fmt.Sprint(r))
			g.fail(c, t)
		}
	}()
	tc, why, err := g.handshake(c, peer, diag, t)
	g.mu.Lock()
	delete(g.pending, c)
	g.mu.Unlock()
	if err != nil {
		g.sock.refused.note(why, peer.Addr, err)
		g.fail(c, t)
		return
	}
	select {
	case g.ch <- tc:
	case <-g.done:
		_ = tc.Close()
	}
}

// fail closes a connection the gate refused and gives back all it held.
func (g *gateListener) fail(c net.Conn, t *ticket) {
	_ = c.Close()
	t.settle(false)
	g.sock.unreserve()
}

// greetBuf is what the gate reads a greeting into; gateMaxCommand bounds
// the READY it waits for (its properties are a socket type and an
// identity of at most 255 bytes), so a connection that has not settled
// makes the gate hold a few KiB at most.
const (
	greetBuf       = 512
	gateMaxCommand = 4 << 10
)

// handshake returns the admitted connection, or why it was refused (a
// short reason for the refusal log) and the error; the caller closes a
// refused connection.
func (g *gateListener) handshake(c net.Conn, peer PeerInfo, diag bool, t *ticket) (*trackedConn, string, error) {
	opts := g.sock.opts
	_ = c.SetDeadline(time.Now().Add(opts.HandshakeTimeout))
	if _, err := c.Write(serverGreeting); err != nil {
		return nil, "greeting", fmt.Errorf("send greeting: %w", err)
	}
	p := zmtpParser{maxFrame: opts.MaxFrame, maxMessage: opts.MaxMessage, maxCommand: gateMaxCommand}
	var got []byte
	var buf [greetBuf]byte
	for !p.ready {
		n, err := c.Read(buf[:])
		if n > 0 {
			if perr := p.feed(buf[:n]); perr != nil {
				return nil, "protocol", perr
			}
			got = append(got, buf[:n]...)
			if len(got) > zmtpGreetingLen+gateMaxCommand+16 {
				return nil, "protocol", errors.New("zmtp: no READY command after the greeting")
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, "closed", errors.New("peer closed during the greeting")
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, "timeout", fmt.Errorf("no greeting within %s", opts.HandshakeTimeout)
			}
			return nil, "greeting", fmt.Errorf("read greeting: %w", err)
		}
	}
	_ = c.SetDeadline(time.Time{})
	if string(p.greeting[12:16]) != "NULL" || p.greeting[16] != 0 {
		return nil, "protocol", errors.New("zmtp: only the NULL mechanism is supported")
	}
	if !compatiblePeer(g.sock.kind, p.sockType) {
		return nil, "protocol", fmt.Errorf("zmtp: a %s peer cannot talk to our %s", p.sockType, g.sock.kind)
	}
	peer.Identity = []byte(p.identity)
	vetted := false
	if check := g.sock.bind.Check; check != nil {
		if !diag {
			lookupInode(c, &peer) // a kernel without sock_diag: the bounded table scan
		}
		if err := check(peer); err != nil {
			return nil, "peer check", fmt.Errorf("peer check (pid %d, uid %d): %w", peer.PID, peer.UID, err)
		}
		vetted = true
	}
	// The owner's reader starts from the bytes the gate read past READY.
	tc := &trackedConn{Conn: c, sock: g.sock, p: p, replay: got, zready: make(chan struct{})}
	settled := g.sock.kind != Router || p.sawData
	if !settled {
		// Settles at its first message (sock.go), or is closed unsettled.
		// Set before admit: from then on a takeover may close it.
		tc.ticket = t
	}
	if err := g.sock.admit(tc, p.identity, vetted); err != nil {
		return nil, "identity", err
	}
	switch {
	case !settled:
		tc.firstTimer.Store(time.AfterFunc(opts.FirstMessageTimeout, func() {
			if !tc.firstMsg.Load() {
				g.sock.refused.note("no first message", peer.Addr, fmt.Errorf("no message within %s of the greeting", opts.FirstMessageTimeout))
				_ = tc.Close()
			}
		}))
	default:
		if p.sawData {
			tc.firstMsg.Store(true)
		}
		t.settle(true)
	}
	return tc, "", nil
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

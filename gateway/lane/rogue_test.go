package lane

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// syncBuf is a log sink safe for the lane's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls a condition that no event announces, up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// rawPeer speaks ZMTP by hand: greeting and READY with any identity.
func rawPeer(t *testing.T, network, addr, identity string) net.Conn {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if identity != "\xff" {
		ready := readyCmd(identity)
		if network == "unix" && strings.HasSuffix(addr, "-out.sock") {
			ready = readyCmdType("PUSH", identity)
		}
		if _, err := c.Write(append(greeting(), ready...)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func readyCmdType(typ, id string) []byte {
	body := append([]byte{5}, "READY"...)
	prop := func(k, v string) {
		body = append(body, byte(len(k)))
		body = append(body, k...)
		body = binary.BigEndian.AppendUint32(body, uint32(len(v)))
		body = append(body, v...)
	}
	prop("Socket-Type", typ)
	prop("Identity", id)
	return append([]byte{flagCommand, byte(len(body))}, body...)
}

// expectClosed reads until EOF (the gateway closed the connection) and
// returns what came before it; it fails if the connection stays open.
func expectClosed(t *testing.T, c net.Conn, within time.Duration) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s (read %d bytes)", within, len(got))
	}
	return got
}

func endpointAddr(ep string) (network, addr string) {
	if a, ok := strings.CutPrefix(ep, "tcp://"); ok {
		return "tcp", a
	}
	return "unix", strings.TrimPrefix(ep, "ipc://")
}

func startLane(t *testing.T, opts Options) (*Lane, *Worker, <-chan snapshot.RankEvent, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	url := "ipc://" + filepath.Join(t.TempDir(), "decode")
	l, err := New([]profiles.WorkerPlan{{Role: "decode", Kind: profiles.KindDecode, URL: url, Handshake: "tcp://127.0.0.1:0", DP: 1, EngineIndex: 0}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, ch, cancel := l.SubscribeRanks()
	t.Cleanup(cancel)
	if err := l.Bind(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	w, _ := l.Worker("decode")
	return l, w, ch, logs
}

// Regression: one HELLO carrying a live rank's identity reset that rank
// and took it out of routing until a restart, silently. Now it is refused
// and logged with the peer's address; the rank keeps serving.
func TestRogueHelloCannotTakeOverLiveRank(t *testing.T) {
	t.Parallel()
	_, w, ch, logs := startLane(t, Options{})
	r0 := dialRank(t, w.HandshakeEndpoint(), 0, 1, 0)
	defer r0.close()
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankRegistered})

	// The rank closed its handshake connection after READY (as engines
	// do); wait until the socket has let it go, so the rogue's HELLO (not
	// the transport's duplicate-identity refusal) is what is tested.
	waitFor(t, func() bool { return w.hs.Live(wire.EncodeIdentity(0)) == 0 })
	rogue := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity(wire.EncodeIdentity(0))))
	defer rogue.Close()
	if err := rogue.Dial(w.HandshakeEndpoint()); err != nil {
		t.Fatal(err)
	}
	hello, _ := wire.EncodeHandshake(wire.Hello())
	if err := rogue.Send(zmq4.NewMsg(hello)); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := rogue.Recv(); got <- err }()
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("rogue HELLO was answered with INIT")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rogue's handshake connection was kept open")
	}
	if !strings.Contains(logs.String(), "engine HELLO refused") || !strings.Contains(logs.String(), "127.0.0.1:") {
		t.Fatalf("no refusal with the peer address in the log:\n%s", logs)
	}
	if reg, _ := w.Registered(); reg != 1 || len(w.Routable()) != 1 {
		t.Fatalf("legitimate rank lost: registered %d, routable %v", reg, w.Routable())
	}
	s, err := w.Submit(0, "rid-1", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := r0.in.Recv(); err != nil || m.Frames[0][0] != typeAdd {
		t.Fatalf("legitimate rank got %q, %v", m.Frames, err)
	}
	s.Abort(nil)
}

// Regression: zmq4's ROUTER sends to every connection sharing an
// identity, so a peer claiming rank 0's identity on the input socket got a
// copy of each request routed there. A second connection for a live
// identity is now refused before zmq4 sees it.
func TestRogueCannotCopyRequests(t *testing.T) {
	t.Parallel()
	_, w, ch, logs := startLane(t, Options{})
	r0 := dialRank(t, w.HandshakeEndpoint(), 0, 1, 0)
	defer r0.close()
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankRegistered})
	in, _ := w.Endpoints()
	rogue := rawPeer(t, "unix", strings.TrimPrefix(in, "ipc://"), string(wire.EncodeIdentity(0)))

	got := expectClosed(t, rogue, 5*time.Second)
	if len(got) > zmtpGreetingLen {
		t.Fatalf("rogue received %d bytes beyond the greeting", len(got)-zmtpGreetingLen)
	}
	if !strings.Contains(logs.String(), "already has a live connection") {
		t.Fatalf("refusal not logged:\n%s", logs)
	}
	s, err := w.Submit(0, "rid-1", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := r0.in.Recv(); err != nil || m.Frames[0][0] != typeAdd {
		t.Fatalf("legitimate rank got %q, %v", m.Frames, err)
	}
	s.Abort(nil)
}

// A peer that passes the socket's Check may take a live identity over (a
// restarted rank whose old connection lingers): the old one is closed so
// requests never go to both.
func TestVettedPeerTakesIdentityOver(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{}).(CheckedTransport)
	r, err := tr.BindWith(Router, "tcp://127.0.0.1:0", BindOptions{Check: func(PeerInfo) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	network, addr := endpointAddr(r.Endpoint())
	old := rawPeer(t, network, addr, "\x05\x00")
	waitEvent(t, r, true)
	nw := rawPeer(t, network, addr, "\x05\x00")
	_ = nw
	expectClosed(t, old, 5*time.Second)
	if n := r.Live([]byte{5, 0}); n != 1 {
		t.Fatalf("live connections %d, want 1", n)
	}
}

// Regression: a multi-frame message grew tsd by gigabytes (frames were
// capped, messages were not). A message over MaxMessage cuts the peer off.
func TestMultiFrameBombIsCut(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{MaxMessage: 4 << 20})
	p, err := tr.Bind(Pull, "ipc://"+filepath.Join(t.TempDir(), "b-out.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	network, addr := endpointAddr(p.Endpoint())
	c := rawPeer(t, network, addr, "")
	frame := make([]byte, 1<<20)
	hdr := binary.BigEndian.AppendUint64([]byte{flagLong | flagMore}, uint64(len(frame)))
	cut := false
	for i := 0; i < 64 && !cut; i++ { // 64 MiB offered, 4 MiB allowed
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(append(hdr, frame...)); err != nil {
			cut = true
		}
	}
	if !cut {
		expectClosed(t, c, 5*time.Second)
	}
	// The socket still serves a well-behaved pusher.
	push := zmq4.NewPush(context.Background())
	defer push.Close()
	if err := push.Dial(p.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := push.Send(zmq4.NewMsg([]byte("ok"))); err != nil {
		t.Fatal(err)
	}
	if f := recvTimeout(t, p); string(f[0]) != "ok" {
		t.Fatalf("frames %q", f)
	}
}

// Regression: zmq4 ran each greeting in its accept loop (up to the
// handshake timeout each), so 30 silent connections delayed a restarted
// rank's registration by minutes. Greetings now run concurrently.
func TestSilentConnectionsDoNotDelayOthers(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{HandshakeTimeout: time.Minute})
	r, err := tr.Bind(Router, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	network, addr := endpointAddr(r.Endpoint())
	for range 30 {
		rawPeer(t, network, addr, "\xff") // connects, says nothing
	}
	d := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity([]byte{1, 0})))
	defer d.Close()
	if err := d.Dial(r.Endpoint()); err != nil {
		t.Fatal(err)
	}
	// Serially that would take 30 minutes; waitEvent gives it 5 s.
	ev := waitEvent(t, r, true)
	if !bytes.Equal(ev.Identity, []byte{1, 0}) {
		t.Fatalf("identity %x", ev.Identity)
	}
}

// Regression: connections that finished the greeting and then said
// nothing were held forever (300 of them pinned 300 fds). A ROUTER
// connection must send its first message within FirstMessageTimeout, and
// the socket holds at most MaxConns connections.
func TestHeldGreetingsAreClosed(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{FirstMessageTimeout: 200 * time.Millisecond, MaxConns: 400})
	r, err := tr.Bind(Router, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	network, addr := endpointAddr(r.Endpoint())
	conns := make([]net.Conn, 300)
	for i := range conns {
		conns[i] = rawPeer(t, network, addr, string([]byte{byte(i), byte(i >> 8)}))
	}
	for _, c := range conns {
		expectClosed(t, c, 10*time.Second)
	}

	small := ZMQ4(TransportOptions{MaxConns: 2})
	s, err := small.Bind(Router, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	network, addr = endpointAddr(s.Endpoint())
	rawPeer(t, network, addr, "\xff")
	rawPeer(t, network, addr, "\xff")
	third := rawPeer(t, network, addr, "\xff")
	if got := expectClosed(t, third, 5*time.Second); len(got) != 0 {
		t.Fatalf("over-limit connection got %d bytes", len(got))
	}
}

// Regression: a failed greeting's fd stayed open until the next garbage
// collection. The gate closes it at once: the peer reads EOF.
func TestFailedGreetingClosesFD(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{})
	r, err := tr.Bind(Router, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	network, addr := endpointAddr(r.Endpoint())
	for range 20 {
		c := rawPeer(t, network, addr, "\xff")
		bad := greeting()
		bad[0] = 0x00
		if _, err := c.Write(bad); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c, 5*time.Second)
	}
}

// PeerCheck sees the connecting process: our own pid for ipc data
// sockets (SO_PEERCRED), and for a loopback tcp handshake the socket's
// inode and our uid, whose holder Process finds among the pids it is
// given (ours). A refusing check keeps every peer out; the legitimate
// tree gets in.
func TestPeerCheckSeesProcess(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	check := func(role string, p PeerInfo) error {
		mu.Lock()
		defer mu.Unlock()
		if p.Network == "tcp" && (p.PID != 0 || p.Inode == 0 || p.UID != os.Getuid()) {
			return fmt.Errorf("tcp peer %+v: want its inode and uid, no pid yet", p)
		}
		pid := p.Process([]int{os.Getpid()})
		seen[p.Network] = pid
		if role != "decode" || !InProcessTree(pid, os.Getpid()) {
			return errors.New("not in the role's tree")
		}
		return nil
	}
	_, w, ch, _ := startLane(t, Options{PeerCheck: check})
	r0 := dialRank(t, w.HandshakeEndpoint(), 0, 1, 0)
	defer r0.close()
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankRegistered})
	mu.Lock()
	defer mu.Unlock()
	if seen["tcp"] != os.Getpid() || seen["unix"] != os.Getpid() {
		t.Fatalf("peer pids %v, want %d for tcp and unix", seen, os.Getpid())
	}

	deny := func(string, PeerInfo) error { return errors.New("no") }
	_, w2, _, logs := startLane(t, Options{PeerCheck: deny})
	network, addr := endpointAddr(w2.HandshakeEndpoint())
	c := rawPeer(t, network, addr, "\x00\x00")
	expectClosed(t, c, 5*time.Second)
	if !strings.Contains(logs.String(), "peer check") {
		t.Fatalf("refusal not logged:\n%s", logs)
	}
}

func TestRemoteLaneWarning(t *testing.T) {
	t.Parallel()
	if w := RemoteLaneWarning("decode"); !strings.Contains(w, "decode") || !strings.Contains(w, "unauthenticated") {
		t.Fatalf("warning %q", w)
	}
}

// TreeCheck passes our own process (root: our pid, or our parent) and
// refuses an unknown pid, pid 0 and a role without a process.
func TestTreeCheck(t *testing.T) {
	t.Parallel()
	roots := map[string][]int{"decode": {os.Getpid()}, "parent": {os.Getppid()}}
	check := TreeCheck(func(role string) []int { return roots[role] })
	me := PeerInfo{PID: os.Getpid(), Addr: "x"}
	if err := check("decode", me); err != nil {
		t.Errorf("own pid refused: %v", err)
	}
	if err := check("parent", me); err != nil {
		t.Errorf("child of the root refused: %v", err)
	}
	if err := check("prefill", me); err == nil {
		t.Error("a role without a process admitted a peer")
	}
	if err := check("decode", PeerInfo{PID: 0}); err == nil {
		t.Error("unidentified peer admitted")
	}
	if err := check("decode", PeerInfo{PID: 1}); err == nil {
		t.Error("init admitted")
	}
	// A loopback tcp peer (an inode, no pid) is found in the root's tree
	// and nowhere else.
	c, s := tcpPair(t)
	defer s.Close()
	defer c.Close()
	inode := sockInode(t, c)
	if err := check("decode", PeerInfo{Inode: inode, UID: os.Getuid(), Addr: "x"}); err != nil {
		t.Errorf("own socket refused: %v", err)
	}
	if err := check("parent", PeerInfo{Inode: inode, UID: os.Getuid(), Addr: "x"}); err != nil {
		t.Errorf("own socket under the parent root refused: %v", err)
	}
	if err := check("prefill", PeerInfo{Inode: inode, UID: os.Getuid(), Addr: "x"}); err == nil {
		t.Error("a role without a process admitted a socket")
	}
	if err := check("decode", PeerInfo{Inode: inode, UID: os.Getuid() + 1, Addr: "x"}); err == nil {
		t.Error("a socket of another user admitted")
	}
	if err := check("decode", PeerInfo{Inode: inode + 1<<40, UID: -1, Addr: "x"}); err == nil {
		t.Error("an inode nobody holds admitted")
	}
}

// tcpPair is a connected loopback tcp pair.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// sockInode is a connection's socket inode.
func sockInode(t *testing.T, c net.Conn) uint64 {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return st.Ino
}

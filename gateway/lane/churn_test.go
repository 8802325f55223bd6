package lane

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// The token bucket's rule, one row per case: a new source starts full,
// a connection takes a token, an empty bucket refuses, tokens refill
// with time up to the burst, a clock that goes back adds nothing, a
// refund gives one back up to the burst, and a zero rate never refills.
func TestChurnRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := churnRate{perSec: 2, burst: 4}
	cases := []struct {
		name   string
		rate   churnRate
		b      bucket
		now    time.Time
		op     string // take, refund
		ok     bool
		tokens float64
	}{
		{"new source starts full", r, bucket{}, t0, "take", true, 3},
		{"a token left", r, bucket{1, t0}, t0, "take", true, 0},
		{"empty refuses", r, bucket{0.5, t0}, t0, "take", false, 0.5},
		{"refills with time", r, bucket{0, t0}, t0.Add(time.Second), "take", true, 1},
		{"half a token is not one", r, bucket{0, t0}, t0.Add(200 * time.Millisecond), "take", false, 0.4},
		{"refill capped at the burst", r, bucket{0, t0}, t0.Add(time.Hour), "take", true, 3},
		{"clock back adds nothing", r, bucket{0, t0}, t0.Add(-time.Hour), "take", false, 0},
		{"refund gives one back", r, bucket{1, t0}, t0, "refund", true, 2},
		{"refund capped at the burst", r, bucket{4, t0}, t0, "refund", true, 4},
		{"refund to a new source", r, bucket{}, t0, "refund", true, 4},
		{"no rate never refills", churnRate{perSec: 0, burst: 1}, bucket{0, t0}, t0.Add(time.Hour), "take", false, 0},
	}
	for _, c := range cases {
		var b bucket
		ok := true
		switch c.op {
		case "take":
			b, ok = c.rate.take(c.b, c.now)
		case "refund":
			b = c.rate.refund(c.b, c.now)
		}
		if ok != c.ok || b.tokens < c.tokens-1e-9 || b.tokens > c.tokens+1e-9 {
			t.Errorf("%s: ok %v tokens %v, want %v %v", c.name, ok, b.tokens, c.ok, c.tokens)
		}
		if c.now.After(c.b.at) && !b.at.Equal(c.now) {
			t.Errorf("%s: bucket at %v, want %v", c.name, b.at, c.now)
		}
	}
	if !r.full(bucket{0, t0}, t0.Add(2*time.Second)) || r.full(bucket{3, t0}, t0) {
		t.Error("full misjudged")
	}
}

// The limiter keeps a bucket per source; a full table drops refilled
// sources, and sources that still do not fit share one bucket.
func TestChurnLimiterTable(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newChurnLimiter(TransportOptions{ChurnRate: 1, ChurnBurst: 2}, func() time.Time { return now })
	if got := takes(l, "a", 3); got != 2 {
		t.Fatalf("source a: %d connections of 3, want 2", got)
	}
	if !l.take("b") {
		t.Fatal("source b is not a's")
	}
	l.refund("a")
	if got := takes(l, "a", 2); got != 1 {
		t.Fatalf("a refund is one connection, got %d", got)
	}
	l.refund("unknown") // nothing to give back to
	if _, ok := l.sources["unknown"]; ok {
		t.Fatal("a refund made a source")
	}
	// Fill the table with sources that used their burst.
	for i := range maxSources {
		k := "s" + string(rune(i+1000))
		l.take(k)
		l.take(k)
	}
	if got := takes(l, "late", 3); got > 2 {
		t.Fatalf("a source past a full table got %d connections, more than the shared burst", got)
	}
	now = now.Add(time.Hour) // everyone refilled: the table makes room
	if !l.take("later") || len(l.sources) > maxSources {
		t.Fatalf("table of %d after a refill", len(l.sources))
	}
	off := newChurnLimiter(TransportOptions{ChurnRate: -1, ChurnBurst: 1}, time.Now)
	for range 10 {
		if !off.take("x") {
			t.Fatal("a limiter turned off refused")
		}
	}
}

// takes is how many of n connections from src the limiter lets on.
func takes(l *churnLimiter, src string, n int) int {
	ok := 0
	for range n {
		if l.take(src) {
			ok++
		}
	}
	return ok
}

// The source of a connection: a local peer's user, else its address.
func TestSourceOf(t *testing.T) {
	for _, c := range []struct {
		p    PeerInfo
		want string
	}{
		{PeerInfo{Network: "tcp", Addr: "127.0.0.1:4000", UID: 1000}, "uid 1000"},
		{PeerInfo{Network: "tcp", Addr: "10.0.0.5:4000", UID: -1}, "10.0.0.5"},
		{PeerInfo{Network: "tcp", Addr: "[::1]:4000", UID: -1}, "::1"},
		{PeerInfo{Network: "unix", UID: -1}, "unix"},
		{PeerInfo{Network: "unix", PID: 7, UID: 0}, "uid 0"},
		{PeerInfo{Network: "tcp", Addr: "odd", UID: -1}, "odd"},
	} {
		if got := sourceOf(c.p); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
}

// Refusals are logged once per interval: the first at once, the rest
// counted by reason and logged in one line when the interval ends.
func TestRefusalLogOneLinePerInterval(t *testing.T) {
	var buf syncBuf
	r := newRefusalLog(slog.New(slog.NewTextHandler(&buf, nil)), "decode", "ROUTER")
	for range 1000 {
		r.note("rate", "127.0.0.1:1", nil)
	}
	r.note("peer check", "127.0.0.1:2", io.EOF)
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for 1001 refusals in one interval:\n%s", n, buf.String())
	}
	r.close()
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, "count=1000") || !strings.Contains(out, `by="peer check 1, rate 999"`) ||
		!strings.Contains(out, "last_err=EOF") {
		t.Fatalf("summary:\n%s", out)
	}
	r.note("rate", "x", nil) // after close: counted, no timer left behind
	if r.timer != nil {
		t.Fatal("a timer after close")
	}
}

// A source that keeps dialling without settling is refused at accept
// once its burst is spent, without a byte read; an engine's connections
// settle and give their tokens back, so they never run out.
func TestChurnRefusedAtAccept(t *testing.T) {
	t.Parallel()
	var logs syncBuf
	tr := ZMQ4(TransportOptions{ChurnRate: 0.001, ChurnBurst: 4, HandshakeTimeout: 200 * time.Millisecond}).(CheckedTransport)
	r, err := tr.BindWith(Router, "tcp://127.0.0.1:0", BindOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Role: "decode"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	network, addr := endpointAddr(r.Endpoint())
	// Engines: each dials, greets and sends its first message: settled.
	for i := range 8 {
		d := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity([]byte{byte(i), 0})))
		if err := d.Dial(r.Endpoint()); err != nil {
			t.Fatalf("engine %d refused: %v", i, err)
		}
		if err := d.Send(zmq4.NewMsg([]byte("hello"))); err != nil {
			t.Fatal(err)
		}
		recvTimeout(t, r)
		d.Close()
	}
	// A churner: greeting and READY, nothing more. The burst's four get
	// the gate's greeting; the fifth is closed before it.
	for i := range 4 {
		c := rawPeer(t, network, addr, string([]byte{byte(i), 1}))
		if got := readN(t, c, 64); len(got) != 64 {
			t.Fatalf("connection %d within the burst got no greeting", i)
		}
	}
	c := rawPeer(t, network, addr, "\x09\x09")
	if got := expectClosed(t, c, 5*time.Second); len(got) != 0 {
		t.Fatalf("over the burst: %d bytes read, want a close before the greeting", len(got))
	}
	// The first refusal of the interval is logged before the close.
	if !strings.Contains(logs.String(), "why=rate") {
		t.Fatalf("refusal not logged:\n%s", logs.String())
	}
}

// A socket holds at most MaxPending unsettled connections: silent ones
// fill it and the next is closed at accept; once they are gone, a rank
// gets in again.
func TestPendingCapped(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{MaxPending: 3, HandshakeTimeout: 300 * time.Millisecond})
	r, err := tr.Bind(Router, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	network, addr := endpointAddr(r.Endpoint())
	var silent []net.Conn
	for range 3 {
		silent = append(silent, rawPeer(t, network, addr, "\xff"))
	}
	readN(t, silent[2], 64) // the third is in the gate: all three are counted
	over := rawPeer(t, network, addr, "\xff")
	if got := expectClosed(t, over, 5*time.Second); len(got) != 0 {
		t.Fatalf("over MaxPending: %d bytes read", len(got))
	}
	for _, c := range silent {
		expectClosed(t, c, 5*time.Second) // the handshake timeout
	}
	d := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity([]byte{1, 0})))
	defer d.Close()
	if err := d.Dial(r.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, r, true)
}

// The transport's sockets share MaxPendingTotal.
func TestPendingTotalShared(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{MaxPendingTotal: 2, HandshakeTimeout: 5 * time.Second})
	var eps []string
	for range 2 {
		r, err := tr.Bind(Router, "tcp://127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		eps = append(eps, r.Endpoint())
	}
	n0, a0 := endpointAddr(eps[0])
	n1, a1 := endpointAddr(eps[1])
	first := rawPeer(t, n0, a0, "\xff")
	second := rawPeer(t, n1, a1, "\xff")
	readN(t, first, 64)
	readN(t, second, 64)
	third := rawPeer(t, n1, a1, "\xff")
	if got := expectClosed(t, third, 5*time.Second); len(got) != 0 {
		t.Fatalf("over MaxPendingTotal: %d bytes read", len(got))
	}
}

// readN reads n bytes from c within 5 s (fewer when it closes).
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, n)
	k, _ := io.ReadFull(c, b)
	return b[:k]
}

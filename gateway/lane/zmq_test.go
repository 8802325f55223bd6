package lane

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

func waitEvent(t *testing.T, s Socket, up bool) PeerEvent {
	t.Helper()
	select {
	case ev := <-s.Events():
		if ev.Up != up {
			t.Fatalf("event up=%v, want %v (%+v)", ev.Up, up, ev)
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatalf("no peer event (want up=%v)", up)
	}
	return PeerEvent{}
}

func recvTimeout(t *testing.T, s Socket) [][]byte {
	t.Helper()
	type res struct {
		f   [][]byte
		err error
	}
	ch := make(chan res, 1)
	go func() { f, err := s.Recv(); ch <- res{f, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("recv: %v", r.err)
		}
		return r.f
	case <-time.After(5 * time.Second):
		t.Fatal("recv timed out")
	}
	return nil
}

// The ROUTER learns a DEALER's identity, routes replies to it, refuses
// sends to unknown identities, and reports the DEALER leaving.
func TestRouterIdentityAndLiveness(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{})
	for _, ep := range []string{"tcp://127.0.0.1:0", "ipc://" + filepath.Join(t.TempDir(), "r-in.sock")} {
		r, err := tr.Bind(Router, ep)
		if err != nil {
			t.Fatal(err)
		}
		if ep == "tcp://127.0.0.1:0" && r.Endpoint() == ep {
			t.Fatalf("ephemeral port not read back: %s", r.Endpoint())
		}
		d := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity([]byte{4, 0})))
		if err := d.Dial(r.Endpoint()); err != nil {
			t.Fatal(err)
		}
		ev := waitEvent(t, r, true)
		if !bytes.Equal(ev.Identity, []byte{4, 0}) {
			t.Fatalf("identity %x", ev.Identity)
		}
		if err := d.Send(zmq4.NewMsg([]byte("hi"))); err != nil {
			t.Fatal(err)
		}
		f := recvTimeout(t, r)
		if len(f) != 2 || !bytes.Equal(f[0], []byte{4, 0}) || string(f[1]) != "hi" {
			t.Fatalf("frames %q", f)
		}
		if err := r.Send([][]byte{{4, 0}, {0}, []byte("x")}); err != nil {
			t.Fatal(err)
		}
		m, err := d.Recv()
		if err != nil || len(m.Frames) != 2 || string(m.Frames[1]) != "x" {
			t.Fatalf("dealer got %q, %v", m.Frames, err)
		}
		if err := r.Send([][]byte{{9, 9}, []byte("x")}); !errors.Is(err, ErrNoPeer) {
			t.Fatalf("send to unknown identity: %v", err)
		}
		_ = d.Close()
		waitEvent(t, r, false)
		if r.Live([]byte{4, 0}) != 0 {
			t.Fatal("still live after close")
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func greeting() []byte {
	g := make([]byte, 64)
	g[0] = 0xff
	g[9] = 0x7f
	g[10] = 3
	copy(g[12:], "NULL")
	return g
}

func readyCmd(id string) []byte {
	var body []byte
	body = append(body, 5)
	body = append(body, "READY"...)
	prop := func(k, v string) {
		body = append(body, byte(len(k)))
		body = append(body, k...)
		body = binary.BigEndian.AppendUint32(body, uint32(len(v)))
		body = append(body, v...)
	}
	prop("Socket-Type", "DEALER")
	prop("Identity", id)
	return append([]byte{flagCommand, byte(len(body))}, body...)
}

// A peer that connects and stays silent, one that sends a huge frame
// length and one with malformed metadata cannot stall or crash the socket.
func TestMalformedPeersCannotWedge(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{HandshakeTimeout: 300 * time.Millisecond, MaxFrame: 1 << 20})
	r, err := tr.Bind(Router, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	addr := r.Endpoint()[len("tcp://"):]

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	huge, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer huge.Close()
	msg := append(greeting(), readyCmd("\x01\x00")...)
	msg = append(msg, flagLong)
	msg = binary.BigEndian.AppendUint64(msg, 1<<62)
	_, _ = huge.Write(msg)

	bad, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, _ = bad.Write(append(greeting(), flagCommand, 8, 5, 'R', 'E', 'A', 'D', 'Y', 200, 1))

	d := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity([]byte{2, 0})))
	defer d.Close()
	if err := d.Dial(r.Endpoint()); err != nil {
		t.Fatal(err)
	}
	// The huge-frame peer may show up briefly before it is cut off.
	deadline := time.After(5 * time.Second)
	for up := false; !up; {
		select {
		case ev := <-r.Events():
			up = ev.Up && bytes.Equal(ev.Identity, []byte{2, 0})
		case <-deadline:
			t.Fatal("good dealer never came up")
		}
	}
	if err := d.Send(zmq4.NewMsg([]byte("ok"))); err != nil {
		t.Fatal(err)
	}
	f := recvTimeout(t, r)
	if string(f[1]) != "ok" {
		t.Fatalf("frames %q", f)
	}
}

// The PULL side reports pushers coming and going and keeps receiving.
func TestPullSurvivesPeerLeaving(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{})
	p, err := tr.Bind(Pull, "ipc://"+filepath.Join(t.TempDir(), "w-out.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 2 {
		push := zmq4.NewPush(context.Background())
		if err := push.Dial(p.Endpoint()); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, p, true)
		if err := push.Send(zmq4.NewMsg([]byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
		if f := recvTimeout(t, p); len(f) != 1 || f[0][0] != byte(i) {
			t.Fatalf("frames %q", f)
		}
		_ = push.Close()
		waitEvent(t, p, false)
	}
}

// A peer that stops reading is cut off after the write timeout instead of
// blocking the socket's sender forever (zmq4 would wait indefinitely).
func TestStalledReaderIsCutOff(t *testing.T) {
	t.Parallel()
	tr := ZMQ4(TransportOptions{WriteTimeout: 300 * time.Millisecond})
	r, err := tr.Bind(Router, "ipc://"+filepath.Join(t.TempDir(), "s-in.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity([]byte{1, 0})))
	defer d.Close()
	if err := d.Dial(r.Endpoint()); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, r, true)
	big := make([]byte, 1<<20)
	done := make(chan error, 1)
	go func() {
		for range 64 { // the dealer never calls Recv
			if err := r.Send([][]byte{{1, 0}, big}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("64 MiB went to a peer that reads nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("send blocked on a stalled peer")
	}
	waitEvent(t, r, false)
}

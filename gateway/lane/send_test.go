package lane

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/zmtp"
)

// A message sent to an identity the moment its connection is admitted
// (before its owner has written our READY on it) reaches the peer
// after our greeting and READY, never inside them; and consecutive
// messages of one batch arrive whole and in order.
func TestSendFollowsReady(t *testing.T) {
	t.Parallel()
	r, err := ZMQ4(TransportOptions{}).Bind(Router, "ipc://"+filepath.Join(t.TempDir(), "s-in.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	network, addr := endpointAddr(r.Endpoint())
	for i := range 10 {
		id := string([]byte{byte(i), 0})
		c := rawPeer(t, network, addr, id)
		waitEvent(t, r, true)
		bs := r.(batchSender)
		msgs := [][][]byte{{[]byte(id), {typeAdd}, []byte("one")}, {[]byte(id), {typeAbort}, bytes.Repeat([]byte("x"), 300)}}
		errs := make([]error, 2)
		bs.sendBatch(msgs, errs)
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("send: %v", errs)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		rd := zmtp.NewReader(c, zmtp.Limits{MaxFrame: 1 << 20, MaxMessage: 1 << 20}, 0)
		g, err := rd.ReadGreeting()
		if err != nil || zmtp.CheckGreeting(g) != nil {
			t.Fatalf("greeting %x: %v", g, err)
		}
		body, flags, err := rd.ReadFrame()
		if err != nil || flags&zmtp.FlagCommand == 0 {
			t.Fatalf("want READY first, got flags %#x %q: %v", flags, body, err)
		}
		if cmd, err := zmtp.ParseCommand(body); err != nil || cmd.Name != "READY" || cmd.Prop("Socket-Type") != "ROUTER" {
			t.Fatalf("READY %+v: %v", cmd, err)
		}
		for j, m := range msgs {
			got, err := rd.ReadMessage()
			if err != nil || len(got) != 2 || !bytes.Equal(got[0], m[1]) || !bytes.Equal(got[1], m[2]) {
				t.Fatalf("message %d: %q, %v", j, got, err)
			}
		}
		_ = c.Close()
		waitEvent(t, r, false)
	}
}

// afterReady finds where a pusher's messages start in what the gate read.
func TestAfterReady(t *testing.T) {
	t.Parallel()
	g := greeting()
	ready := readyCmdPush()
	longReady := append(binary.BigEndian.AppendUint64([]byte{flagCommand | flagLong}, uint64(len(ready)-2)), ready[2:]...)
	msg := []byte{0, 2, 'h', 'i'}
	for _, c := range []struct {
		name string
		got  []byte
		want []byte
		ok   bool
	}{
		{"ready only", append(append([]byte{}, g...), ready...), []byte{}, true},
		{"ready and a message", append(append(append([]byte{}, g...), ready...), msg...), msg, true},
		{"long ready", append(append(append([]byte{}, g...), longReady...), msg...), msg, true},
		{"short greeting", g[:10], nil, false},
		{"message first", append(append([]byte{}, g...), msg...), nil, false},
		{"cut ready", append(append([]byte{}, g...), ready[:5]...), nil, false},
		{"cut long header", append(append([]byte{}, g...), flagCommand|flagLong, 0), nil, false},
	} {
		rest, err := afterReady(c.got)
		if (err == nil) != c.ok || (c.ok && !bytes.Equal(rest, c.want)) {
			t.Errorf("%s: %q, %v", c.name, rest, err)
		}
	}
}

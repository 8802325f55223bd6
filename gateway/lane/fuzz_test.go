package lane

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// The gate's ZMTP parser sees every byte a peer sends while greeting; no input
// may make it panic, and whatever it accepts as READY must be well formed.
func FuzzZMTPParser(f *testing.F) {
	good := append(greeting(), readyCmd("\x01\x00")...)
	good = append(good, 0x00, 0x02, 'h', 'i')
	f.Add(good, uint8(7))
	f.Add(append(greeting(), flagLong, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), uint8(1))
	f.Add(append(greeting(), flagCommand, 3, 5, 'R', 'E'), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		p := zmtpParser{maxFrame: 1 << 20}
		step := int(chunk%16) + 1
		for i := 0; i < len(data); i += step {
			if err := p.feed(data[i:min(i+step, len(data))]); err != nil {
				return
			}
		}
		if p.ready {
			if _, _, err := parseReadyProps(p.cmd); err != nil && len(p.cmd) > 0 {
				t.Fatalf("accepted READY that does not parse: %v", err)
			}
		}
	})
}

// The gate reads a new peer's greeting and READY before admitting it: no
// byte stream may panic it or leave the connection neither admitted nor
// closed, and an admitted peer has a parsed, compatible READY.
func FuzzGate(f *testing.F) {
	f.Add(append(greeting(), readyCmd("\x01\x00")...))
	f.Add(append(greeting(), readyCmd("")...))
	f.Add(append(greeting(), flagCommand|flagLong, 0, 0, 0, 0, 0, 0, 0xff, 0xff))
	f.Add([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 1})
	f.Add(append(greeting(), 0x01, 0x00, 0x00, 0x00))
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := TransportOptions{HandshakeTimeout: 200 * time.Millisecond, FirstMessageTimeout: time.Minute}.withDefaults()
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		s := &zsock{kind: Router, opts: opts, adm: newAdmission(opts), refused: newRefusalLog(log, "", "ROUTER"),
			bind: BindOptions{Logger: log}, live: map[string]int{},
			conns: map[string]map[*trackedConn]struct{}{}, events: newQueue[PeerEvent]()}
		g := &gateListener{sock: s}
		ours, theirs := net.Pipe()
		go func() {
			_, _ = io.Copy(io.Discard, theirs) // our greeting
		}()
		go func() {
			_, _ = theirs.Write(data)
			_ = theirs.Close() // EOF instead of waiting out the deadline
		}()
		tk, why := s.enter("fuzz")
		if why != "" {
			t.Fatalf("a first connection refused: %s", why)
		}
		tc, _, err := g.handshake(ours, PeerInfo{UID: -1}, true, tk)
		if err != nil {
			g.fail(ours, tk)
			_ = theirs.Close()
			if s.nconns != 0 || s.pending != 0 || s.adm.pending != 0 {
				t.Fatalf("refused connection still counted: conns %d pending %d/%d", s.nconns, s.pending, s.adm.pending)
			}
			return
		}
		if !tc.p.ready || !compatiblePeer(Router, tc.p.sockType) {
			t.Fatalf("admitted a peer without a compatible READY: %+v", tc.p)
		}
		if s.Live([]byte(tc.p.identity)) != 1 {
			t.Fatalf("admitted identity %x not live", tc.p.identity)
		}
		_ = tc.Close()
		_ = theirs.Close()
		if s.Live([]byte(tc.p.identity)) != 0 || s.nconns != 0 || s.pending != 0 || s.adm.pending != 0 {
			t.Fatalf("closed connection still counted: live %d conns %d pending %d/%d", s.Live([]byte(tc.p.identity)), s.nconns, s.pending, s.adm.pending)
		}
		s.events.close()
	})
}

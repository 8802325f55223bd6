package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/zmtp"
	"github.com/tsd-project/tsd/testkit/testports"
)

// peer is a scripted ZMTP server: it answers each connection with script.
func peer(t *testing.T, script func(c net.Conn)) string {
	t.Helper()
	port := testports.Port(t)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				script(c)
			}()
		}
	}()
	return fmt.Sprintf("tcp://127.0.0.1:%d", port)
}

// readyCmd is a READY command frame announcing sockType.
func readyCmd(sockType string) []byte {
	body := append([]byte{5}, "READY"...)
	body = zmtp.AppendProperty(body, "Socket-Type", sockType)
	return append(zmtp.AppendFrameHeader(nil, len(body), false, true), body...)
}

// greet reads the client's greeting and READY and answers as sockType.
func greet(c net.Conn, sockType string, mech string) {
	g := zmtp.Greeting()
	copy(g[12:32], make([]byte, 20))
	copy(g[12:], mech)
	_, _ = c.Write(append(g, readyCmd(sockType)...))
	buf := make([]byte, 64)
	_, _ = io.ReadFull(c, buf)
}

func TestZMTPHandshakeRefusals(t *testing.T) {
	// Peers that are not a NULL-security PUB are refused at the handshake.
	rows := []struct {
		name   string
		script func(c net.Conn)
		want   string
	}{
		{"not ZMTP", func(c net.Conn) { _, _ = c.Write(bytes.Repeat([]byte("HTTP/1.1 400\r\n"), 8)) }, "bad signature"},
		{"ZMTP 2", func(c net.Conn) {
			g := zmtp.Greeting()
			g[10] = 1
			_, _ = c.Write(g)
		}, "speaks ZMTP 1.0"},
		{"CURVE", func(c net.Conn) { greet(c, "PUB", "CURVE") }, `mechanism "CURVE"`},
		{"a ROUTER", func(c net.Conn) { greet(c, "ROUTER", "NULL") }, `peer socket type "ROUTER" does not pair with SUB`},
		{"message before READY", func(c net.Conn) {
			_, _ = c.Write(append(zmtp.Greeting(), 0, 1, 'x'))
		}, "message before READY"},
		{"silent", func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }, "read greeting"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			ep := peer(t, r.script)
			// The silent peer shows the handshake's deadline; the others
			// answer at once (a long bound: loaded CI machines are slow).
			timeout := 10 * time.Second
			if r.name == "silent" {
				timeout = time.Second
			}
			_, err := dialZMTP(context.Background(), ep, typeSUB, Limits{}, timeout)
			if err == nil || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("err = %v, want %q", err, r.want)
			}
		})
	}
}

func TestZMTPFrameCaps(t *testing.T) {
	// A frame or message over the caps is refused from its header, before
	// anything is allocated for it.
	rows := []struct {
		name  string
		after []byte // what the peer sends after its READY
		want  string
	}{
		{"a terabyte frame", binary.BigEndian.AppendUint64([]byte{0x02}, 1<<40), "frame of 1099511627776 bytes exceeds the 1024-byte limit"},
		{"message over the cap", func() []byte {
			var b []byte
			for range 5 {
				b = append(b, 0x01, 250)
				b = append(b, make([]byte, 250)...)
			}
			return b
		}(), "exceeds the"},
		{"bad flags", []byte{0x80, 0}, "invalid frame flags"},
		{"too many frames", bytes.Repeat([]byte{0x01, 0}, 100), "more than 64 frames"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			ep := peer(t, func(c net.Conn) {
				greet(c, "PUB", "NULL")
				_, _ = c.Write(r.after)
				_, _ = io.Copy(io.Discard, c)
			})
			z, err := dialZMTP(context.Background(), ep, typeSUB, Limits{MaxFrame: 1024, MaxMessage: 1024}, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer z.close()
			z.setReadDeadline(time.Now().Add(5 * time.Second))
			_, err = z.recv()
			if err == nil || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("err = %v, want %q", err, r.want)
			}
		})
	}
}

func TestSubscriberSurvivesAHostilePublisher(t *testing.T) {
	// A "publisher" that handshakes and then sends an oversized frame on
	// every connection: each is cut, and once it has shown bad data the
	// rank is not live on any later connection; the retries log nothing
	// per attempt, and Close still returns.
	var mu sync.Mutex
	conns := 0
	connected := make(chan struct{}, 100)
	ep := peer(t, func(c net.Conn) {
		mu.Lock()
		conns++
		mu.Unlock()
		greet(c, "PUB", "NULL")
		_, _ = c.Write(binary.BigEndian.AppendUint64([]byte{0x02}, 1<<40))
		select {
		case connected <- struct{}{}:
		default:
		}
		_, _ = io.Copy(io.Discard, c)
	})
	var logs bytes.Buffer
	var logMu sync.Mutex
	changed := make(chan struct{}, 1)
	s := New([]EngineConfig{{Worker: "prefill", Ranks: []RankEndpoints{{Publish: ep}}}},
		Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil)), RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
			OnChange: func(string) {
				select {
				case changed <- struct{}{}:
				default:
				}
			}})
	s.Start()
	deadline := time.After(10 * time.Second)
	for {
		st, _ := s.StatusOf("prefill")
		if strings.Contains(st.Note, "publisher sent bad data: frame of 1099511627776 bytes exceeds") {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the bad frame was never noted: %+v", st)
		}
	}
	for range len(connected) {
		<-connected
	}
	for range 5 {
		select {
		case <-connected:
		case <-deadline:
			t.Fatal("the subscriber stopped reconnecting")
		}
		if _, live := s.Match("prefill", seq(0, 100)); live {
			t.Fatal("live on a publisher that sent bad data")
		}
	}
	s.Close()
	mu.Lock()
	n := conns
	mu.Unlock()
	logMu.Lock()
	defer logMu.Unlock()
	// One line for the first connection, one warning for the bad data,
	// nothing for the cycles after it.
	if lines := strings.Count(logs.String(), "\n"); lines > 3 || n < 5 {
		t.Fatalf("%d log lines for %d connections:\n%s", lines, n, logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestSubscriberRetriesQuietly(t *testing.T) {
	// While an engine starts, its port refuses the handshake; the
	// subscriber retries with one log line for the whole wait, not one per
	// attempt, and subscribes once the publisher is up.
	port := testports.Port(t)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	attempts := make(chan struct{}, 1000)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			attempts <- struct{}{}
		}
	}()
	var logs bytes.Buffer
	var mu sync.Mutex
	changed := make(chan struct{}, 1)
	s := New([]EngineConfig{{Worker: "prefill", Ranks: []RankEndpoints{{Publish: fmt.Sprintf("tcp://127.0.0.1:%d", port)}}}},
		Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)), RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond,
			OnChange: func(string) {
				select {
				case changed <- struct{}{}:
				default:
				}
			}})
	s.Start()
	defer s.Close()
	deadline := time.After(20 * time.Second)
	for range 20 {
		select {
		case <-attempts:
		case <-deadline:
			t.Fatal("fewer than 20 attempts")
		}
	}
	l.Close()
	cfg := Config{Endpoint: fmt.Sprintf("tcp://*:%d", port), BufferSteps: 10, MaxQueueSize: 10, EnableKVCacheEvents: true}
	p, err := NewPublisher(cfg, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for {
		if st, _ := s.StatusOf("prefill"); st.Live {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("never live")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "waiting for the publisher"); n != 1 {
		t.Fatalf("%d waiting lines:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "subscribed"); n != 1 {
		t.Fatalf("%d subscribed lines:\n%s", n, logs.String())
	}
}

package lane

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// rssMB reads this process's resident set size.
func rssMB(b *testing.B) float64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.Fields(v)[0])
			return float64(kb) / 1024
		}
	}
	return 0
}

// The multi-frame attack: one connection offers a 512 MiB message in
// 1 MiB frames. Reports how much the gateway's RSS grew at the peak and
// after the cut (target: bounded by MaxMessage, 128 MiB by default; before
// the cap, the whole message was buffered).
func BenchmarkMultiFrameBombRSS(b *testing.B) {
	for range b.N {
		debug.FreeOSMemory()
		base := rssMB(b)
		tr := ZMQ4(TransportOptions{})
		p, err := tr.Bind(Pull, "ipc://"+filepath.Join(b.TempDir(), "b-out.sock"))
		if err != nil {
			b.Fatal(err)
		}
		c, err := net.Dial("unix", strings.TrimPrefix(p.Endpoint(), "ipc://"))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = c.Write(append(greeting(), readyCmdPush()...))
		frame := make([]byte, 1<<20)
		hdr := binary.BigEndian.AppendUint64([]byte{flagLong | flagMore}, uint64(len(frame)))
		msg := append(hdr, frame...)
		peak := base
		for i := 0; i < 512; i++ {
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(msg); err != nil {
				break
			}
			if i%32 == 0 {
				peak = max(peak, rssMB(b))
			}
		}
		peak = max(peak, rssMB(b))
		_ = c.Close()
		_ = p.Close()
		runtime.GC()
		debug.FreeOSMemory()
		b.ReportMetric(peak-base, "peak-MB")
		b.ReportMetric(rssMB(b)-base, "after-MB")
	}
}

func readyCmdPush() []byte {
	body := append([]byte{5}, "READY"...)
	body = append(body, 11)
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, 4)
	body = append(body, "PUSH"...)
	return append([]byte{flagCommand, byte(len(body))}, body...)
}

// A rank's greeting behind 30 silent connections (which never send a
// byte): reports how long until its connection is up. Before the gate,
// zmq4 greeted serially with a 5 s timeout each (about 150 s).
func BenchmarkGreetingBehindSilentConns(b *testing.B) {
	for range b.N {
		tr := ZMQ4(TransportOptions{})
		r, err := tr.Bind(Router, "tcp://127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := strings.TrimPrefix(r.Endpoint(), "tcp://")
		var silent []net.Conn
		for range 30 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			silent = append(silent, c)
		}
		start := time.Now()
		d := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity([]byte{1, 0})))
		if err := d.Dial(r.Endpoint()); err != nil {
			b.Fatal(err)
		}
		select {
		case <-r.Events():
		case <-time.After(10 * time.Minute):
			b.Fatal("never came up")
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-to-up")
		_ = d.Close()
		for _, c := range silent {
			_ = c.Close()
		}
		_ = r.Close()
	}
}

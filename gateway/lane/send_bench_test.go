package lane

import (
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkRouterSend: request-sized messages (ADD: identity, type byte,
// a 200-byte payload) from the input ROUTER to one rank whose connection
// reads and discards them, in bursts of burst messages as the worker's
// sendLoop hands them over. One op is one message.
func BenchmarkRouterSend(b *testing.B) {
	for _, burst := range []int{1, 32} {
		b.Run("burst="+string(rune('0'+burst/10))+string(rune('0'+burst%10)), func(b *testing.B) { benchRouterSend(b, burst) })
	}
}

func benchRouterSend(b *testing.B, burst int) {
	r, err := ZMQ4(TransportOptions{}).Bind(Router, "ipc://"+filepath.Join(b.TempDir(), "s-in.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	network, addr := endpointAddr(r.Endpoint())
	c, err := net.Dial(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(append(greeting(), readyCmdType("DEALER", "\x01\x00")...)); err != nil {
		b.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, c) }()
	deadline := time.After(10 * time.Second)
	for r.Live([]byte{1, 0}) == 0 {
		select {
		case <-r.Events():
		case <-deadline:
			b.Fatal("peer never came up")
		}
	}
	msg := [][]byte{{1, 0}, {typeAdd}, make([]byte, 200)}
	msgs := make([][][]byte, burst)
	for i := range msgs {
		msgs[i] = msg
	}
	errs := make([]error, burst)
	bs, batched := r.(batchSender)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += burst {
		if batched {
			bs.sendBatch(msgs, errs)
			if errs[0] != nil {
				b.Fatal(errs[0])
			}
			continue
		}
		for _, m := range msgs {
			if err := r.Send(m); err != nil {
				b.Fatal(err)
			}
		}
	}
}

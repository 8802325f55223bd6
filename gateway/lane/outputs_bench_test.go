package lane

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// benchRank registers one rank (zmq4 handshake and input, as a test
// engine) and opens its output connection as raw bytes: the timed loop
// writes pre-framed ZMTP messages, so the engine side costs almost
// nothing and what the benchmark measures is the gateway's read, decode
// and delivery.
func benchRank(b *testing.B, w *Worker, ch <-chan snapshot.RankEvent) (in zmq4.Socket, out net.Conn) {
	b.Helper()
	ident := zmq4.WithID(zmq4.SocketIdentity(wire.EncodeIdentity(0)))
	hs := zmq4.NewDealer(context.Background(), ident)
	defer hs.Close()
	if err := hs.Dial(w.HandshakeEndpoint()); err != nil {
		b.Fatal(err)
	}
	hello, _ := wire.EncodeHandshake(wire.Hello())
	if err := hs.Send(zmq4.NewMsg(hello)); err != nil {
		b.Fatal(err)
	}
	if _, err := hs.Recv(); err != nil {
		b.Fatal(err)
	}
	ready, _ := wire.EncodeHandshake(wire.Ready())
	if err := hs.Send(zmq4.NewMsg(ready)); err != nil {
		b.Fatal(err)
	}
	inEP, outEP := w.Endpoints()
	in = zmq4.NewDealer(context.Background(), ident)
	if err := in.Dial(inEP); err != nil {
		b.Fatal(err)
	}
	reg := wire.DefaultRegistration()
	reg.DataParallelSize, reg.MaxModelLen = 1, 4096
	payload, _ := wire.EncodeRegistration(reg)
	if err := in.Send(zmq4.NewMsg(payload)); err != nil {
		b.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-ch:
			done = ev.Rank.State == snapshot.RankRegistered
		case <-deadline:
			b.Fatal("rank never registered")
		}
	}
	network, addr := endpointAddr(outEP)
	c, err := net.Dial(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Write(append(greeting(), readyCmdPush()...)); err != nil {
		b.Fatal(err)
	}
	return in, c
}

// BenchmarkLaneOutputs: decode-step output messages, one token for each
// of rids streams per message, through a worker's real PULL socket (ipc)
// to consumers draining each stream with Recv. One op is one token, so
// ns/op is the lane's cost per streamed token and allocs/op its
// allocations per token (target 0 in steady state: the read, decode and
// delivery path reuses its buffers).
func BenchmarkLaneOutputs(b *testing.B) {
	for _, rids := range []int{1, 64} {
		b.Run(fmt.Sprintf("rids=%d", rids), func(b *testing.B) { benchOutputs(b, rids) })
	}
}

func benchOutputs(b *testing.B, rids int) {
	dir := b.TempDir()
	url := "ipc://" + filepath.Join(dir, "decode")
	l, err := New([]profiles.WorkerPlan{{Role: "decode", Kind: profiles.KindDecode, URL: url, Handshake: "tcp://127.0.0.1:0", DP: 1}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	_, ch, cancel := l.SubscribeRanks()
	defer cancel()
	if err := l.Bind(); err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	w, _ := l.Worker("decode")
	in, out := benchRank(b, w, ch)
	defer in.Close()
	defer out.Close()

	streams := make([]*Stream, rids)
	ob := wire.OutputBatch{}
	for i := range rids {
		rid := fmt.Sprintf("chatcmpl-%020d", i)
		s, err := w.Submit(0, rid, []byte{0x90})
		if err != nil {
			b.Fatal(err)
		}
		streams[i] = s
		ob.RIDs = append(ob.RIDs, rid)
		ob.OutputIDs = append(ob.OutputIDs, []int32{int32(300 + i)})
		ob.FinishedReasons = append(ob.FinishedReasons, "")
		ob.PromptTokens = append(ob.PromptTokens, 128)
		ob.CompletionTokens = append(ob.CompletionTokens, 7)
		ob.CachedTokens = append(ob.CachedTokens, 0)
	}
	msg, err := wire.EncodeOutput(ob)
	if err != nil {
		b.Fatal(err)
	}
	// window messages per write; the consumers give credit back per
	// message so queues stay bounded (steady state, not a backlog).
	const window = 16
	var framed []byte
	for range window {
		if len(msg) > 255 {
			framed = binary.BigEndian.AppendUint64(append(framed, flagLong), uint64(len(msg)))
		} else {
			framed = append(framed, 0, byte(len(msg)))
		}
		framed = append(framed, msg...)
	}
	msgs := (b.N + rids - 1) / rids
	msgs = (msgs + window - 1) / window * window
	credit := make(chan struct{}, 2*window)
	for range 2 * window {
		credit <- struct{}{}
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	start := time.Now()
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < msgs; n++ {
				o, err := s.Recv(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				got.Add(int64(len(o.TokenIDs)))
				if i == 0 {
					credit <- struct{}{}
				}
			}
		}()
	}
	errc := make(chan error, 1)
	go func() {
		for sent := 0; sent < msgs; sent += window {
			for range window {
				<-credit
			}
			if _, err := out.Write(framed); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	if g := got.Load(); g != int64(msgs*rids) {
		b.Fatalf("got %d tokens, want %d", g, msgs*rids)
	}
	b.ReportMetric(float64(msgs*rids)/el.Seconds(), "tokens/s")
	// allocs/op rounds down to an integer; this is the exact figure.
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(msgs*rids), "allocs/token")
}

package transport

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/wire"
)

// outputMessage is one engine step's output for rids requests, one
// token each: the message the lane's output socket reads most.
func outputMessage(tb testing.TB, rids int) []byte {
	ob := wire.OutputBatch{}
	for i := range rids {
		ob.RIDs = append(ob.RIDs, fmt.Sprintf("chatcmpl-%020d", i))
		ob.OutputIDs = append(ob.OutputIDs, []int32{int32(300 + i)})
		ob.FinishedReasons = append(ob.FinishedReasons, "")
		ob.PromptTokens = append(ob.PromptTokens, 128)
		ob.CompletionTokens = append(ob.CompletionTokens, 7)
		ob.CachedTokens = append(ob.CachedTokens, 0)
	}
	b, err := wire.EncodeOutput(ob)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkLanePull: messages/s and MB/s through the lane's PULL socket
// from one PUSH peer, over ipc and loopback tcp, for a 1-rid and a
// 512-rid step. One op is one message.
func BenchmarkLanePull(b *testing.B) {
	for _, scheme := range []string{"ipc", "tcp"} {
		for _, rids := range []int{1, 512} {
			b.Run(fmt.Sprintf("%s/rids=%d", scheme, rids), func(b *testing.B) { benchPull(b, scheme, rids, false) })
		}
	}
}

// BenchmarkLanePullSink is BenchmarkLanePull on the path the gateway
// runs: each connection's reader hands messages to a sink in place
// (lane.BindOptions.Sink) instead of copying them out through Recv.
// Allocations counted include the zmq4 PUSH sender's, in this process.
func BenchmarkLanePullSink(b *testing.B) {
	for _, scheme := range []string{"ipc", "tcp"} {
		for _, rids := range []int{1, 512} {
			b.Run(fmt.Sprintf("%s/rids=%d", scheme, rids), func(b *testing.B) { benchPull(b, scheme, rids, true) })
		}
	}
}

func benchPull(b *testing.B, scheme string, rids int, sink bool) {
	ep := "tcp://127.0.0.1:0"
	if scheme == "ipc" {
		dir, err := os.MkdirTemp("", "tsdb")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		ep = "ipc://" + filepath.Join(dir, "out")
	}
	got := make(chan struct{}, 1024)
	var o lane.BindOptions
	if sink {
		o.Sink = func() func([][]byte) {
			return func([][]byte) { got <- struct{}{} }
		}
	}
	sock, err := lane.ZMQ4(lane.TransportOptions{}).(lane.CheckedTransport).BindWith(lane.Pull, ep, o)
	if err != nil {
		b.Fatalf("bind %s: %v", ep, err)
	}
	defer sock.Close()
	recv := func() error {
		if sink {
			<-got
			return nil
		}
		_, err := sock.Recv()
		return err
	}
	push := zmq4.NewPush(context.Background())
	defer push.Close()
	if err := push.Dial(sock.Endpoint()); err != nil {
		b.Fatalf("dial %s: %v", sock.Endpoint(), err)
	}
	msg := outputMessage(b, rids)
	// One message through first, so the connection is up before timing.
	if err := push.Send(zmq4.NewMsg(msg)); err != nil {
		b.Fatal(err)
	}
	if err := recv(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		for range b.N {
			if err := push.Send(zmq4.NewMsg(msg)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for range b.N {
		if err := recv(); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/el, "msgs/s")
	b.ReportMetric(float64(b.N*rids)/el, "rid-tokens/s")
}

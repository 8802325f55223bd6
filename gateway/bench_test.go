package gateway

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
)

// serveRaw answers every ADD at once: the prefill with one terminal token,
// the decode with tokens outputs of one token each. No pacing, no KV
// transfer: what is left is the gateway, zmq4 and the codec.
func serveRaw(r *rawRank, prefill bool, tokens int) {
	for f := range r.frames {
		if f[0][0] != 0x00 {
			continue
		}
		q, err := wire.DecodeGenerateRequest(f[1])
		if err != nil {
			continue
		}
		n := tokens
		if prefill {
			n = 1
		}
		for i := range n {
			fin := ""
			if i == n-1 {
				fin = wire.FinishLength
			}
			b, _ := wire.EncodeOutput(wire.OutputBatch{RIDs: []string{q.RID}, OutputIDs: [][]int32{{int32(i)}},
				FinishedReasons: []string{fin}, PromptTokens: []int{len(q.InputIDs)}, CompletionTokens: []int{i + 1}, CachedTokens: []int{0}})
			_ = r.out.Send(zmq4.NewMsg(b))
		}
	}
}

// BenchmarkGatewayOnly measures the gateway's own throughput through
// tokenapi.Engine against in-process ranks that answer instantly.
func BenchmarkGatewayOnly(b *testing.B) {
	const tokens = 32
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Workers: []profiles.WorkerPlan{
		{Role: "p", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", Bootstrap: "127.0.0.1:8998", DP: 1},
		{Role: "d", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	g, err := New(plan, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Bind(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer g.Shutdown(context.Background())
	pw, _ := g.Lane().Worker("p")
	dw, _ := g.Lane().Worker("d")
	pr := dialRawRank(b, pw.HandshakeEndpoint(), "prefill")
	dr := dialRawRank(b, dw.HandshakeEndpoint(), "decode")
	go serveRaw(pr, true, tokens)
	go serveRaw(dr, false, tokens)
	waitReady(b, g)
	var toks atomicInt
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ch, err := g.Generate(context.Background(), genRequest(1, tokens))
			if err != nil {
				b.Error(err)
				return
			}
			for ev := range ch {
				if ev.Err != nil {
					b.Error(ev.Err)
				}
				toks.add(len(ev.TokenIDs))
			}
		}
	})
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/el, "req/s")
	b.ReportMetric(float64(toks.get())/el, "tok/s")
	// CPU per request is steadier than wall time on a shared machine; it
	// includes the in-process fake ranks.
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/req")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

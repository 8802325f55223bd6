package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
)

// serveFanout is a decode rank that steps like a real one: it waits until
// batch requests have arrived, then sends tokens steps, each ONE output
// message carrying one token for every rid of the batch (a decode step's
// BatchTokenIDOutSlim, docs/protocol.md), the last one finishing them all.
func serveFanout(r *rawRank, batch, tokens int) {
	var rids []string
	var prompts []int
	for f := range r.frames {
		if f[0][0] != 0x00 {
			continue
		}
		q, err := wire.DecodeGenerateRequest(f[1])
		if err != nil {
			continue
		}
		rids = append(rids, q.RID)
		prompts = append(prompts, len(q.InputIDs))
		if len(rids) < batch {
			continue
		}
		ob := wire.OutputBatch{RIDs: rids, OutputIDs: make([][]int32, batch), FinishedReasons: make([]string, batch),
			PromptTokens: prompts, CompletionTokens: make([]int, batch), CachedTokens: make([]int, batch)}
		for step := range tokens {
			for i := range batch {
				ob.OutputIDs[i] = []int32{int32(256 + step)}
				ob.CompletionTokens[i] = step + 1
				if step == tokens-1 {
					ob.FinishedReasons[i] = wire.FinishLength
				}
			}
			b, _ := wire.EncodeOutput(ob)
			_ = r.out.Send(zmq4.NewMsg(b))
		}
		rids, prompts = nil, nil
	}
}

// BenchmarkDecodeFanout measures the gateway's cost of one decode step
// when one engine output message carries 512 rids (a full decode batch):
// the lane decodes it once and delivers a token to each of 512 streams,
// each read by its own client goroutine through tokenapi.Engine. One op is a
// round: the batch's requests dispatched (both legs), then 32 steps, so
// each request's dispatch is in the figures too, spread over its 32
// tokens. ns/step is the wall time per step; cpu-µs/token the CPU the
// whole process spent per delivered token (the in-process fake ranks'
// encoding included, a small share).
func BenchmarkDecodeFanout(b *testing.B) {
	for _, batch := range []int{64, 512} {
		b.Run(fmt.Sprintf("rids=%d", batch), func(b *testing.B) { benchFanout(b, batch) })
	}
}

func benchFanout(b *testing.B, batch int) {
	const tokens = 32 // steps per round
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
	go serveRaw(pr, true, 1)
	go serveFanout(dr, batch, tokens)
	waitReady(b, g)

	rounds := b.N
	var toks atomicInt
	round := func(seed int64) {
		var wg sync.WaitGroup
		for i := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch, err := g.Generate(context.Background(), genRequest(seed*int64(batch)+int64(i), tokens))
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
			}()
		}
		wg.Wait()
	}
	round(0) // warm the connection pools and the codec
	toks = atomicInt{}
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for r := range rounds {
		round(int64(r + 1))
	}
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if got, want := toks.get(), int64(rounds*batch*tokens); got != want {
		b.Fatalf("delivered %d tokens, want %d", got, want)
	}
	steps := float64(rounds * tokens)
	b.ReportMetric(float64(el.Nanoseconds())/steps, "ns/step")
	b.ReportMetric(float64(toks.get())/el.Seconds(), "tok/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(toks.get()), "cpu-µs/token")
}

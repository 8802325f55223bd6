package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tsd-project/tsd/testkit/lanetest"
)

// BenchmarkOutput measures what one unpaced ts-fake rank sustains through
// the real lane: output messages (batches) per second and tokens per
// second, with 1 and 64 concurrent streaming requests of 64 tokens.
func BenchmarkOutput(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("concurrent=%d", conc), func(b *testing.B) {
			fe, err := lanetest.Start(lanetest.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer fe.Close()
			p := startBenchFake(b, fe)
			defer p()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if _, err := fe.WaitRegistered(ctx, 1); err != nil {
				b.Fatal(err)
			}
			before := fe.Snapshot().Batches
			b.ResetTimer()
			start := time.Now()
			tokens := 0
			for i := range b.N {
				rids := make([]string, conc)
				for j := range conc {
					q := req(fmt.Sprintf("b%d-%d", i, j), 64, true)
					q.Sampling.IgnoreEOS = true
					rids[j] = q.RID
					if err := fe.Submit(0, q); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := fe.Results(ctx, rids...); err != nil {
					b.Fatal(err)
				}
				tokens += conc * 64
			}
			el := time.Since(start).Seconds()
			b.ReportMetric(float64(fe.Snapshot().Batches-before)/el, "msgs/s")
			b.ReportMetric(float64(tokens)/el, "tokens/s")
		})
	}
}

func startBenchFake(b *testing.B, fe *lanetest.Frontend) func() {
	b.Helper()
	cmd := benchCmd(fe)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return func() { killGroup(cmd) }
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/loadgen"
)

// The table pairs each tsd row with the bare row of the same endpoint and
// concurrency: tok/s ratio, CPU ratio, and says when the run was not pinned.
func TestRenderPairsRows(t *testing.T) {
	rows := []loadRow{
		{Target: "tsd", Backend: "chat", C: 64, N: 10, CPU: 40 * time.Millisecond, S: loadgen.Summary{OutputThroughput: 1000, TotalOutputTokens: 2000, Duration: 2}},
		{Target: "bare", Backend: "chat", C: 64, N: 10, CPU: 10 * time.Millisecond, S: loadgen.Summary{OutputThroughput: 4000, TotalOutputTokens: 2000, Duration: 0.5}},
		{Target: "tsd", Backend: "generate", C: 1, N: 5, Err: "3/5 completed\nmore"},
	}
	md := render(env{cores: 2}, planCores("auto", 2, 2, true), options{inLen: 8, outLen: 16, benchtime: "1s"}, rows,
		[]controlRow{{"idle", "0.1%", "n"}}, []goResult{{spec: goSpec{what: "w", bench: "BenchmarkA|B"}, results: parseGoBench("BenchmarkA/x=a|b-2 10 5 ns/op 3 allocs/op\n")}})
	for _, want := range []string{
		"| chat SSE | 64 | 10 | 1,000 |", "| 20.00 | 0.02 | 4,000 | 5.00 | 0.25 | 0.25 |", "**Not pinned**",
		"- tsd generate C=1: 3/5 completed", "| idle | 0.1% | n |", "`A/x=a\\|b` | 5.00 ns/op, 3.00 allocs/op |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
}

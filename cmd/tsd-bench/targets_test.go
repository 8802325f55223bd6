package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/loadgen"
)

// Each target's verdict follows from the rows: met, MISSED, or not
// measured with the reason; an unpinned run's serving verdicts say they
// are indicative.
func TestTargets(t *testing.T) {
	row := func(target, backend string, c int, tokS float64, cpuUS int) loadRow {
		return loadRow{Target: target, Backend: backend, C: c, N: 10, CPU: time.Duration(cpuUS) * time.Microsecond * 1000,
			S: loadgen.Summary{OutputThroughput: tokS, TotalOutputTokens: 1000, Duration: 1}}
	}
	rows := []loadRow{
		row("tsd", "chat", 64, 300, 5), row("bare", "chat", 64, 400, 3), // 1.67× CPU met, 0.75 met
		row("tsd", "chat", 512, 200, 9), row("bare", "chat", 512, 400, 3), // 3× MISSED, 0.5 MISSED
		row("tsd", "generate", 512, 300, 4), row("bare", "generate", 512, 400, 3), // 1.33× met
	}
	share := []shareRow{{Name: "random", Lines: 10, P50: 250}, {Name: "repeat", Repeat: true, Lines: 10, P50: 180}}
	scale := []scaleRow{
		{Cores: 2, Pinned: true, Ran: true, TokS: 100},
		{Cores: 4, Pinned: true, Ran: true, TokS: 170, LoadShare: 0.95},
		{Cores: 8, Note: "not run: 16 cores: too few"},
	}
	gob := []goResult{{results: parseGoBench("BenchmarkDecodePath/rids=64-2 10 5 ns/op 0 allocs/token\n")}}
	pinned := planCores("on", 16, 2, true)
	got := targets(pinned, rows, share, scale, gob)
	want := []struct{ what, verdict string }{
		{"chat SSE C=64: tsd / bare CPU-µs per token", "met"},
		{"chat SSE C=64: tsd / bare tok/s", "met"},
		{"chat SSE C=512: tsd / bare CPU-µs per token", "MISSED"},
		{"chat SSE C=512: tsd / bare tok/s", "MISSED"},
		{"/generate C=512: tsd / bare CPU-µs per token", "met"},
		{"gateway's share of TTFT, C=1, p50 of gw_us", "met"},
		{"the same, one prompt repeated (tokenizer-cache hit)", "MISSED"},
		{"tsd on 2 → 4 cores: tok/s over linear", "met (load generator at 95% of its cores: may be the limit)"},
		{"tsd on 2 → 8 cores: tok/s over linear", "not measured: not run: 16 cores: too few"},
		{"allocations per token on the decode path (lane read → HTTP write), `DecodePath/rids=64`", "met"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].what != w.what || got[i].verdict != w.verdict {
			t.Errorf("row %d: %q %q, want %q %q", i, got[i].what, got[i].verdict, w.what, w.verdict)
		}
	}
	// Unpinned, with nothing but one chat C=64 pair measured.
	got = targets(planCores("auto", 2, 2, true), rows[:2], nil, nil, nil)
	if !strings.HasSuffix(got[0].verdict, "(not pinned: indicative)") {
		t.Errorf("unpinned verdict %q", got[0].verdict)
	}
	for _, r := range got[2:] {
		if !strings.HasPrefix(r.verdict, "not measured") {
			t.Errorf("%s: %q, want not measured", r.what, r.verdict)
		}
	}
}

// The access lines' gw_* fields are read by name, other lines skipped.
func TestGWSamples(t *testing.T) {
	log := `time=x level=INFO msg=access method=POST status=200 retries=0 gw_us=210 gw_tok_us=100 gw_send_us=70 gw_write_us=40
time=x level=INFO msg=access method=POST status=400 retries=0
time=x level=WARN msg="something else" gw_us=9999
time=x level=INFO msg=access method=POST status=200 gw_us=150 gw_tok_us=60 gw_send_us=50 gw_write_us=40
`
	s := gwSamples(strings.NewReader(log))
	if len(s["gw_us"]) != 2 || s["gw_us"][0] != 210 || s["gw_write_us"][1] != 40 {
		t.Fatalf("%v", s)
	}
	if q := quantile([]float64{5, 1, 3, 2, 4}, 0.5); q != 3 {
		t.Fatalf("p50 %v", q)
	}
}

package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
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
	gob := []goResult{{spec: decodePathSpec(t), results: parseGoBench(decodePathLines)}}
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
		{"allocations per token on the decode path (lane read → HTTP write)", "met"},
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

// decodePathLines is what the decode path's benchmarks print (a
// `-test.benchtime 300x -test.benchmem` run of gateway.test): one line
// per case, allocs/token among the figures.
const decodePathLines = `goos: linux
goarch: amd64
pkg: github.com/tsd-project/tsd/gateway
cpu: Intel(R) Xeon(R) Processor
BenchmarkDecodePathChat/C=1/tok=1-2         	     300	    254616 ns/op	       465.3 B/token	        -0.0009028 allocs/msg	       376.3 allocs/req	         0 allocs/token	         4.170 cpu-µs/token	      3978 ns/token	   29780 B/op	     376 allocs/op
BenchmarkDecodePathChat/C=1/tok=8-2         	     300	    116622 ns/op	       468.1 B/token	        -0.001111 allocs/msg	       376.3 allocs/req	         0 allocs/token	         2.432 cpu-µs/token	      1822 ns/token	   29959 B/op	     376 allocs/op
BenchmarkDecodePathChat/C=64/tok=1-2        	     300	     99339 ns/op	       475.7 B/token	         0.01971 allocs/msg	       376.4 allocs/req	         0.001042 allocs/token	         2.904 cpu-µs/token	      1552 ns/token	   30442 B/op	     376 allocs/op
BenchmarkDecodePathGenerate/C=1/tok=1-2     	     300	    192751 ns/op	       282.1 B/token	         0.0003472 allocs/msg	       196.0 allocs/req	         0.0003472 allocs/token	         3.826 cpu-µs/token	      3011 ns/token	   18053 B/op	     196 allocs/op
BenchmarkDecodePathGenerate/C=1/tok=8-2     	     300	     76564 ns/op	       282.1 B/token	        -0.003889 allocs/msg	       196.1 allocs/req	         0 allocs/token	         1.605 cpu-µs/token	      1196 ns/token	   18053 B/op	     196 allocs/op
BenchmarkDecodePathGenerate/C=64/tok=1-2    	     300	     83876 ns/op	       284.6 B/token	        -0.01339 allocs/msg	       196.6 allocs/req	         0 allocs/token	         2.414 cpu-µs/token	      1310 ns/token	   18214 B/op	     196 allocs/op
PASS
`

// decodePathSpec is the goSpecs entry of the decode path's benchmarks.
func decodePathSpec(t *testing.T) goSpec {
	t.Helper()
	for _, s := range goSpecs {
		if strings.Contains(s.bench, decodePathBenchID) {
			return s
		}
	}
	t.Fatal("no goSpecs entry runs the decode path's benchmarks")
	return goSpec{}
}

// The decode path's row is one: the worst allocs/token of its cases, to
// three decimals, met below 0.005; without its results it says why.
func TestDecodePathAllocsTarget(t *testing.T) {
	spec := decodePathSpec(t)
	// The spec's pattern picks exactly these benchmarks' lines.
	for _, r := range parseGoBench(decodePathLines) {
		if top, _, _ := strings.Cut(r.Name, "/"); !regexp.MustCompile(spec.bench).MatchString(top) {
			t.Fatalf("-test.bench %q does not run %s", spec.bench, r.Name)
		}
	}
	other := goResult{spec: goSpecs[0], results: parseGoBench("BenchmarkLaneOutputs/rids=1-2 100 5 ns/op 0.5 allocs/token\n")}
	worse := strings.Replace(decodePathLines, "0.0003472 allocs/token", "0.007 allocs/token", 1)
	for _, c := range []struct {
		name                       string
		gob                        []goResult
		measured, verdict, comment string
	}{
		{"this run's lines", []goResult{other, {spec: spec, results: parseGoBench(decodePathLines)}},
			"0.001 (worst of 6: `DecodePathChat/C=64/tok=1`)", "met", "the lane's own allocs/token is not the decode path's"},
		{"one case above", []goResult{{spec: spec, results: parseGoBench(worse)}},
			"0.007 (worst of 6: `DecodePathGenerate/C=1/tok=1`)", "MISSED", ""},
		{"all zero", []goResult{{spec: spec, results: parseGoBench(strings.ReplaceAll(strings.ReplaceAll(decodePathLines, "0.001042 allocs/token", "0 allocs/token"), "0.0003472 allocs/token", "0 allocs/token"))}},
			"0.000 (worst of 6: `DecodePathChat/C=1/tok=1`)", "met", ""},
		{"-skip-go", nil, "–", "not measured (-skip-go)", ""},
		{"binary not built", []goResult{other, {spec: spec, err: "not built (make bench builds bin/bench/gateway.test)"}},
			"–", "not measured: not built (make bench builds bin/bench/gateway.test)", ""},
		{"no such lines", []goResult{other}, "–", "not measured: no Benchmark…DecodePath with allocs/token in this run's Go benchmarks", ""},
	} {
		r := decodePathAllocs(c.gob)
		if r.what != "allocations per token on the decode path (lane read → HTTP write)" || r.goal != "0 (< 0.005)" || r.measured != c.measured || r.verdict != c.verdict {
			t.Errorf("%s: %+v, want measured %q, verdict %q %s", c.name, r, c.measured, c.verdict, c.comment)
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
	if q := percentile.NearestRankOf([]float64{5, 1, 3, 2, 4}, 50); q != 3 {
		t.Fatalf("p50 %v", q)
	}
}

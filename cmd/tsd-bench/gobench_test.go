package main

import (
	"path/filepath"
	"testing"
)

// Result lines are parsed with every unit; other lines are skipped, and
// the GOMAXPROCS suffix is dropped from the name.
func TestParseGoBench(t *testing.T) {
	out := `goos: linux
BenchmarkLanePull/ipc/rids=1-2         	   58346	     25285 ns/op	   2.73 MB/s	     39562 msgs/s
BenchmarkFrameOverview-16   	    1000	   1234567 ns/op	  20480 B/op	      12 allocs/op
--- SKIP: BenchmarkEncodeQwen3
BenchmarkBroken-2   abc  1 ns/op
PASS
`
	bs := parseGoBench(out)
	if len(bs) != 2 {
		t.Fatalf("%+v", bs)
	}
	if b := bs[0]; b.Name != "BenchmarkLanePull/ipc/rids=1" || b.N != 58346 || b.Metrics["MB/s"] != 2.73 || b.Metrics["msgs/s"] != 39562 || len(b.Units) != 3 {
		t.Fatalf("%+v", b)
	}
	if b := bs[1]; b.Name != "BenchmarkFrameOverview" || b.Metrics["allocs/op"] != 12 {
		t.Fatalf("%+v", b)
	}
}

// Cores split: tsd 0-1, engines up to 8 after them, load on the last 4;
// no pinning below 8 cores unless asked, or without taskset.
func TestPlanCores(t *testing.T) {
	for _, c := range []struct {
		pin                 string
		n, tsd              int
		taskset             bool
		pinned              bool
		tsdC, engines, load string
	}{
		{"auto", 16, 2, true, true, "0-1", "2-9", "12-15"},
		{"auto", 16, 4, true, true, "0-3", "4-11", "12-15"},
		{"auto", 8, 2, true, true, "0-1", "2-5", "6-7"},
		{"auto", 2, 2, true, false, "", "", ""},
		{"auto", 16, 2, false, false, "", "", ""},
		{"off", 16, 2, true, false, "", "", ""},
		{"on", 4, 2, true, true, "0-1", "2", "3"},
		{"on", 3, 2, true, false, "", "", ""},
	} {
		l := planCores(c.pin, c.n, c.tsd, c.taskset)
		if l.pinned != c.pinned || l.tsd != c.tsdC || l.engines != c.engines || l.load != c.load {
			t.Errorf("%s/%d/%d/%v: %+v", c.pin, c.n, c.tsd, c.taskset, l)
		}
	}
}

// num keeps tables readable: separators above 1000, a few digits below.
func TestNum(t *testing.T) {
	for v, want := range map[float64]string{146000: "146,000", 1234567.4: "1,234,567", 245: "245", 14.52: "14.5", 3.2: "3.20", 0: "0", 0.0123: "0.0123"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// Pins: what -go-save writes, -go-load reads back as the same rows; a
// spec the file lacks says so instead of vanishing.
func TestGoRunsRoundTrip(t *testing.T) {
	out := "goos: linux\nBenchmarkDecodePathChat/C=1/tok=1-2   2000  230380 ns/op  0.0003021 allocs/token\nPASS\n"
	var runs []goRun
	for i, s := range goSpecs {
		if i == 0 {
			continue // left out
		}
		runs = append(runs, goRun{Bin: s.bin, Bench: s.bench, Output: out})
	}
	path := filepath.Join(t.TempDir(), "go.json")
	if err := saveGoRuns(path, runs); err != nil {
		t.Fatal(err)
	}
	got, err := loadGoBenches(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(goSpecs) {
		t.Fatalf("%d results, want one per spec (%d)", len(got), len(goSpecs))
	}
	if got[0].err == "" || len(got[0].results) != 0 {
		t.Errorf("the spec left out: %+v, want it named missing", got[0])
	}
	for _, r := range got[1:] {
		if r.err != "" || len(r.results) != 1 || r.results[0].Metrics["allocs/token"] != 0.0003021 {
			t.Fatalf("%s %s: %+v, want the saved line back", r.spec.bin, r.spec.bench, r)
		}
	}
	if _, err := loadGoBenches(filepath.Join(t.TempDir(), "none.json")); err == nil {
		t.Error("a missing file loaded")
	}
}

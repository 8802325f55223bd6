package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tsd-project/tsd/testkit/testbin"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// goBench is one result line of `go test -bench` output.
type goBench struct {
	Name    string             // without the -GOMAXPROCS suffix
	N       int64              // iterations
	Metrics map[string]float64 // unit → value, e.g. "ns/op", "MB/s", "tok/s"
	Units   []string           // units in the order printed
}

// parseGoBench reads the result lines of `go test -bench` output (and of
// a test binary run with -test.bench); other lines are ignored.
func parseGoBench(out string) []goBench {
	var res []goBench
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		b := goBench{Name: name, N: n, Metrics: map[string]float64{}}
		ok := true
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				ok = false
				break
			}
			b.Metrics[f[i+1]] = v
			b.Units = append(b.Units, f[i+1])
		}
		if ok {
			res = append(res, b)
		}
	}
	return res
}

// goSpec is one prebuilt test binary and the benchmarks run from it.
type goSpec struct {
	bin, pkg, bench, what, benchtime string
}

var goSpecs = []goSpec{
	{"transport.test", "bench/transport", "BenchmarkLanePull", "ZMQ transport alone (lane PULL socket ← zmq4 PUSH; Sink: the worker's in-place path)", ""},
	{"lane.test", "gateway/lane", "BenchmarkLaneOutputs|BenchmarkRouterSend", "the lane alone: a token from an engine connection through decode to its stream's consumer (allocs/token: the zero-allocation path), and requests sent to a rank", ""},
	{"gateway.test", "gateway", "BenchmarkDecodeFanout|BenchmarkGatewayOnly", "decode fan-out (one output message → N streams); gateway through tokenapi.Engine", ""},
	{"gateway.test", "gateway", "BenchmarkChatSSE", "chat SSE path per token, one process: stepping fake ranks → lane → gateway → /v1/chat/completions stream → HTTP client (CPU and allocations include the fake ranks and the client)", "1000x"},
	{"gateway.test", "gateway", "BenchmarkDecodePathChat|BenchmarkDecodePathGenerate", "decode path alone, per token: lane output reader → dispatch → chat / /generate SSE writer, in-memory lane transport and a discarding writer (allocs/token: steady state, request setup in allocs/req; allocs/msg: per output message, the lane's decode included)", "1000x"},
	{"tokenizer.test", "gateway/tokenizer", "BenchmarkEncodeDemo|BenchmarkEncodeQwen3$|BenchmarkDecodeStreamStep", "tokenizer (Qwen3 only when its tokenizer.json is in the test cache)", ""},
	{"tokenizer.test", "gateway/tokenizer", "BenchmarkPrompt", "prompt tokenizer cache, a 2 KB agent chat (Qwen3): uncached, cache miss, L0 hit, L1 hit (same history, new last turn), L0/L1 mix on every core", ""},
	{"supervisor.test", "supervisor", "BenchmarkLogCapture", "log ingest from a child's pipe (100 MB of 1000-byte lines)", "1x"},
	{"tui.test", "tui", "BenchmarkLogIngest|BenchmarkFrameOverview$|BenchmarkFrameInspector|BenchmarkFrameLogsFollow", "dashboard frame time and log ingest", ""},
	{"telemetry.test", "supervisor/telemetry", "BenchmarkPollersCPU8Roles", "telemetry pollers, 8 roles", ""},
}

type goResult struct {
	spec    goSpec
	results []goBench
	err     string
}

func runGoBenches(o options) []goResult {
	out, runs := runGoSpecs(o)
	if o.goSave != "" {
		if err := saveGoRuns(o.goSave, runs); err != nil {
			fmt.Println(err)
		} else {
			fmt.Println("wrote", o.goSave)
		}
	}
	return out
}

func runGoSpecs(o options) ([]goResult, []goRun) {
	var out []goResult
	var runs []goRun
	for _, s := range goSpecs {
		bin, err := filepath.Abs(filepath.Join(o.bin, "bench", s.bin))
		if err != nil {
			continue
		}
		r := goResult{spec: s}
		if _, err := os.Stat(bin); err != nil {
			r.err = "not built (make bench builds bin/bench/" + s.bin + ")"
			out = append(out, r)
			continue
		}
		bt := o.benchtime
		if s.benchtime != "" {
			bt = s.benchtime
		}
		fmt.Println("go benchmarks:", s.bin, s.bench)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", s.bench, "-test.benchtime", bt, "-test.benchmem")
		cmd.Dir = s.pkg // testdata paths are relative to the package
		// Test binaries that start ts-fake take the one beside tsd
		// instead of building it: the GPU host has no Go.
		if abs, err := filepath.Abs(o.bin); err == nil && os.Getenv(testbin.PrebuiltEnv) == "" {
			cmd.Env = append(os.Environ(), testbin.PrebuiltEnv+"="+abs)
		}
		if _, err := os.Stat(s.pkg); err != nil {
			cmd.Dir = ""
		}
		b, err := cmd.CombinedOutput()
		cancel()
		r.results = parseGoBench(string(b))
		if err != nil {
			r.err = fmt.Sprintf("%v: %s", err, lastLines(string(b), 3))
		}
		out = append(out, r)
		runs = append(runs, goRun{Bin: s.bin, Bench: s.bench, Output: string(b), Err: r.err})
	}
	return out, runs
}

// goRun is one spec's raw `go test -bench` output, as -go-save keeps it
// and -go-load reads it back: a device call too short for the whole
// run can take the Go benchmarks in one call and the rest in the next,
// with one results file at the end.
type goRun struct {
	Bin, Bench, Output, Err string
}

// saveGoRuns writes what runGoBenches read to path.
func saveGoRuns(path string, runs []goRun) error {
	b, err := json.MarshalIndent(runs, "", "  ")
	if err != nil {
		return fmt.Errorf("save the Go benchmarks: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("save the Go benchmarks: %w", err)
	}
	return nil
}

// loadGoBenches is runGoBenches from a file saveGoRuns wrote: each spec
// takes the run with its binary and pattern; one missing says so.
func loadGoBenches(path string) ([]goResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-go-load: %w", err)
	}
	var runs []goRun
	if err := json.Unmarshal(b, &runs); err != nil {
		return nil, fmt.Errorf("-go-load %s: %w", path, err)
	}
	var out []goResult
	for _, s := range goSpecs {
		r := goResult{spec: s, err: "not in -go-load " + path}
		for _, g := range runs {
			if g.Bin == s.bin && g.Bench == s.bench {
				r.results, r.err = parseGoBench(g.Output), g.Err
				break
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], " / ")
}

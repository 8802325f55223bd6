package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
)

// render is the results file: pure, from the measured rows. extra are
// further sections, already rendered (the reliability rows), placed
// before the Go benchmarks.
func render(e env, l layout, o options, rows []loadRow, ctl []controlRow, gob []goResult, extra ...string) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# tsd benchmarks\n\n")
	p("Written by `make bench` (`bin/tsd-bench`, cmd/tsd-bench). Re-run to refresh; numbers are from one run.\n\n")
	p("| | |\n|---|---|\n")
	p("| machine | %s, %s |\n", e.cpu, e.host)
	p("| cores | %d (%s) |\n", e.cores, l.describe())
	p("| memory, kernel | %s, Linux %s |\n", e.mem, e.kernel)
	p("| date | %s |\n", e.date)
	p("| load average at start (1, 5, 15 min) | %s |\n", e.load)
	p("| commit | %s |\n", e.commit)
	p("| driver built with | %s |\n\n", e.goVersion)

	if len(rows) > 0 {
		p("## Streaming through tsd vs a bare Go SSE server\n\n")
		p("Each row: `tsd bench` (the load generator, loadgen/) sends the requests with at most C in flight, %d prompt tokens and exactly %d streamed tokens each "+
			"(max/min tokens + ignore_eos). tsd is `bin/tsd up --headless` with one prefill and one decode ts-fake engine, unpaced "+
			"(`--fake-tokens-per-s 0`, `--fake-log-requests=false`: no log line per request), through the embedded gateway (`/v1/chat/completions` with `stream: true`, or `/generate` streaming). "+
			"The bare server (bench/bare) writes the same chunk shapes with no other work, on the same cores in the same run; tsd and bare take turns case by case, %d times each, and the run with the best tok/s is shown. "+
			"CPU-µs/token is the server process's utime+stime over the run (/proc/PID/stat) divided by the tokens streamed; the engines' CPU is not in it. "+
			"The ratio is tsd tok/s over bare tok/s; the CPU ratio is bare CPU-µs/token over tsd's (tokens per core-second, tsd vs bare), which holds up better than wall rates on a busy machine. The last column is the load generator's own CPU per token (its rusage), to show when the client, not the server, is the limit.\n\n", o.inLen, o.outLen, o.reps)
		if !l.pinned {
			p("**Not pinned** (%s): the load generator and the engines compete with the server for the same cores, so absolute rates are far below what the servers reach on cores of their own, and the ratio is only indicative.\n\n", l.why)
		}
		p("| endpoint | C | requests | tsd tok/s | req/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | tsd CPU-µs/token | tsd cores busy | bare tok/s | bare CPU-µs/token | ratio | CPU ratio | client CPU-µs/token (tsd / bare run) |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rows {
			if r.Target != "tsd" {
				continue
			}
			var bare *loadRow
			for i := range rows {
				if rows[i].Target == "bare" && rows[i].Backend == r.Backend && rows[i].C == r.C {
					bare = &rows[i]
				}
			}
			ep := "chat SSE"
			if r.Backend == "generate" {
				ep = "/generate SSE"
			}
			busy := 0.0
			if r.S.Duration > 0 {
				busy = r.CPU.Seconds() / r.S.Duration
			}
			bareTok, bareCPU, ratio, cpuRatio, client := "–", "–", "–", "–", fmt.Sprintf("%.2f / –", r.perToken(r.ClientCPU))
			if bare != nil && bare.Err == "" && bare.S.OutputThroughput > 0 {
				bareTok = num(bare.S.OutputThroughput)
				bareCPU = fmt.Sprintf("%.2f", bare.cpuPerToken())
				ratio = fmt.Sprintf("%.2f", r.S.OutputThroughput/bare.S.OutputThroughput)
				if c := r.cpuPerToken(); c > 0 {
					cpuRatio = fmt.Sprintf("%.2f", bare.cpuPerToken()/c)
				}
				client = fmt.Sprintf("%.2f / %.2f", r.perToken(r.ClientCPU), bare.perToken(bare.ClientCPU))
			}
			p("| %s | %d | %d | %s | %s | %.2f / %.2f | %.3f / %.3f | %.2f | %.2f | %s | %s | %s | %s | %s |\n",
				ep, r.C, r.N, num(r.S.OutputThroughput), num(r.S.RequestThroughput), r.S.MedianTTFTms, r.S.P99TTFTms,
				r.S.MedianITLms, r.S.P99ITLms, r.cpuPerToken(), busy, bareTok, bareCPU, ratio, cpuRatio, client)
		}
		var errs []string
		for _, r := range rows {
			if r.Err != "" {
				errs = append(errs, fmt.Sprintf("- %s %s C=%d: %s", r.Target, r.Backend, r.C, firstLine(r.Err)))
			}
		}
		if len(errs) > 0 {
			p("\nProblems in this run:\n\n%s\n", strings.Join(errs, "\n"))
		}
		p("\nITL is per SSE chunk as the client reads them; with unpaced engines chunks arrive in bursts, so its median is near 0.\n\n")
	}

	if len(ctl) > 0 {
		p("## Control plane\n\n| measure | value | note |\n|---|---:|---|\n")
		for _, c := range ctl {
			p("| %s | %s | %s |\n", c.name, c.value, c.note)
		}
		p("\n")
	}

	for _, x := range extra {
		b.WriteString(x)
	}

	if len(gob) > 0 {
		p("## Go benchmarks\n\nFrom the prebuilt test binaries in bin/bench/ (`-test.benchtime %s`, some fixed); `make bench-go` runs every benchmark of the module instead.\n\n", o.benchtime)
		if o.goLoad != "" {
			p("These rows were read from `%s`, the saved output of an earlier run of the same binaries on this machine (`-go-load`).\n\n", filepath.Base(o.goLoad))
		}
		p("| what | benchmark | figures |\n|---|---|---|\n")
		for _, g := range gob {
			if len(g.results) == 0 {
				msg := g.err
				if msg == "" {
					msg = "no result lines"
				}
				p("| %s | `%s` | %s |\n", g.spec.what, cell(g.spec.bench), cell(msg))
				continue
			}
			for i, r := range g.results {
				what := g.spec.what
				if i > 0 {
					what = ""
				}
				var figs []string
				for _, u := range r.Units {
					if u == "B/op" || u == "allocs/op" {
						continue
					}
					figs = append(figs, num(r.Metrics[u])+" "+u)
				}
				if a, ok := r.Metrics["allocs/op"]; ok {
					figs = append(figs, num(a)+" allocs/op")
				}
				p("| %s | `%s` | %s |\n", what, cell(strings.TrimPrefix(r.Name, "Benchmark")), cell(strings.Join(figs, ", ")))
			}
			if g.err != "" {
				p("| | | (%s) |\n", cell(g.err))
			}
		}
		p("\n")
	}
	p("## How to run\n\n")
	p("`make bench` builds bin/tsd, bin/ts-fake, bin/tsd-bench and the test binaries in bin/bench/, then runs `bin/tsd-bench -bin bin -out bench/results.md`. " +
		"On a machine without Go, carry those binaries and the repo tree and run from the repo root, e.g. " +
		"`bin/tsd-bench -pin on -requests 20000 -out bench/results.md` (pinning: tsd on cores 0-1, engines on the next 8, load on the last 4).\n")
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }

// num prints a figure with sensible precision and thousands separators.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		s := fmt.Sprintf("%.0f", v)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var out []byte
		for i := range len(s) {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		if neg {
			return "-" + string(out)
		}
		return string(out)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a == 0:
		return "0"
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

package main

// The layouts rows of `make bench`: the shipped four-GPU example profiles
// (profiles/examples/agg-4, pd-1p3d, pd-2p2d, mixed-conditional) on
// ts-fake with its performance model, compared by `tsd bench --layouts`
// under one mixed workload (70% chat turns of about 200 tokens sharing a
// system prompt, 30% RAG prompts of about 6,000) and an SLO, at rates
// that take the aggregated layout past its inter-token objective. Every
// figure is simulated, and the section says what the preset rests on.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tsd-project/tsd/loadgen"
)

// layoutsHeading opens the section (and finds it in an existing file).
const layoutsHeading = "## Layouts compared: aggregated, 1P+3D, 2P+2D and conditional on four simulated GPUs"

// layoutsOptions are the -layouts-* flags.
type layoutsOptions struct {
	skip, only bool
	examples   string // folder of the example profiles
	names      string // which, comma-separated
	preset     string // ts-fake's --fake-perf
	rates      string // tsd bench --request-rate
	requests   int    // per rate
	goodput    string // tsd bench --goodput
	outputLen  int    // output tokens of every request
	plot       string // also copy the PNG here (docs/layouts.png)
}

// defaultLayoutPreset is ts-fake's shipped performance preset
// (docs/perf-model.md §3.1).
const defaultLayoutPreset = "llama-3.1-8b-bf16-h200"

// layoutsReport is what `tsd bench --layouts --output-file` writes (the
// fields this driver reads).
type layoutsReport struct {
	Workload  string `json:"workload"`
	SLO       string `json:"slo"`
	Simulated string `json:"simulated"`
	Winner    string `json:"winner"`
	Reason    string `json:"reason"`
	Layouts   []struct {
		Name   string  `json:"name"`
		Shape  string  `json:"shape"`
		Error  string  `json:"error"`
		Ready  float64 `json:"ready_seconds"`
		Points []struct {
			Rate    any             `json:"request_rate"`
			Summary loadgen.Summary `json:"summary"`
		} `json:"points"`
	} `json:"layouts"`
}

// layoutsRun is the section's figures with how they were made.
type layoutsRun struct {
	Report  layoutsReport
	Argv    []string
	Err     string
	Took    time.Duration
	Options layoutsOptions `json:"-"`
}

// layoutProfile is an example profile made to run here on ts-fake under
// the performance model: the engine is this bin's ts-fake with
// --fake-perf and no startup delay, no EOS (every request streams its
// output length), no log line per request; the model is the demo
// tokenizer; the gateway listens on a free loopback port; the name is the
// bench's own. Everything else (roles, GPUs, policies, disaggregation) is
// the example's.
func layoutProfile(src []byte, name, fake, tokenizer, preset string, port int) ([]byte, error) {
	var p map[string]any
	if err := yaml.Unmarshal(src, &p); err != nil {
		return nil, err
	}
	p["name"] = name
	p["model"] = tokenizer
	p["tokenizer"] = tokenizer
	p["served_model_name"] = "demo"
	eng, _ := p["engine"].(map[string]any)
	if eng == nil {
		eng = map[string]any{}
	}
	eng["command"] = []any{fake, "serve"}
	eng["args"] = []any{"--fake-perf", preset, "--fake-startup", "0", "--fake-eos-id", "-1", "--fake-token-min", "256", "--fake-log-requests=false"}
	p["engine"] = eng
	gw, _ := p["gateway"].(map[string]any)
	if gw == nil {
		gw = map[string]any{}
	}
	gw["host"] = "127.0.0.1"
	gw["port"] = port
	p["gateway"] = gw
	p["restart"] = map[string]any{"stop_grace": "10s"}
	return yaml.Marshal(p)
}

// layoutsArgv is the `tsd bench --layouts` command line of the rows.
func layoutsArgv(o layoutsOptions, tsd string, profiles []string, jsonOut, png string) []string {
	argv := []string{tsd, "bench", "--layouts", strings.Join(profiles, ","), "--fake-gpus", "4",
		"--dataset-name", "mixed", "--num-prompts", strconv.Itoa(o.requests),
		"--mixed-chat-output-len", strconv.Itoa(o.outputLen), "--mixed-rag-output-len", strconv.Itoa(o.outputLen),
		"--request-rate", o.rates, "--seed", "1", "--output-file", jsonOut, "--plot", png, "--disable-tqdm"}
	if o.goodput != "" {
		argv = append(argv, "--goodput", o.goodput)
	}
	return argv
}

// runLayouts writes the example profiles into work and runs the
// comparison; the PNG is copied to o.plot when set.
func runLayouts(o layoutsOptions, tsd, fake, tokenizer, work string) layoutsRun {
	run := layoutsRun{Options: o}
	dir := filepath.Join(work, "layouts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		run.Err = err.Error()
		return run
	}
	tok, err := filepath.Abs(tokenizer)
	if err != nil {
		run.Err = err.Error()
		return run
	}
	var paths []string
	for _, n := range strings.Split(o.names, ",") {
		n = strings.TrimSpace(n)
		src, err := os.ReadFile(filepath.Join(o.examples, n+".yaml"))
		if err != nil {
			run.Err = fmt.Sprintf("example profile: %v", err)
			return run
		}
		port, err := freePort()
		if err != nil {
			run.Err = err.Error()
			return run
		}
		out, err := layoutProfile(src, "bench-"+n, fake, tok, o.preset, port)
		if err != nil {
			run.Err = fmt.Sprintf("%s.yaml: %v", n, err)
			return run
		}
		path := filepath.Join(dir, n+".yaml")
		if err := os.WriteFile(path, out, 0o644); err != nil {
			run.Err = err.Error()
			return run
		}
		paths = append(paths, path)
	}
	jsonOut, png := filepath.Join(dir, "layouts.json"), filepath.Join(dir, "layouts.png")
	run.Argv = layoutsArgv(o, tsd, paths, jsonOut, png)
	fmt.Printf("layouts: %s\n", strings.Join(run.Argv[1:], " "))
	start := time.Now()
	cmd := exec.Command(run.Argv[0], run.Argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// The profiles name ts-fake by path; tsd bench starts `tsd up` itself.
	err = cmd.Run()
	run.Took = time.Since(start)
	raw, rerr := os.ReadFile(jsonOut)
	if rerr != nil {
		run.Err = fmt.Sprintf("tsd bench --layouts: %v (no results: %v)", err, rerr)
		return run
	}
	if err := json.Unmarshal(raw, &run.Report); err != nil {
		run.Err = fmt.Sprintf("read %s: %v", jsonOut, err)
		return run
	}
	if err != nil {
		run.Err = fmt.Sprintf("tsd bench --layouts: %v", err)
	}
	if o.plot != "" {
		if b, err := os.ReadFile(png); err == nil {
			if err := os.WriteFile(o.plot, b, 0o644); err != nil {
				run.Err = fmt.Sprintf("copy the plot to %s: %v", o.plot, err)
			} else {
				fmt.Println("wrote", o.plot)
			}
		}
	}
	return run
}

// renderLayouts is the results section: the goodput of every layout at
// every rate side by side, the detail per point, the winner and why, the
// first rate where the aggregated layout broke its inter-token objective,
// and what the simulated figures rest on.
func renderLayouts(r layoutsRun, e env) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", layoutsHeading)
	if r.Err != "" && len(r.Report.Layouts) == 0 {
		p("Not measured: %s\n\n", firstLine(r.Err))
		return b.String()
	}
	rep := r.Report
	p("**Simulated figures** %s: ts-fake's performance model times every engine step as the preset's GPU would (docs/perf-model.md). "+
		"These are not GPU measurements, and the model leaves out what docs/perf-model.md §4 lists.\n\n", strings.TrimPrefix(rep.Simulated, "simulated "))
	p("`tsd bench --layouts` (cmd/tsd/bench_layouts.go) brings each of the shipped example profiles up in turn on the same four simulated GPUs "+
		"(`tsd up --headless --fake-gpus 4`; profiles/examples with ts-fake under `--fake-perf %s`, no startup delay, no EOS), warms it, "+
		"sends the same requests at the same Poisson times at each rate, and stops it. Workload: %s. "+
		"SLO (vLLM's `--goodput`): %s; goodput is the requests per second that met every objective (DistServe's definition). "+
		"Commit %s, on %s (%d cores, load average %s at the start; the modelled latencies also carry this machine's CPU delays); the run took %s.\n\n",
		r.Options.preset, rep.Workload, orDash(rep.SLO), e.commit, orDash(e.cpu), e.cores, orDash(e.load), fmt.Sprintf("%.0f s", r.Took.Seconds()))
	rates := layoutRates(rep)
	p("Goodput (req/s) by offered rate:\n\n| rate (req/s) |")
	for _, l := range rep.Layouts {
		p(" %s (%s) |", l.Name, l.Shape)
	}
	p("\n|---:|")
	for range rep.Layouts {
		p("---:|")
	}
	p("\n")
	for _, rate := range rates {
		p("| %s |", rate)
		best := -1.0
		for _, l := range rep.Layouts {
			if pt := pointAt(l.Points, rate); pt != nil && pt.Summary.RequestGoodput != nil {
				best = math.Max(best, *pt.Summary.RequestGoodput)
			}
		}
		for _, l := range rep.Layouts {
			pt := pointAt(l.Points, rate)
			switch {
			case pt == nil:
				p(" – |")
			case pt.Summary.RequestGoodput == nil:
				p(" %.2f (throughput) |", pt.Summary.RequestThroughput)
			case *pt.Summary.RequestGoodput == best && best > 0:
				p(" **%.2f** |", *pt.Summary.RequestGoodput)
			default:
				p(" %.2f |", *pt.Summary.RequestGoodput)
			}
		}
		p("\n")
	}
	p("\n| layout | rate | req/s | goodput | met SLO | TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms | TPOT p50 / p99 ms | failed |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range rep.Layouts {
		if len(l.Points) == 0 {
			p("| %s (%s) | – | – | – | – | – | – | – | %s |\n", l.Name, l.Shape, cell(orDash(l.Error)))
		}
		for _, pt := range l.Points {
			s := pt.Summary
			good, met := "–", "–"
			if s.Goodput != nil {
				good, met = fmt.Sprintf("%.2f", s.Goodput.Goodput), fmt.Sprintf("%.0f%%", 100*s.Goodput.Attainment)
			}
			p("| %s (%s) | %s | %.2f | %s | %s | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f | %.1f / %.1f | %d |\n", l.Name, l.Shape, rateText(pt.Rate),
				s.RequestThroughput, good, met, s.MedianTTFTms, s.P90TTFTms, s.P99TTFTms, s.MedianITLms, s.P90ITLms, s.P99ITLms, s.MedianTPOTms, s.P99TPOTms, s.Failed)
		}
	}
	p("\n")
	if line := aggregatedBreak(rep); line != "" {
		p("%s\n\n", line)
	}
	if rep.Winner != "" {
		p("**Winner: %s.** Why: %s.\n\n", rep.Winner, strings.TrimSuffix(rep.Reason, "."))
	} else {
		p("**No winner.** %s.\n\n", strings.TrimSuffix(rep.Reason, "."))
	}
	if rep.Winner != "" && !strings.Contains(rep.Winner, "conditional") {
		p("The conditional layout does not win here. The reason above is what was measured, on the model and on this machine's cores; " +
			"the preset was not tuned to change it (docs/perf-model.md §5 works the same mix through the model's formulas alone).\n\n")
	}
	for _, l := range rep.Layouts {
		if l.Error != "" {
			p("- %s: %s\n", l.Name, cell(firstLine(l.Error)))
		}
	}
	if r.Err != "" {
		p("\nThe run reported: %s\n", cell(firstLine(r.Err)))
	}
	p("\n")
	return b.String()
}

type layoutPointJSON = struct {
	Rate    any             `json:"request_rate"`
	Summary loadgen.Summary `json:"summary"`
}

// layoutRates are the rates of the sweep, in order, as printed.
func layoutRates(rep layoutsReport) []string {
	var out []string
	for _, l := range rep.Layouts {
		for _, pt := range l.Points {
			if r := rateText(pt.Rate); !contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

func pointAt(ps []layoutPointJSON, rate string) *layoutPointJSON {
	for i := range ps {
		if rateText(ps[i].Rate) == rate {
			return &ps[i]
		}
	}
	return nil
}

func rateText(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// breakShare: an objective counts broken at a rate when more than this
// share of the requests missed it (DistServe's 90% attainment target).
const breakShare = 0.1

// aggregatedBreak says at which rate the aggregated layout first broke
// the time-per-token objective: the rate the comparison is about.
func aggregatedBreak(rep layoutsReport) string {
	for _, l := range rep.Layouts {
		if !strings.HasPrefix(l.Shape, "aggregated") {
			continue
		}
		for _, pt := range l.Points {
			g := pt.Summary.Goodput
			if g == nil || g.Broke["tpot"] <= breakShare {
				continue
			}
			return fmt.Sprintf("%s (%s) breaks the TPOT objective (more than %.0f%% of its requests miss it) from %s req/s: %.0f%% missed it there, ITL p99 %.0f ms.",
				l.Name, l.Shape, 100*breakShare, rateText(pt.Rate), 100*g.Broke["tpot"], pt.Summary.P99ITLms)
		}
		return fmt.Sprintf("%s (%s) kept the TPOT objective for %.0f%% of its requests or more at every rate of this run: raise -layouts-rates to find where it breaks.",
			l.Name, l.Shape, 100*(1-breakShare))
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// spliceSection replaces the section that starts with heading in doc
// (up to the next "## " heading) by section, or appends it.
func spliceSection(doc, heading, section string) string {
	i := strings.Index(doc, heading)
	if i < 0 {
		return strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	rest := doc[i+len(heading):]
	j := strings.Index(rest, "\n## ")
	if j < 0 {
		return doc[:i] + section
	}
	return doc[:i] + section + strings.TrimLeft(rest[j:], "\n")
}

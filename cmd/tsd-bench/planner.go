package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/perfmodel"
	"github.com/tsd-project/tsd/internal/percentile"
	"github.com/tsd-project/tsd/snapshot"
)

// The SLO planner's rows (docs/architecture.md §4.5): four simulated GPUs
// of ts-fake under the performance model's shipped preset, a two-phase
// load (short chat turns, then long prompts at a rate one prefill cannot
// serve within the TTFT target), run against a deployment whose planner
// acts (slo: ttft_p90 1s, itl_p90 50ms, mode act, interval 5s) and
// against each static PD layout of the same GPUs, same load. Per run:
// SLO-breach minutes (5 s bins, by arrival, whose TTFT p90 or ITL p90
// misses its target), failed requests; for the planner, when it changed
// the layout after the shift, when TTFT p90 was back under target, and
// whether it changed anything in a steady phase.

type plannerBench struct {
	skip, only           bool
	phase1, phase2       time.Duration
	chatRate, longRate   float64
	chatPrompt, chatOut  int
	longPrompt, longOut  int
	interval, cooldown   time.Duration
	ttft, itl            time.Duration
	preset, fakeStartup  string
	breachIntervals      int
	runs                 string // which runs: "planner" and static layouts "P+D"
	from                 string // render these runs' JSON instead of running
	startPrefill, startD int
}

func (b *plannerBench) flags(fs *flag.FlagSet) {
	fs.BoolVar(&b.skip, "skip-planner", false, "skip the SLO planner rows")
	fs.BoolVar(&b.only, "planner-only", false, "run only the SLO planner rows (they write -out on their own)")
	fs.DurationVar(&b.phase1, "planner-phase1", 60*time.Second, "planner rows: the chat phase")
	fs.DurationVar(&b.phase2, "planner-phase2", 120*time.Second, "planner rows: the long-prompt phase")
	fs.Float64Var(&b.chatRate, "planner-chat-rate", 34, "planner rows: chat requests per second (Poisson) in phase 1")
	fs.Float64Var(&b.longRate, "planner-long-rate", 9, "planner rows: long-prompt requests per second (Poisson) in phase 2")
	fs.IntVar(&b.chatPrompt, "planner-chat-prompt", 200, "planner rows: chat prompt tokens (±30%)")
	fs.IntVar(&b.chatOut, "planner-chat-output", 800, "planner rows: chat output tokens")
	fs.IntVar(&b.longPrompt, "planner-long-prompt", 6000, "planner rows: long prompt tokens (±30%)")
	fs.IntVar(&b.longOut, "planner-long-output", 100, "planner rows: long-prompt output tokens")
	fs.DurationVar(&b.interval, "planner-interval", 5*time.Second, "planner rows: slo.interval (and the breach bins)")
	fs.DurationVar(&b.cooldown, "planner-cooldown", 30*time.Second, "planner rows: slo.cooldown")
	fs.IntVar(&b.breachIntervals, "planner-breach", 2, "planner rows: slo.breach")
	fs.StringVar(&b.preset, "planner-preset", "llama-3.1-8b-bf16-h200", "planner rows: ts-fake's performance preset")
	fs.StringVar(&b.fakeStartup, "planner-fake-startup", "2s", "planner rows: ts-fake's startup (a real engine takes minutes: see the results' note)")
	fs.StringVar(&b.runs, "planner-runs", "planner,1+3,2+2,3+1", "planner rows: the runs, in order: planner (starts 1P+3D) and static layouts P+D (a device call too short for all runs them in parts, with -json each)")
	fs.StringVar(&b.from, "planner-from", "", "planner rows: render the runs of these -json files (comma-separated, from -planner-only runs) instead of running")
	b.ttft, b.itl = time.Second, 50*time.Millisecond
	b.startPrefill, b.startD = 1, 3
}

// plannerRun is one deployment under the two-phase load.
type plannerRun struct {
	Name              string
	Prefill, Decode   int
	Planner           bool
	Bins              []plannerBin
	Sent, Failed      int
	FailSample        string
	BreachBins        int
	BreachMinutes     float64
	Changes           []snapshot.PlannerChange // the planner's, as it reported them
	ChangeAt          []float64                // seconds since the load began
	FirstAfterShift   float64                  // seconds after the shift the first change began (-1: none)
	RecoveredBin      int                      // bins after the shift until TTFT p90 stayed under target (-1: never)
	SteadyChanges     int                      // changes in phase 1 and after recovery
	FinalLayout, Note string
	Err               string
	// Events are tsd's planner lines, "+SECONDS line" since the load began;
	// Decisions every decision the status showed (polled each interval).
	Events, Decisions []string
}

// plannerBin is one bin of requests by arrival.
type plannerBin struct {
	Start         float64 // seconds since the load began
	Requests      int
	TTFT, ITL     time.Duration // p90s
	Breach        bool
	Failed        int
	LayoutAtStart string
}

// plannerReq is one request's outcome.
type plannerReq struct {
	at   time.Duration // since the load began
	ttft time.Duration
	gaps []time.Duration
	err  string
}

func (b *plannerBench) profile(name, fake string, l layout, port, prefill, decode int, slo bool) string {
	gpus := func(first, n int) string {
		if n == 1 {
			return fmt.Sprintf("[%d]", first)
		}
		sets := make([]string, n)
		for i := range sets {
			sets[i] = fmt.Sprintf("[%d]", first+i)
		}
		return "[" + strings.Join(sets, ", ") + "]"
	}
	var s strings.Builder
	fmt.Fprintf(&s, `name: %s
model: ./model
engine:
  command: [%s]
  args: [--fake-perf, %s, --fake-startup, %s, --fake-eos-id, "-1", --fake-log-requests=false]
gateway:
  host: 127.0.0.1
  port: %d
restart:
  stop_grace: 10s
  drain_timeout: 60s
roles:
  - {name: prefill, kind: prefill, replicas: %d, gpus: %s}
  - {name: decode, kind: decode, replicas: %d, gpus: %s}
`, name, l.engineCommand(fake), b.preset, b.fakeStartup, port, prefill, gpus(0, prefill), decode, gpus(prefill, decode))
	if slo {
		fmt.Fprintf(&s, "slo:\n  ttft_p90: %s\n  itl_p90: %s\n  mode: act\n  interval: %s\n  cooldown: %s\n  breach: %d\n",
			b.ttft, b.itl, b.interval, b.cooldown, b.breachIntervals)
	}
	return s.String()
}

// runPlannerRows runs the planner and each static layout under the same
// load, one after another.
func runPlannerRows(b plannerBench, l layout, tsd, fake, work string) []plannerRun {
	type spec struct {
		name        string
		p, d        int
		withPlanner bool
	}
	var specs []spec
	for _, s := range strings.Split(b.runs, ",") {
		if strings.TrimSpace(s) == "planner" {
			specs = append(specs, spec{fmt.Sprintf("planner (starts %dP+%dD)", b.startPrefill, b.startD), b.startPrefill, b.startD, true})
			continue
		}
		ps, ds, ok := strings.Cut(strings.TrimSpace(s), "+")
		p, err1 := strconv.Atoi(ps)
		d, err2 := strconv.Atoi(ds)
		if !ok || err1 != nil || err2 != nil || p < 1 || d < 1 {
			continue
		}
		specs = append(specs, spec{fmt.Sprintf("static %dP+%dD", p, d), p, d, false})
	}
	var out []plannerRun
	for i, s := range specs {
		fmt.Printf("planner rows: %s (%v + %v of load)\n", s.name, b.phase1, b.phase2)
		r := b.run(l, tsd, fake, work, fmt.Sprintf("slo%d", i), s.p, s.d, s.withPlanner)
		r.Name = s.name
		out = append(out, r)
	}
	return out
}

func (b *plannerBench) run(l layout, tsd, fake, work, name string, prefill, decode int, withPlanner bool) plannerRun {
	r := plannerRun{Prefill: prefill, Decode: decode, Planner: withPlanner, FirstAfterShift: -1, RecoveredBin: -1}
	d, err := startRelDeployment4(l, tsd, work, name, prefill+decode, func(port int) string {
		return b.profile(name, fake, l, port, prefill, decode, withPlanner)
	})
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer d.srv.stop(60 * time.Second)
	// The layout each bin starts under (the planner's only; statics keep theirs).
	var layoutMu sync.Mutex
	layouts := map[int]string{}
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	start := time.Now()
	var lastDecision time.Time
	go func() {
		defer close(watchDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if s, err := d.status(tsd); err == nil {
				layoutMu.Lock()
				if bin := int(time.Since(start) / b.interval); layouts[bin] == "" {
					layouts[bin] = layoutOfSnap(s)
				}
				if p := s.Planner; p != nil && !p.Last.Equal(lastDecision) && !p.Last.IsZero() {
					lastDecision = p.Last
					r.Decisions = append(r.Decisions, fmt.Sprintf("+%.1f %s: %s", p.Last.Sub(start).Seconds(), p.Code, p.Reason))
				}
				layoutMu.Unlock()
			}
			select {
			case <-stopWatch:
				return
			case <-tick.C:
			}
		}
	}()
	from := d.srv.count()
	reqs := b.load(d.base, start)
	close(stopWatch)
	<-watchDone
	d.srv.mu.Lock()
	for i := from; i < len(d.srv.lines); i++ {
		if _, msg, ok := strings.Cut(d.srv.lines[i], "planner: "); ok {
			r.Events = append(r.Events, fmt.Sprintf("+%.1f %s", d.srv.stamp[i].Sub(start).Seconds(), msg))
		}
	}
	d.srv.mu.Unlock()
	r.Sent = len(reqs)
	for _, q := range reqs {
		if q.err != "" {
			r.Failed++
			if r.FailSample == "" {
				r.FailSample = q.err
			}
		}
	}
	shift := b.phase1.Seconds()
	total := b.phase1 + b.phase2
	nb := int(total / b.interval)
	for i := 0; i < nb; i++ {
		bin := plannerBin{Start: float64(i) * b.interval.Seconds(), LayoutAtStart: layouts[i]}
		var ttfts, gaps []time.Duration
		for _, q := range reqs {
			if int(q.at/b.interval) != i {
				continue
			}
			bin.Requests++
			if q.err != "" {
				bin.Failed++
				continue
			}
			ttfts = append(ttfts, q.ttft)
			gaps = append(gaps, q.gaps...)
		}
		bin.TTFT, bin.ITL = percentile.NearestRankOf(ttfts, 90), percentile.NearestRankOf(gaps, 90)
		bin.Breach = bin.TTFT > b.ttft || bin.ITL > b.itl || bin.Failed > 0
		if bin.Breach {
			r.BreachBins++
		}
		r.Bins = append(r.Bins, bin)
	}
	r.BreachMinutes = float64(r.BreachBins) * b.interval.Minutes()
	s, err := d.status(tsd)
	if err == nil {
		r.FinalLayout = layoutOfSnap(s)
		if s.Planner != nil {
			r.Changes = s.Planner.Recent
		}
	}
	shiftBin := int(b.phase1 / b.interval)
	for _, c := range r.Changes {
		at := c.Time.Sub(start).Seconds()
		r.ChangeAt = append(r.ChangeAt, at)
		if at >= shift && r.FirstAfterShift < 0 {
			r.FirstAfterShift = at - shift
		}
	}
	// Recovered: the first bin after the shift from which every bin of
	// the phase has TTFT p90 under target.
	for k := shiftBin; k < len(r.Bins); k++ {
		ok := true
		for _, bin := range r.Bins[k:] {
			ok = ok && bin.TTFT <= b.ttft && bin.Requests > 0
		}
		if ok {
			r.RecoveredBin = k - shiftBin
			break
		}
	}
	for _, at := range r.ChangeAt {
		recovered := r.RecoveredBin >= 0 && at >= shift+float64(r.RecoveredBin)*b.interval.Seconds()
		if at < shift || recovered {
			r.SteadyChanges++
		}
	}
	return r
}

// layoutOfSnap is "1P+3D" of a snapshot's ready roles.
func layoutOfSnap(s snapshot.Snapshot) string {
	var p, d int
	for _, r := range s.Roles {
		switch r.Kind {
		case "prefill":
			p++
		case "decode":
			d++
		}
	}
	return fmt.Sprintf("%dP+%dD", p, d)
}

// startRelDeployment4 is startRelDeployment for any role names: it waits
// until n roles are ready, on four simulated GPUs.
func startRelDeployment4(l layout, tsd, work, name string, n int, profile func(port int) string) (*deployment, error) {
	dir, port, err := writeProfile(work, name, profile)
	if err != nil {
		return nil, err
	}
	srv, err := startServer(dir, l.wrap(l.tsd, upArgvGPUs(tsd, "p.yaml", 4)...))
	if err != nil {
		return nil, err
	}
	d := &deployment{srv: srv, dir: dir, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	from := 0
	for range n {
		if from, _, err = srv.waitLine(from, 90*time.Second, "→ ready"); err != nil {
			srv.stop(15 * time.Second)
			return nil, err
		}
	}
	if err := waitReady(d.base, 30*time.Second); err != nil {
		srv.stop(15 * time.Second)
		return nil, err
	}
	return d, nil
}

// load sends the two phases open-loop (Poisson arrivals, one goroutine
// per request) and returns every request once all have ended.
func (b *plannerBench) load(base string, start time.Time) []plannerReq {
	hc := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	rng := rand.New(rand.NewPCG(7, 11))
	var mu sync.Mutex
	var out []plannerReq
	var wg sync.WaitGroup
	at := time.Duration(0)
	seq := 0
	for {
		rate, prompt, output := b.chatRate, b.chatPrompt, b.chatOut
		if at >= b.phase1 {
			rate, prompt, output = b.longRate, b.longPrompt, b.longOut
		}
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= b.phase1+b.phase2 {
			break
		}
		n := int(float64(prompt) * (0.7 + 0.6*rng.Float64()))
		seq++
		ids := make([]int, n)
		for i := range ids {
			ids[i] = 3 + (seq*7919+i*31)%900
		}
		ids[0], ids[1] = 3+seq%900, 3+seq/900%900 // a prompt of its own: no prefix cache hit

		time.Sleep(time.Until(start.Add(at)))
		wg.Add(1)
		go func(at time.Duration) {
			defer wg.Done()
			q := sendPlannerReq(hc, base, ids, output)
			q.at = at
			mu.Lock()
			out = append(out, q)
			mu.Unlock()
		}(at)
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b plannerReq) int { return int(a.at - b.at) })
	return out
}

// sendPlannerReq streams one /generate request, recording its TTFT and
// the per-token gaps after the first token.
func sendPlannerReq(hc *http.Client, base string, ids []int, output int) plannerReq {
	body, _ := json.Marshal(map[string]any{"input_ids": ids, "stream": true,
		"sampling_params": map[string]any{"max_new_tokens": output, "min_new_tokens": output, "ignore_eos": true}})
	start := time.Now()
	resp, err := hc.Post(base+"/generate", "application/json", bytes.NewReader(body))
	if err != nil {
		return plannerReq{err: err.Error()}
	}
	defer resp.Body.Close()
	var q plannerReq
	last := time.Time{}
	got := 0
	finished, err := readGenerate(resp, func(ev genEvent) {
		now := time.Now()
		if n := len(ev.OutputIDs); n > 0 {
			if last.IsZero() {
				q.ttft = now.Sub(start)
			} else {
				gap := now.Sub(last) / time.Duration(n)
				for range n {
					q.gaps = append(q.gaps, gap)
				}
			}
			got += n
			last = now
		}
	})
	if err != nil {
		return plannerReq{err: err.Error()}
	}
	if !finished {
		return plannerReq{err: fmt.Sprintf("stream ended without a finish after %d tokens", got)}
	}
	return q
}

// renderPlanner is the planner's section of the results.
func renderPlanner(b plannerBench, runs []plannerRun) string {
	if len(runs) == 0 {
		return ""
	}
	var s strings.Builder
	desc := b.preset
	if p, err := perfmodel.Load(b.preset); err == nil {
		desc = p.Describe()
	}
	fmt.Fprintf(&s, "\n## SLO planner (simulated)\n\n")
	fmt.Fprintf(&s, "Four simulated GPUs of ts-fake under the performance model (%s). **Every figure here is simulated.** ", desc)
	fmt.Fprintf(&s, "Load, the same for every row: %v of chat turns (%d prompt tokens ±30%%, %d output, %.0f req/s, Poisson), then %v of long prompts (%d tokens ±30%%, %d output, %.1f req/s). ",
		b.phase1, b.chatPrompt, b.chatOut, b.chatRate, b.phase2, b.longPrompt, b.longOut, b.longRate)
	fmt.Fprintf(&s, "Targets: TTFT p90 ≤ %v, ITL p90 ≤ %v; the planner row runs `slo: {ttft_p90: %v, itl_p90: %v, mode: act, interval: %v, cooldown: %v, breach: %d}`. ",
		b.ttft, b.itl, b.ttft, b.itl, b.interval, b.cooldown, b.breachIntervals)
	fmt.Fprintf(&s, "A bin is %v of requests by arrival; it breaches when its TTFT p90 or ITL p90 (client-side) misses the target or a request failed. ts-fake starts in %s (a real engine takes minutes, so a real move takes that much longer).\n\n", b.interval, b.fakeStartup)
	fmt.Fprintln(&s, "| run | SLO-breach minutes | breach bins | requests | failed | layout changes (s after start) | final layout |")
	fmt.Fprintln(&s, "|---|---|---|---|---|---|---|")
	best, worst := -1, -1
	for i, r := range runs {
		if r.Err != "" {
			fmt.Fprintf(&s, "| %s | not run: %s | | | | | |\n", r.Name, cell(firstLine(r.Err)))
			continue
		}
		if !r.Planner {
			if best < 0 || r.BreachMinutes < runs[best].BreachMinutes {
				best = i
			}
			if worst < 0 || r.BreachMinutes > runs[worst].BreachMinutes {
				worst = i
			}
		}
		var ch []string
		for _, at := range r.ChangeAt {
			ch = append(ch, fmt.Sprintf("%.0f", at))
		}
		changes := strings.Join(ch, ", ")
		if !r.Planner {
			changes = "static"
		} else if changes == "" {
			changes = "none"
		}
		fails := strconv.Itoa(r.Failed)
		if r.FailSample != "" {
			fails += " (" + cell(r.FailSample) + ")"
		}
		fmt.Fprintf(&s, "| %s | %.2f | %d of %d | %d | %s | %s | %s |\n", r.Name, r.BreachMinutes, r.BreachBins, len(r.Bins), r.Sent, fails, changes, r.FinalLayout)
	}
	for _, r := range runs {
		if !r.Planner || r.Err != "" {
			continue
		}
		fmt.Fprintln(&s)
		iv := b.interval.Seconds()
		first := "no change after the shift"
		if r.FirstAfterShift >= 0 {
			first = fmt.Sprintf("%.1f s after the shift (%.1f intervals)", r.FirstAfterShift, r.FirstAfterShift/iv)
		}
		rec := "never"
		if r.RecoveredBin >= 0 {
			rec = fmt.Sprintf("from bin %d after the shift on", r.RecoveredBin)
		}
		fmt.Fprintln(&s, "| planner target | measured | verdict |")
		fmt.Fprintln(&s, "|---|---|---|")
		fmt.Fprintf(&s, "| changes the layout within 3 intervals of the shift | %s | %s |\n", first, verdict(r.FirstAfterShift >= 0 && r.FirstAfterShift <= 3*iv))
		fmt.Fprintf(&s, "| TTFT p90 back under target within 5 intervals | %s | %s |\n", rec, verdict(r.RecoveredBin >= 0 && r.RecoveredBin <= 5))
		fmt.Fprintf(&s, "| 0 requests fail across the moves | %d of %d failed | %s |\n", r.Failed, r.Sent, verdict(r.Failed == 0))
		fmt.Fprintf(&s, "| no change in a steady phase | %d change(s) in phase 1 or after recovery | %s |\n", r.SteadyChanges, verdict(r.SteadyChanges == 0))
		if best >= 0 {
			fmt.Fprintf(&s, "| SLO-breach minutes against the static layouts | %.2f; best static (%s) %.2f, worst (%s) %.2f | %s |\n", r.BreachMinutes,
				runs[best].Name, runs[best].BreachMinutes, runs[worst].Name, runs[worst].BreachMinutes,
				map[bool]string{true: "at or below the worst", false: "above the worst"}[r.BreachMinutes <= runs[worst].BreachMinutes])
		}
		fmt.Fprintln(&s, "\nThe planner's decisions as tsd status showed them each interval (seconds since the load began):")
		fmt.Fprintln(&s, "\n```")
		for _, e := range r.Decisions {
			fmt.Fprintln(&s, e)
		}
		fmt.Fprintln(&s, "```")
		fmt.Fprintln(&s, "\nThe planner's events:")
		fmt.Fprintln(&s, "\n```")
		for _, e := range r.Events {
			fmt.Fprintln(&s, e)
		}
		fmt.Fprintln(&s, "```")
		fmt.Fprintln(&s, "\nPer bin (planner run): start s, layout at the bin's start, requests, TTFT p90, ITL p90, breach")
		fmt.Fprintln(&s, "\n```")
		for _, bin := range r.Bins {
			mark := ""
			if bin.Breach {
				mark = "BREACH"
			}
			fmt.Fprintf(&s, "%5.0f  %-6s %4d  ttft %-8s itl %-7s %s\n", bin.Start, bin.LayoutAtStart, bin.Requests, fmtDur(bin.TTFT), fmtDur(bin.ITL), mark)
		}
		fmt.Fprintln(&s, "```")
	}
	return s.String()
}

// writePlannerOnly runs only the planner rows (-planner-only) and writes
// them to -out.
func writePlannerOnly(o options, l layout, tsd, fake, work string) error {
	var runs []plannerRun
	if o.planner.from == "" {
		runs = runPlannerRows(o.planner, l, tsd, fake, work)
	}
	for _, f := range strings.Split(o.planner.from, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var more []plannerRun
		if err := json.Unmarshal(data, &more); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		runs = append(runs, more...)
	}
	md := "# tsd bench: the SLO planner\n" + renderPlanner(o.planner, runs)
	if err := writeResults(o.out, md); err != nil {
		return err
	}
	if o.jsonOut != "" {
		data, err := json.MarshalIndent(runs, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

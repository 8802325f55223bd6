package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tsd-project/tsd/loadgen"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

// `tsd bench --layouts a.yaml,b.yaml,...` runs one workload against each
// layout in turn on the same GPUs: each profile is brought up by this
// binary's own `tsd up --headless` (a child in its own process group that
// dies with us), warmed, measured at every --request-rate, and stopped
// before the next starts. `tsd bench --request-rate 1,2,4` against a
// running deployment is the same sweep with one layout that is already
// up. The comparison (loadgen.Compare) names the layout with the highest
// goodput and why.

// layoutReport is the JSON `--output-file` gets for a sweep or a
// comparison.
type layoutReport struct {
	Date     string `json:"date"`
	Backend  string `json:"backend"`
	Workload string `json:"workload"`
	SLO      string `json:"slo,omitempty"` // --goodput, as ttft<=1000ms tpot<=50ms
	// Simulated is set when ts-fake made the figures: what they rest on.
	Simulated string         `json:"simulated,omitempty"`
	Layouts   []layoutResult `json:"layouts"`
	Winner    string         `json:"winner,omitempty"`
	Reason    string         `json:"reason"`
}

// layoutResult is one layout's sweep.
type layoutResult struct {
	Name      string        `json:"name"`
	Profile   string        `json:"profile,omitempty"`
	Shape     string        `json:"shape,omitempty"`
	Simulated string        `json:"simulated,omitempty"`
	Error     string        `json:"error,omitempty"` // why it has no (or fewer) points
	Ready     float64       `json:"ready_seconds,omitempty"`
	Points    []layoutPoint `json:"points"`

	shape loadgen.Shape
	sim   simulation
}

// layoutPoint is one rate of a sweep: upstream's summary with goodput.
type layoutPoint struct {
	Rate           any             `json:"request_rate"` // a number, or "inf"
	MaxConcurrency int             `json:"max_concurrency,omitempty"`
	Summary        loadgen.Summary `json:"summary"`

	rate float64
}

// runLayouts is `tsd bench --layouts`.
func (c benchCmd) runLayouts(backend loadgen.Backend, rates []float64, slo loadgen.SLO) error {
	if c.Target != "" || c.BaseURL != "" || c.Host != "" || c.Port != 0 {
		return errors.New("--layouts starts its own deployments: drop the target (a profile, name, --base-url or --host/--port)")
	}
	specs, err := loadLayouts(c.Layouts)
	if err != nil {
		return err
	}
	count, err := c.tokenCounter(specs[0].plan.Tokenizer)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	first, err := c.dataset(c.Seed, count)
	if err != nil {
		return err
	}
	perRate := countRequests(first)
	rep := layoutReport{Date: time.Now().UTC().Format("20060102-150405"), Backend: string(backend), Workload: c.workloadText(perRate), SLO: slo.String()}
	var sims []simulation
	for _, s := range specs {
		sims = append(sims, s.sim)
	}
	rep.Simulated = runNote(sims)
	fmt.Printf("Comparing %d layouts: %s\n", len(specs), rep.Workload)
	fmt.Printf("Rates %s, %s%s\n", c.RequestRate, concText(c.MaxConcurrency), sloSuffix(slo))
	if rep.Simulated != "" {
		fmt.Println(rep.Simulated)
	}
	prog := newSweepProgress(newProgress(os.Stderr, isTerminal(os.Stderr) && !c.DisableTqdm), len(specs)*len(rates)*perRate)
	warm := c.NumWarmups
	if warm == 0 {
		warm = defaultLayoutWarmups
	}
	for i, spec := range specs {
		res := layoutResult{Name: spec.name, Profile: spec.profile, Shape: spec.shape.String(), Simulated: spec.sim.Note(), shape: spec.shape, sim: spec.sim}
		if ctx.Err() == nil {
			prog.note(fmt.Sprintf("[%d/%d] %s (%s): starting", i+1, len(specs), spec.name, spec.shape))
			c.benchLayout(ctx, backend, spec, rates, slo, count, warm, prog, &res)
		}
		if len(res.Points) < len(rates) {
			prog.skip((len(rates) - len(res.Points)) * perRate)
		}
		rep.Layouts = append(rep.Layouts, res)
	}
	prog.finish()
	return c.report(rep, slo, ctx.Err() != nil)
}

// defaultLayoutWarmups: requests each layout is warmed with when
// --num-warmups is 0 (a cold engine's first requests pay for caches and
// connections no steady state pays for).
const defaultLayoutWarmups = 8

// benchLayout brings one layout up, warms and measures it, and stops it;
// what went wrong is the result's Error.
func (c benchCmd) benchLayout(ctx context.Context, backend loadgen.Backend, spec layoutSpec, rates []float64, slo loadgen.SLO, count loadgen.TokenCounter, warm int, prog *sweepProgress, res *layoutResult) {
	start := time.Now()
	d, err := startLayout(ctx, spec, c.FakeGPUs, c.LayoutTimeout)
	if err != nil {
		res.Error = err.Error()
		prog.note(fmt.Sprintf("  %s did not come up: %v", spec.name, err))
		return
	}
	defer func() {
		prog.note(fmt.Sprintf("  %s: stopping", spec.name))
		if err := d.stop(2 * time.Minute); err != nil {
			prog.note(fmt.Sprintf("  %s: %v", spec.name, err))
			if res.Error == "" {
				res.Error = err.Error()
			}
		}
	}()
	res.Ready = time.Since(start).Seconds()
	t := benchTarget{base: d.url, profKeyEnv: spec.plan.Gateway.APIKeyEnv, model: spec.plan.ServedModelName}
	if err := c.resolveModel(ctx, &t); err != nil {
		res.Error = err.Error()
		return
	}
	prompts, err := c.dataset(warmSeed(c.Seed), count)
	if err != nil {
		res.Error = err.Error()
		return
	}
	prog.note(fmt.Sprintf("  ready in %.1fs at %s; warming up with %d requests", res.Ready, d.url, warm))
	if err := c.warmUpQuiet(ctx, backend, t, prompts, warm); err != nil {
		res.Error = err.Error()
		prog.note("  " + err.Error())
		return
	}
	res.Points, err = c.measure(ctx, backend, t, rates, slo, count, prog, spec.name)
	if err != nil {
		res.Error = err.Error()
	}
}

// runSweep is a rate sweep against a deployment already running.
func (c benchCmd) runSweep(ctx context.Context, backend loadgen.Backend, rates []float64, slo loadgen.SLO, t benchTarget, count loadgen.TokenCounter) error {
	first, err := c.dataset(c.Seed, count)
	if err != nil {
		return err
	}
	perRate := countRequests(first)
	name := c.Target
	if name == "" {
		name = t.base
	}
	rep := layoutReport{Date: time.Now().UTC().Format("20060102-150405"), Backend: string(backend), Workload: c.workloadText(perRate), SLO: slo.String()}
	res := layoutResult{Name: name}
	if c.Target != "" && isProfileArg(c.Target) {
		if _, plan, _ := profiles.LoadPlan(c.Target, profiles.StaticHostFacts()); plan != nil {
			res.Profile, res.shape, res.sim = plan.ProfilePath, planShape(plan), detectSimulation(plan)
			res.Shape, res.Simulated = res.shape.String(), res.sim.Note()
			rep.Simulated = res.Simulated
		}
	}
	fmt.Printf("Target %s (%s), model %s: %s\n", t.base, backend.Path(), t.model, rep.Workload)
	fmt.Printf("Rates %s, %s%s\n", c.RequestRate, concText(c.MaxConcurrency), sloSuffix(slo))
	if c.NumWarmups > 0 {
		warm, err := c.dataset(warmSeed(c.Seed), count)
		if err != nil {
			return err
		}
		if err := c.warmUp(ctx, backend, t, warm, c.NumWarmups); err != nil {
			return err
		}
	}
	prog := newSweepProgress(newProgress(os.Stderr, isTerminal(os.Stderr) && !c.DisableTqdm), len(rates)*perRate)
	res.Points, err = c.measure(ctx, backend, t, rates, slo, count, prog, "")
	if err != nil {
		res.Error = err.Error()
	}
	prog.finish()
	rep.Layouts = []layoutResult{res}
	return c.report(rep, slo, ctx.Err() != nil)
}

// measure runs the workload once per rate against t. Rate i's dataset is
// drawn from seed+i, so no rate finds another's long prompts in a prefix
// cache, and every layout gets the very same requests at the same times.
func (c benchCmd) measure(ctx context.Context, backend loadgen.Backend, t benchTarget, rates []float64, slo loadgen.SLO, count loadgen.TokenCounter, prog *sweepProgress, label string) ([]layoutPoint, error) {
	var out []layoutPoint
	for i, rate := range rates {
		if ctx.Err() != nil {
			return out, context.Cause(ctx)
		}
		seed := c.Seed + uint64(i)
		prompts, err := c.dataset(seed, count)
		if err != nil {
			return out, err
		}
		n := countRequests(prompts)
		pt := layoutPoint{rate: rate, MaxConcurrency: c.MaxConcurrency}
		prog.note(fmt.Sprintf("  %s: %d requests", strings.TrimSpace(label+" "+pointLoad(rate, c.MaxConcurrency)), n))
		rs, dur, err := loadgen.Run(ctx, loadgen.Config{BaseURL: t.base, Backend: backend, Model: t.model, APIKey: t.apiKey,
			Prompts: prompts, RequestRate: rate, MaxConcurrency: c.MaxConcurrency, Seed: seed, Progress: prog.update})
		prog.advance(n)
		if err != nil {
			return out, fmt.Errorf("run at %s: %w", pointLoad(rate, c.MaxConcurrency), err)
		}
		s := loadgen.Summarize(rs, dur)
		s.Meta(time.Now().UTC().Format("20060102-150405"), string(backend), t.base, t.model, n, rate, c.MaxConcurrency)
		s.Judge(rs, slo)
		pt.Summary = s
		pt.Rate = s.RequestRate
		out = append(out, pt)
		prog.note("    " + pointLine(s))
	}
	return out, nil
}

// warmSeed draws a sweep's warm-up requests from a dataset of their own,
// so no measured rate finds its long prompts already cached by them.
func warmSeed(seed uint64) uint64 { return seed ^ 0x7761726d2d7570 }

// warmUpQuiet is warmUp without its line (the sweep's progress says it).
func (c benchCmd) warmUpQuiet(ctx context.Context, backend loadgen.Backend, t benchTarget, prompts []loadgen.Prompt, n int) error {
	warm := make([]loadgen.Prompt, n)
	for i := range warm {
		warm[i] = prompts[i%len(prompts)]
		warm[i].Turns = nil
	}
	conc := c.MaxConcurrency
	if conc == 0 {
		conc = 4
	}
	rs, _, err := loadgen.Run(ctx, loadgen.Config{BaseURL: t.base, Backend: backend, Model: t.model, APIKey: t.apiKey,
		Prompts: warm, RequestRate: math.Inf(1), MaxConcurrency: conc})
	if err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	for _, r := range rs {
		if !r.OK && !r.NotSent && !r.Cancelled {
			return fmt.Errorf("warm-up request failed: %s", r.Err)
		}
	}
	return nil
}

func concText(c int) string {
	if c == 0 {
		return "no concurrency limit"
	}
	return fmt.Sprintf("at most %d requests in flight", c)
}

func sloSuffix(slo loadgen.SLO) string {
	if slo.IsZero() {
		return ", no SLO (--goodput): layouts are ranked by throughput"
	}
	return ", SLO " + slo.String()
}

func pointLoad(rate float64, conc int) string {
	return loadgen.Point{Rate: rate, Concurrency: conc}.Load()
}

// pointLine is one measured point in a line.
func pointLine(s loadgen.Summary) string {
	line := fmt.Sprintf("%.2f req/s", s.RequestThroughput)
	if s.RequestGoodput != nil {
		line += fmt.Sprintf(", goodput %.2f req/s (%.0f%% met the SLO)", *s.RequestGoodput, 100*s.Goodput.Attainment)
	}
	line += fmt.Sprintf(", TTFT p50 %.0f ms p99 %.0f ms, ITL p50 %.1f ms p99 %.1f ms", s.MedianTTFTms, s.P99TTFTms, s.MedianITLms, s.P99ITLms)
	if s.Failed > 0 {
		line += fmt.Sprintf(", %d failed", s.Failed)
	}
	return line
}

// report prints the comparison, writes its JSON and PNG, and sets the
// exit status: 1 when no layout completed a request.
func (c benchCmd) report(rep layoutReport, slo loadgen.SLO, interrupted bool) error {
	runs := make([]loadgen.LayoutRun, len(rep.Layouts))
	for i, l := range rep.Layouts {
		runs[i] = loadgen.LayoutRun{Name: l.Name, Shape: l.shape}
		for _, p := range l.Points {
			runs[i].Points = append(runs[i].Points, loadgen.Point{Rate: p.rate, Concurrency: p.MaxConcurrency,
				Throughput: p.Summary.RequestThroughput, Completed: p.Summary.Completed, Failed: p.Summary.Failed, Goodput: p.Summary.Goodput})
		}
	}
	v := loadgen.Compare(runs)
	rep.Winner, rep.Reason = v.Winner, v.Reason
	writeLayoutTable(os.Stdout, rep)
	if c.OutputFile != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if err := os.WriteFile(c.OutputFile, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write --output-file: %w", err)
		}
	}
	if c.Plot != "" {
		if err := plotLayouts(c.Plot, rep, slo); err != nil {
			return err
		}
		fmt.Printf("Plot: %s\n", c.Plot)
	}
	if interrupted {
		return &exitError{code: 130, msg: "tsd bench: stopped before the end; the figures above are what was measured"}
	}
	completed := 0
	for _, l := range rep.Layouts {
		for _, p := range l.Points {
			completed += p.Summary.Completed
		}
	}
	if completed == 0 {
		return &exitError{code: 1, msg: "tsd bench: no request completed"}
	}
	return nil
}

// writeLayoutTable prints one row per layout and rate, then the verdict.
func writeLayoutTable(w io.Writer, rep layoutReport) {
	fmt.Fprintln(w)
	if rep.Simulated != "" {
		fmt.Fprintln(w, "Figures "+rep.Simulated)
	}
	if rep.SLO != "" {
		fmt.Fprintf(w, "SLO: %s (goodput: requests/s that met every objective)\n", rep.SLO)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "layout\tshape\tload\treq/s\tgoodput\tmet SLO\tTTFT p50/p90/p99 ms\tITL p50/p90/p99 ms\tfailed")
	for _, l := range rep.Layouts {
		if len(l.Points) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", l.Name, l.Shape)
		}
		for _, p := range l.Points {
			s := p.Summary
			good, met := "-", "-"
			if s.Goodput != nil {
				good = fmt.Sprintf("%.2f", s.Goodput.Goodput)
				met = fmt.Sprintf("%.0f%%", 100*s.Goodput.Attainment)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\t%.0f / %.0f / %.0f\t%.1f / %.1f / %.1f\t%d\n", l.Name, l.Shape, pointLoad(p.rate, p.MaxConcurrency),
				s.RequestThroughput, good, met, s.MedianTTFTms, s.P90TTFTms, s.P99TTFTms, s.MedianITLms, s.P90ITLms, s.P99ITLms, s.Failed)
		}
	}
	_ = tw.Flush()
	for _, l := range rep.Layouts {
		if l.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", l.Name, l.Error)
		}
	}
	if len(rep.Layouts) > 1 {
		if rep.Winner != "" {
			fmt.Fprintf(w, "Winner: %s\n", rep.Winner)
		} else {
			fmt.Fprintln(w, "Winner: none")
		}
		fmt.Fprintf(w, "Why: %s\n", rep.Reason)
	}
}

// layoutSpec is one layout of a comparison, planned from its profile.
type layoutSpec struct {
	name, profile string
	plan          *profiles.Plan
	shape         loadgen.Shape
	sim           simulation
}

// loadLayouts plans every profile --layouts names (so a bad one fails
// before the first is started) and names each layout by its profile
// file, made unique.
func loadLayouts(paths []string) ([]layoutSpec, error) {
	var out []layoutSpec
	seen := map[string]int{}
	for _, p := range paths {
		if strings.TrimSpace(p) == "" {
			continue
		}
		_, plan, errs := profiles.LoadPlan(p, profiles.StaticHostFacts())
		if plan == nil {
			return nil, fmt.Errorf("--layouts %s: %w", p, profileErrors(errs))
		}
		if plan.Launcher == profiles.LauncherSlurm {
			return nil, fmt.Errorf("--layouts %s: a Slurm profile: tsd bench starts layouts on this host", p)
		}
		name := strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
		seen[name]++
		if seen[name] > 1 {
			name = fmt.Sprintf("%s-%d", name, seen[name])
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		out = append(out, layoutSpec{name: name, profile: abs, plan: plan, shape: planShape(plan), sim: detectSimulation(plan)})
	}
	if len(out) == 0 {
		return nil, errors.New("--layouts: no profile given")
	}
	return out, nil
}

// planShape counts a plan's engine instances by role kind.
func planShape(plan *profiles.Plan) loadgen.Shape {
	var s loadgen.Shape
	for _, r := range plan.Roles {
		switch r.Kind {
		case profiles.KindPrefill:
			s.Prefill++
		case profiles.KindDecode:
			s.Decode++
		case profiles.KindEncode:
			s.Encode++
		case profiles.KindAggregated:
			s.Aggregated++
		}
	}
	return s
}

// layoutDeployment is one layout brought up by tsd bench.
type layoutDeployment struct {
	cmd     *exec.Cmd
	gone    chan struct{}
	url     string
	logPath string
}

// startLayout runs `tsd up --headless` on the layout's profile as our
// child, in its own process group (a Ctrl-C here reaches only us; we stop
// it in order) with a parent-death signal (it never outlives us), its
// output appended to the deployment's tsd.log, and waits until every role
// is ready.
func startLayout(ctx context.Context, spec layoutSpec, fakeGPUs int, timeout time.Duration) (*layoutDeployment, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find tsd binary: %w", err)
	}
	args := []string{"up", "--headless", "--status-fd=3"}
	if fakeGPUs > 0 {
		args = append(args, fmt.Sprintf("--fake-gpus=%d", fakeGPUs))
	}
	args = append(args, spec.profile)
	d := &layoutDeployment{gone: make(chan struct{}), logPath: daemonLog(spec.plan)}
	if d.logPath == "" {
		return nil, errors.New("the plan has no log_dir for tsd's own log")
	}
	if err := os.MkdirAll(filepath.Dir(d.logPath), 0o755); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", d.logPath, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== tsd bench --layouts: %s, started %s ====\n", spec.name, time.Now().Format(time.RFC3339))
	offset, _ := logf.Seek(0, io.SeekEnd)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	defer pr.Close()
	d.cmd = exec.Command(exe, args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.ExtraFiles = []*os.File{pw}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("start tsd up: %w", err)
	}
	pw.Close()
	go func() { _ = d.cmd.Wait(); close(d.gone) }()
	fail := func(err error) (*layoutDeployment, error) {
		_ = d.stop(time.Minute)
		return nil, fmt.Errorf("%w; %s ends:\n%s", err, d.logPath, logTail(d.logPath, offset, 15))
	}
	type status struct{ kind, text string }
	got := make(chan status, 1)
	go func() { k, t := readStatus(pr); got <- status{k, t} }()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var socket string
	select {
	case st := <-got:
		if st.kind != "started" {
			msg := strings.TrimSpace(st.text)
			if msg == "" {
				msg = "tsd up exited before starting"
			}
			return fail(errors.New(msg))
		}
		socket = st.text
	case <-deadline.C:
		return fail(fmt.Errorf("not started after %s (--layout-timeout)", timeout))
	case <-ctx.Done():
		return fail(context.Cause(ctx))
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cur, ch, err := supervisor.NewControlClient(socket).Watch(wctx)
	if err != nil {
		return fail(fmt.Errorf("watch the deployment: %w", err))
	}
	for {
		ready, failed := readiness(cur)
		if len(failed) > 0 {
			return fail(errors.New(strings.Join(failed, "; ")))
		}
		if ready && cur.Gateway.URL != "" {
			d.url = strings.TrimRight(cur.Gateway.URL, "/")
			return d, nil
		}
		var ok bool
		select {
		case cur, ok = <-ch:
			if !ok {
				return fail(errors.New("the deployment ended while starting"))
			}
		case <-deadline.C:
			return fail(fmt.Errorf("not ready after %s (--layout-timeout): %s", timeout, notReady(cur)))
		case <-ctx.Done():
			return fail(context.Cause(ctx))
		}
	}
}

// notReady names the roles not ready yet, with their states.
func notReady(s snapshot.Snapshot) string {
	var out []string
	for _, r := range s.Roles {
		if r.State != snapshot.StateReady {
			out = append(out, fmt.Sprintf("%s %s", r.Name, r.State))
		}
	}
	if len(out) == 0 {
		return "no gateway URL yet"
	}
	return strings.Join(out, ", ")
}

// stop ends the deployment as Ctrl-C does (SIGTERM: every role stopped,
// its process groups verified empty) and waits; a second signal after
// half of limit kills the groups at once, SIGKILL after limit.
func (d *layoutDeployment) stop(limit time.Duration) error {
	select {
	case <-d.gone:
		return nil
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(limit / 2)
	defer t.Stop()
	select {
	case <-d.gone:
		return nil
	case <-t.C:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM) // the second: kill every group now
	t.Reset(limit / 2)
	select {
	case <-d.gone:
		return fmt.Errorf("did not stop within %s: its process groups were killed", limit/2)
	case <-t.C:
	}
	_ = d.cmd.Process.Kill()
	<-d.gone
	return fmt.Errorf("did not stop within %s: killed (its guardians end its engines)", limit)
}

// sweepProgress is one bar across a whole sweep (layouts × rates ×
// requests), with a line per phase.
type sweepProgress struct {
	p           *progress
	total, base int
}

func newSweepProgress(p *progress, total int) *sweepProgress {
	return &sweepProgress{p: p, total: total}
}

// update is loadgen's Progress: done of the current run.
func (s *sweepProgress) update(done, _ int) { s.p.update(s.base+done, s.total) }

// advance moves the base past a run of n requests.
func (s *sweepProgress) advance(n int) { s.base += n }

// skip counts requests that will not run (a layout that failed) as done.
func (s *sweepProgress) skip(n int) {
	s.base += n
	s.p.update(s.base, s.total)
}

func (s *sweepProgress) note(line string) { s.p.note(line) }

func (s *sweepProgress) finish() { s.p.finish() }

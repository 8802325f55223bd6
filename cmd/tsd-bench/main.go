// Command tsd-bench is `make bench`'s driver: it runs tsd (bin/tsd up
// --headless on unpaced ts-fake engines) and the bare SSE baseline under
// the same load from `tsd bench`, reads each server's CPU from /proc, runs
// the chosen Go benchmarks from prebuilt test binaries, and writes one
// table (bench/results.md). It needs no Go toolchain at run time: carry
// bin/tsd, bin/ts-fake, bin/tsd-bench, bin/bench/*.test and the repo tree
// (for testdata and the demo tokenizer).
//
//	tsd-bench [flags]            run everything, write --out
//	tsd-bench bare --listen A    serve the baseline (used by the run itself)
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tsd-project/tsd/bench/bare"
	"github.com/tsd-project/tsd/loadgen"
	"github.com/tsd-project/tsd/profiles"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "bare" {
		if err := serveBare(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "tsd-bench bare:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsd-bench:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "tsd-bench:", err)
		os.Exit(1)
	}
}

// serveBare runs the baseline server until killed, printing its address.
func serveBare(args []string) error {
	fs := flag.NewFlagSet("bare", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *listen, err)
	}
	fmt.Printf("listening on %s\n", l.Addr())
	s := &bare.Server{}
	return (&http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}).Serve(l)
}

type options struct {
	bin, tokenizer, out, pin, commit, benchtime string
	conc                                        []int
	requests                                    map[int]int
	inLen, outLen, reps, tsdCores               int
	jsonOut                                     string
	idle                                        time.Duration
	skipGo, skipServe                           bool
	goSave, goLoad                              string
	skipRouting                                 bool
	skipOverload                                bool
	overloadFor                                 time.Duration
	rel                                         relOptions
	// The gateway's share of TTFT (C=1) and the scaling rows.
	shareN, scaleN, loadCores int
	requestsAll               int // -requests as one number for every C
	scale                     []int
	skipShare                 bool
	skipTracing               bool // the rows with gateway.tracing at 10% (tracing.go)
	lay                       layoutsOptions
	planner                   plannerBench // the SLO planner rows (planner.go)
}

// fakeGPUs is -fake-gpus: every deployment the driver starts gets it.
var fakeGPUs int

// gpuNote says which GPUs the idle deployment's telemetry polled.
func gpuNote() string {
	if fakeGPUs > 0 {
		return fmt.Sprintf("%d simulated GPUs polled (-fake-gpus)", fakeGPUs)
	}
	return "no NVML here (no GPU polling)"
}

// benchName is the name every deployment the driver starts runs under
// (tsd up --name): one per driver process, so `tsd ls` says whose it is,
// two drivers never claim one registry name, and the driver knows each
// deployment's state folder whatever its profile calls itself.
var benchName = fmt.Sprintf("tsd-bench-%d", os.Getpid())

// stateDir is the state folder of the deployment the driver started from
// a profile in dir (profiles.StateDir): its run/ (tsd.sock) and logs/.
func stateDir(dir string) string { return profiles.StateDir(dir, benchName) }

// upArgv is `tsd up --headless --name benchName PROFILE`, with
// -fake-gpus when set.
func upArgv(tsd, profile string) []string { return upArgvGPUs(tsd, profile, fakeGPUs) }

// upArgvGPUs is upArgv with gpus simulated GPUs (none when 0).
func upArgvGPUs(tsd, profile string, gpus int) []string {
	argv := []string{tsd, "up", "--headless", "--name", benchName}
	if gpus > 0 {
		argv = append(argv, "--fake-gpus", strconv.Itoa(gpus))
	}
	return append(argv, profile)
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("tsd-bench", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "bin", "folder with tsd, ts-fake and bench/*.test")
	fs.StringVar(&o.tokenizer, "tokenizer", "gateway/tokenizer/testdata/demo", "tokenizer folder the fake model serves (chat needs one)")
	fs.StringVar(&o.out, "out", "bench/results.md", "results file (markdown)")
	fs.StringVar(&o.pin, "pin", "auto", "CPU pinning with taskset: auto (when the machine has ≥ 8 cores), on, off")
	fs.StringVar(&o.commit, "commit", "", "commit to print (default: git rev-parse, else bin/tsd version)")
	fs.StringVar(&o.benchtime, "benchtime", "1s", "-test.benchtime for the Go benchmarks")
	concs := fs.String("concurrency", "1,64,512", "client concurrencies")
	reqs := fs.String("requests", "1=300,64=3000,512=4000", "requests per concurrency (C=N,...); a lone number applies to all")
	fs.IntVar(&o.inLen, "input-len", 32, "prompt tokens per request")
	fs.IntVar(&o.outLen, "output-len", 64, "streamed tokens per request")
	fs.IntVar(&o.tsdCores, "tsd-cores", 2, "cores for tsd (and the bare server) when pinned")
	fs.StringVar(&o.jsonOut, "json", "", "also write every figure as JSON here")
	fs.IntVar(&o.reps, "reps", 2, "repetitions of each serving case (tsd and bare take turns; the best by tok/s is kept)")
	fs.DurationVar(&o.idle, "idle", 30*time.Second, "window of the idle-CPU measurement (CPU time is counted in 10 ms ticks: 30 s resolves 0.03% of a core)")
	fs.BoolVar(&o.skipGo, "skip-go", false, "skip the Go benchmark rows")
	fs.StringVar(&o.goSave, "go-save", "", "also save the Go benchmarks' raw output here (for -go-load)")
	fs.StringVar(&o.goLoad, "go-load", "", "take the Go benchmark rows from a file -go-save wrote (an earlier run of the same binaries) instead of running them")
	fs.BoolVar(&o.skipServe, "skip-serve", false, "skip the serving rows (only Go benchmarks and control plane)")
	fs.BoolVar(&o.skipRouting, "skip-routing", false, "skip the routing rows (cached-token share and TTFT by policy)")
	fs.BoolVar(&o.skipOverload, "skip-overload", false, "skip the overload rows (two priority classes at twice the engines' capacity)")
	fs.DurationVar(&o.overloadFor, "overload-duration", 60*time.Second, "how long the overload rows drive twice the engines' capacity")
	fs.IntVar(&o.rel.streams, "rel-streams", 200, "reliability: concurrent streams while decode-0 is killed")
	fs.IntVar(&o.rel.kills, "rel-kills", 10, "reliability: SIGKILLs of decode-0 per run")
	fs.IntVar(&o.rel.tokens, "rel-tokens", 64, "reliability: tokens per stream")
	fs.Float64Var(&o.rel.tokensPerS, "rel-tokens-per-s", 50, "reliability: ts-fake's tokens per second per stream (streams must outlive a kill)")
	fs.BoolVar(&o.rel.skip, "skip-reliability", false, "skip the reliability rows")
	fs.IntVar(&fakeGPUs, "fake-gpus", 0, "run tsd with --fake-gpus N: simulated GPUs, so a host whose real GPUs are fewer than the profiles name (ts-fake uses none) still plans them")
	fs.IntVar(&o.shareN, "share-requests", 300, "requests of each C=1 run that reads the gateway's share of TTFT (gw_us) from tsd's access lines")
	fs.BoolVar(&o.skipShare, "skip-share", false, "skip the gateway-share-of-TTFT rows")
	fs.BoolVar(&o.skipTracing, "skip-tracing", false, "skip the rows measured again with gateway.tracing sampled at 10%")
	scale := fs.String("scale", "2,4,8", "scaling rows: tsd core counts, each a chat C=512 run with tsd pinned to that many cores (\"\": none)")
	fs.IntVar(&o.scaleN, "scale-requests", 0, "requests of each scaling run (0: -requests' figure for C=512, or its one figure, else 10240)")
	fs.IntVar(&o.loadCores, "load-cores", 0, "load generator cores in the scaling rows (0: every core tsd and the engines leave)")
	fs.BoolVar(&o.lay.skip, "skip-layouts", false, "skip the layouts rows (aggregated, PD and conditional compared on ts-fake's performance model)")
	fs.BoolVar(&o.lay.only, "layouts-only", false, "run only the layouts rows and put their section into -out, keeping the rest of the file")
	fs.StringVar(&o.lay.examples, "layouts-examples", "profiles/examples", "layouts: folder of the example profiles")
	fs.StringVar(&o.lay.names, "layouts", "agg-4,pd-1p3d,pd-2p2d,mixed-conditional", "layouts: the example profiles compared (names without .yaml)")
	fs.StringVar(&o.lay.preset, "layouts-preset", defaultLayoutPreset, "layouts: ts-fake's --fake-perf preset")
	fs.StringVar(&o.lay.rates, "layouts-rates", "12,24,40,56", "layouts: request rates (req/s) of the sweep")
	fs.IntVar(&o.lay.requests, "layouts-requests", 480, "layouts: requests at each rate")
	fs.StringVar(&o.lay.goodput, "layouts-goodput", "ttft:1000,tpot:10", "layouts: the SLO, in tsd bench --goodput's words")
	fs.IntVar(&o.lay.outputLen, "layouts-output-len", 200, "layouts: output tokens of every request")
	fs.StringVar(&o.lay.plot, "layouts-plot", "", "layouts: also write the comparison's PNG here (docs/layouts.png)")
	o.planner.flags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.lay.requests < 1 || o.lay.outputLen < 1 {
		return o, fmt.Errorf("-layouts-requests %d, -layouts-output-len %d: want at least 1", o.lay.requests, o.lay.outputLen)
	}
	if strings.TrimSpace(*scale) != "" {
		for _, s := range strings.Split(*scale, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || k < 1 {
				return o, fmt.Errorf("-scale %q: want positive core counts", *scale)
			}
			o.scale = append(o.scale, k)
		}
	}
	if o.shareN < 1 {
		return o, fmt.Errorf("-share-requests %d: want at least 1", o.shareN)
	}
	if o.loadCores < 0 || o.scaleN < 0 {
		return o, fmt.Errorf("-load-cores %d, -scale-requests %d: want 0 or more", o.loadCores, o.scaleN)
	}
	for _, s := range strings.Split(*concs, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 {
			return o, fmt.Errorf("-concurrency %q: want positive integers", *concs)
		}
		o.conc = append(o.conc, c)
	}
	o.requests = map[int]int{}
	if n, err := strconv.Atoi(*reqs); err == nil {
		o.requestsAll = n
		for _, c := range o.conc {
			o.requests[c] = n
		}
	} else {
		for _, kv := range strings.Split(*reqs, ",") {
			k, v, ok := strings.Cut(kv, "=")
			c, err1 := strconv.Atoi(k)
			n, err2 := strconv.Atoi(v)
			if !ok || err1 != nil || err2 != nil || n < 1 {
				return o, fmt.Errorf("-requests %q: want C=N pairs", *reqs)
			}
			o.requests[c] = n
		}
	}
	for _, c := range o.conc {
		if o.requests[c] == 0 {
			o.requests[c] = 20 * c
		}
	}
	if o.tsdCores < 1 {
		return o, fmt.Errorf("-tsd-cores %d: want at least 1", o.tsdCores)
	}
	if o.reps < 1 {
		return o, fmt.Errorf("-reps %d: want at least 1", o.reps)
	}
	switch o.pin {
	case "auto", "on", "off":
	default:
		return o, fmt.Errorf("-pin %q: want auto, on or off", o.pin)
	}
	return o, nil
}

type env struct {
	host, cpu, kernel, mem, date, commit, goVersion, load string
	cores                                                 int
}

func readEnv(o options, tsd string) env {
	e := env{cores: runtime.NumCPU(), date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), goVersion: runtime.Version()}
	e.host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			e.load = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) >= 2 {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				e.mem = fmt.Sprintf("%.0f GiB", kb/(1<<20))
			}
		}
	}
	e.commit = o.commit
	if e.commit == "" {
		if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
			e.commit = strings.TrimSpace(string(b))
			if exec.Command("git", "diff", "--quiet", "HEAD").Run() != nil {
				e.commit += " (+ uncommitted changes)"
			}
		} else if b, err := exec.Command(tsd, "version").Output(); err == nil {
			e.commit = strings.TrimSpace(strings.TrimPrefix(string(b), "tsd "))
		}
	}
	return e
}

// loadRow is one measured serving case.
type loadRow struct {
	Target, Backend string
	C, N            int
	S               loadgen.Summary
	CPU             time.Duration // the server process's CPU during the run
	ClientCPU       time.Duration // the load generator's (tsd bench) CPU
	Err             string
}

func (r loadRow) cpuPerToken() float64 { return r.perToken(r.CPU) }

func (r loadRow) perToken(d time.Duration) float64 {
	if r.S.TotalOutputTokens == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(r.S.TotalOutputTokens)
}

// runLoad drives base with `tsd bench` (on the load cores) and measures
// pid's CPU over the run.
func runLoad(o options, l layout, tsd, work, base, backend string, c, n, pid int, extra ...string) loadRow {
	row := loadRow{Backend: backend, C: c, N: n}
	argv := l.wrap(l.load, loadArgv(o, tsd, work, base, backend, c, n, extra...)...)
	out := argv[len(argv)-len(extra)-2]
	t0, err := cpuTicks(pid)
	if err != nil {
		row.Err = err.Error()
		return row
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	b, err := cmd.CombinedOutput()
	t1, err2 := cpuTicks(pid)
	if err != nil || err2 != nil {
		row.Err = fmt.Sprintf("tsd bench: %v %v\n%s", err, err2, b)
		return row
	}
	row.CPU = ticksToDur(t1 - t0)
	if ps := cmd.ProcessState; ps != nil {
		row.ClientCPU = ps.UserTime() + ps.SystemTime()
	}
	raw, err := os.ReadFile(out)
	if err == nil {
		err = json.Unmarshal(raw, &row.S)
	}
	if err != nil {
		row.Err = fmt.Sprintf("read results: %v", err)
		return row
	}
	if row.S.Completed != n || row.S.TotalOutputTokens != n*o.outLen {
		row.Err = fmt.Sprintf("%d/%d completed, %d output tokens (want %d)", row.S.Completed, n, row.S.TotalOutputTokens, n*o.outLen)
	}
	fmt.Printf("  %-8s C=%-4d %8.0f tok/s %7.0f req/s  TTFT p50 %.2f ms  cpu %.2f µs/token (client %.2f) %s\n",
		backend, c, row.S.OutputThroughput, row.S.RequestThroughput, row.S.MedianTTFTms, row.cpuPerToken(), row.perToken(row.ClientCPU), row.Err)
	return row
}

// loadArgv is one `tsd bench` run against base: n requests, at most c in
// flight, the JSON summary into a fresh file in work (the argument before
// "--disable-tqdm"); extra flags (a dataset file) go last.
func loadArgv(o options, tsd, work, base, backend string, c, n int, extra ...string) []string {
	out := filepath.Join(work, fmt.Sprintf("%s-%s-c%d-%d.json", filepath.Base(base), backend, c, time.Now().UnixNano()))
	argv := []string{tsd, "bench", "--base-url", base, "--backend", backend, "--model", "demo",
		"--num-prompts", strconv.Itoa(n), "--max-concurrency", strconv.Itoa(c),
		"--random-input-len", strconv.Itoa(o.inLen), "--random-output-len", strconv.Itoa(o.outLen),
		"--output-file", out, "--disable-tqdm"}
	return append(argv, extra...)
}

// profileText is a PD profile of unpaced ts-fake engines: nprefill
// prefill and ndecode decode roles.
func profileText(name, tokenizer, fake string, l layout, port, nprefill, ndecode int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `name: %s
model: %q
served_model_name: demo
engine:
  command: [%s]
  # Unpaced (every step at once), no startup delay, no EOS, no per-request
  # log line, room for 1024 running requests: what is left is tsd.
  args: [--fake-startup, "0", --fake-tokens-per-s, "0", --fake-token-min, "256", --fake-eos-id, "-1", --fake-log-requests=false, --max-num-seqs, "1024"]
gateway:
  host: 127.0.0.1
  port: %d
restart:
  stop_grace: 10s
roles:
`, name, tokenizer, l.engineCommand(fake), port)
	gpu := 0
	for i := range nprefill {
		fmt.Fprintf(&b, "  - {name: prefill-%d, kind: prefill, gpus: [%d]}\n", i, gpu)
		gpu++
	}
	for i := range ndecode {
		fmt.Fprintf(&b, "  - {name: decode-%d, kind: decode, gpus: [%d]}\n", i, gpu)
		gpu++
	}
	return b.String()
}

// deployment is one running `tsd up --headless`.
type deployment struct {
	srv     *server
	dir     string
	base    string
	upReady time.Duration // start → every role ready
}

func startDeployment(o options, l layout, tsd, fake, work, name string, nprefill, ndecode int) (*deployment, error) {
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	tok, err := filepath.Abs(o.tokenizer)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(profileText(name, tok, fake, l, port, nprefill, ndecode)), 0o644); err != nil {
		return nil, err
	}
	start := time.Now()
	srv, err := startServer(dir, l.wrap(l.tsd, upArgv(tsd, "p.yaml")...))
	if err != nil {
		return nil, err
	}
	d := &deployment{srv: srv, dir: dir, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	var last time.Time
	for i := range nprefill + ndecode {
		role := fmt.Sprintf("prefill-%d ", i)
		if i >= nprefill {
			role = fmt.Sprintf("decode-%d ", i-nprefill)
		}
		_, at, err := srv.waitLine(0, 60*time.Second, role, "→ ready")
		if err != nil {
			srv.stop(15 * time.Second)
			return nil, err
		}
		if at.After(last) {
			last = at
		}
	}
	d.upReady = last.Sub(start)
	if err := waitReady(d.base, 30*time.Second); err != nil {
		srv.stop(15 * time.Second)
		return nil, err
	}
	return d, nil
}

// writeProfile makes a run's folder, work/name, with the ./model folder
// the driver's profiles name, and writes its p.yaml: profile on a free
// gateway port, which it returns.
func writeProfile(work, name string, profile func(port int) string) (dir string, port int, err error) {
	dir = filepath.Join(work, name)
	if err := os.MkdirAll(filepath.Join(dir, "model"), 0o755); err != nil {
		return "", 0, err
	}
	if port, err = freePort(); err != nil {
		return "", 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(profile(port)), 0o644); err != nil {
		return "", 0, err
	}
	return dir, port, nil
}

// waitRoles waits until each of roles (a line's prefix: "decode-0 ")
// has said "→ ready" in srv's output, then until the gateway at base is
// ready.
func waitRoles(srv *server, base string, roles ...string) error {
	for _, role := range roles {
		if _, _, err := srv.waitLine(0, 60*time.Second, role, "→ ready"); err != nil {
			return err
		}
	}
	return waitReady(base, 30*time.Second)
}

// restart runs `tsd restart ROLE` and times it until the role's ranks
// are registered and routed again.
func (d *deployment) restart(tsd, role string) (time.Duration, error) {
	from := d.srv.count()
	start := time.Now()
	if b, err := exec.Command(tsd, "restart", "--socket", filepath.Join(stateDir(d.dir), "run", "tsd.sock"), role).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("tsd restart %s: %v\n%s", role, err, b)
	}
	_, at, err := d.srv.waitLine(from, 60*time.Second, role+" ", "handshaking → ready")
	if err != nil {
		return 0, err
	}
	if err := waitReady(d.base, 30*time.Second); err != nil {
		return 0, err
	}
	return at.Sub(start), nil
}

// cpuWithChildren is tsd's CPU and its direct children's (the guardians).
func cpuWithChildren(pid int) (self, kids int64) {
	self, _ = cpuTicks(pid)
	for _, c := range childrenOf(pid) {
		t, _ := cpuTicks(c)
		kids += t
	}
	return self, kids
}

type controlRow struct{ name, value, note string }

// idleTarget is the idle cost, in percent of one core, that tsd and all
// its guardians may take together with 8 roles up and no traffic.
const idleTarget = 0.5

func run(o options) error {
	tsd, err := filepath.Abs(filepath.Join(o.bin, "tsd"))
	if err != nil {
		return err
	}
	fake, err := filepath.Abs(filepath.Join(o.bin, "ts-fake"))
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, p := range []string{tsd, fake} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("need %s (make build): %w", p, err)
		}
	}
	_, tsErr := exec.LookPath("taskset")
	l := planCores(o.pin, runtime.NumCPU(), o.tsdCores, tsErr == nil)
	if o.pin == "on" && !l.pinned {
		return errors.New("-pin on: cannot pin: " + l.why)
	}
	e := readEnv(o, tsd)
	work, err := os.MkdirTemp("", "tsd-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if o.lay.only {
		return layoutsOnly(o, e, tsd, fake, work)
	}
	fmt.Println(l.describe())
	if o.planner.only {
		return writePlannerOnly(o, l, tsd, fake, work)
	}

	var rows []loadRow
	var ctl []controlRow
	var share []shareRow
	var traced *tracingRow
	tracedC := tracingConc(o.conc)
	var scale []scaleRow
	if !o.skipServe {
		fmt.Println("tsd: 1 prefill + 1 decode ts-fake, unpaced")
		d, err := startDeployment(o, l, tsd, fake, work, "pd", 1, 1)
		if err != nil {
			return fmt.Errorf("start tsd: %w", err)
		}
		ctl = append(ctl, controlRow{"`tsd up` → all ranks ready, 1P1D", fmtDur(d.upReady), "ts-fake with --fake-startup 0: includes its process start and handshake"})
		fmt.Println("bare SSE server")
		b, err := startServer(work, l.wrap(l.tsd, self, "bare", "--listen", "127.0.0.1:0"))
		if err != nil {
			d.srv.stop(30 * time.Second)
			return err
		}
		if _, _, err = b.waitLine(0, 10*time.Second, "listening on "); err != nil {
			d.srv.stop(30 * time.Second)
			return err
		}
		bareBase := "http://" + strings.TrimPrefix(b.tail(1), "listening on ")
		runLoad(o, l, tsd, work, d.base, "chat", 64, 200, d.srv.pid()) // warm-up, not recorded
		runLoad(o, l, tsd, work, bareBase, "chat", 64, 200, b.pid())   // warm-up, not recorded
		// tsd and bare take turns, case by case, o.reps times: load from
		// others on the machine then falls on both alike, and the best of
		// the repetitions (by tok/s) stands for each.
		for _, backend := range []string{"chat", "generate"} {
			for _, c := range o.conc {
				var best [2]loadRow
				for rep := range o.reps {
					for i, t := range []struct {
						name, base string
						pid        int
					}{{"tsd", d.base, d.srv.pid()}, {"bare", bareBase, b.pid()}} {
						r := runLoad(o, l, tsd, work, t.base, backend, c, o.requests[c], t.pid)
						r.Target = t.name
						if rep == 0 || (r.Err == "" && (best[i].Err != "" || r.S.OutputThroughput > best[i].S.OutputThroughput)) {
							best[i] = r
						}
					}
				}
				rows = append(rows, best[0], best[1])
			}
		}
		b.stop(5 * time.Second)
		if !o.skipShare {
			share = runShare(o, l, tsd, work, d)
		}
		if !o.skipTracing {
			tr := runTracing(o, l, tsd, work, d, tracedC)
			traced = &tr
		}
		if dur, err := d.restart(tsd, "decode-0"); err != nil {
			ctl = append(ctl, controlRow{"`tsd restart decode` → re-admitted", "failed", err.Error()})
		} else {
			ctl = append(ctl, controlRow{"`tsd restart decode` → re-admitted", fmtDur(dur), "SIGTERM, group verified empty, respawn, handshake, routed (no NVML here: no GPU-release wait)"})
		}
		d.srv.stop(30 * time.Second)
	}

	fmt.Println("tsd: 8 roles (4 prefill + 4 decode), idle")
	d8, err := startDeployment(o, l, tsd, fake, work, "idle8", 4, 4)
	if err != nil {
		return fmt.Errorf("start 8 roles: %w", err)
	}
	ctl = append(ctl, controlRow{"`tsd up` → all ranks ready, 8 roles", fmtDur(d8.upReady), "4 prefill + 4 decode, started in parallel"})
	time.Sleep(2 * time.Second) // let start-up work settle before the idle window
	s0, k0 := cpuWithChildren(d8.srv.pid())
	t0 := time.Now()
	time.Sleep(o.idle)
	s1, k1 := cpuWithChildren(d8.srv.pid())
	win := time.Since(t0)
	pct := func(ticks int64) float64 { return 100 * ticksToDur(ticks).Seconds() / win.Seconds() }
	both := pct(s1 - s0 + k1 - k0)
	verdict := "met"
	if both > idleTarget {
		verdict = "MISSED"
	}
	ctl = append(ctl,
		controlRow{"idle CPU, 8 roles: tsd", fmt.Sprintf("%.2f%% of a core", pct(s1-s0)), fmt.Sprintf("over %v; telemetry on, %s", o.idle, gpuNote())},
		controlRow{"idle CPU, 8 roles: its 8 guardians", fmt.Sprintf("%.2f%% of a core", pct(k1-k0)), "all 8 together"},
		controlRow{"idle CPU, 8 roles: tsd + guardians", fmt.Sprintf("%.2f%% of a core", both), fmt.Sprintf("target ≤ %.1f%%: %s", idleTarget, verdict)})
	d8.srv.stop(30 * time.Second)

	if !o.skipServe && len(o.scale) > 0 {
		scale = runScale(o, tsd, fake, work, runtime.NumCPU(), tsErr == nil)
	}

	var routingMD string
	if !o.skipRouting {
		routingMD = routingSection(l, tsd, fake, work)
	}
	if !o.skipOverload {
		routingMD += overloadSection(l, tsd, fake, work, o.overloadFor)
	}
	var rel []relRow
	if !o.rel.skip {
		rel = runReliability(o.rel, l, tsd, fake, work)
	}
	var plannerMD string
	if !o.planner.skip {
		plannerMD = renderPlanner(o.planner, runPlannerRows(o.planner, l, tsd, fake, work))
	}

	var lay *layoutsRun
	if !o.lay.skip {
		r := runLayouts(o.lay, tsd, fake, o.tokenizer, work)
		lay = &r
		routingMD += renderLayouts(r, e)
	}

	var gob []goResult
	switch {
	case o.skipGo:
	case o.goLoad != "":
		var err error
		if gob, err = loadGoBenches(o.goLoad); err != nil {
			return err
		}
	default:
		gob = runGoBenches(o)
	}
	md := render(e, l, o, rows, ctl, gob, renderTargets(l, o, rows, share, scale, gob), renderShare(share, o)+renderTracing(l, traced, rows, share, tracedC), renderScale(scale, o),
		renderReliability(rel, o.rel)) + routingMD + plannerMD
	if err := writeResults(o.out, md); err != nil {
		return err
	}
	if o.jsonOut != "" {
		if err := writeJSON(o.jsonOut, e, l, rows, ctl, gob, map[string]any{"Reliability": rel, "GatewayShare": share, "Scaling": scale, "Layouts": lay, "Tracing": traced}); err != nil {
			return err
		}
		fmt.Println("wrote", o.jsonOut)
	}
	return nil
}

// writeResults writes the results file md at path, making its folder
// first, and says so.
func writeResults(path, md string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Println("wrote", path)
	return nil
}

// layoutsOnly runs the layouts rows alone and puts their section into
// -out in place of the one there (appended when there is none), so a run
// of only these rows keeps the rest of the results file.
func layoutsOnly(o options, e env, tsd, fake, work string) error {
	r := runLayouts(o.lay, tsd, fake, o.tokenizer, work)
	section := renderLayouts(r, e)
	doc, err := os.ReadFile(o.out)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	md := spliceSection(string(doc), layoutsHeading, section)
	if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.out, err)
	}
	fmt.Println("wrote", o.out)
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", o.jsonOut, err)
		}
	}
	if r.Err != "" {
		return errors.New(firstLine(r.Err))
	}
	return nil
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// writeJSON dumps every figure, for comparing runs by script.
// extra holds further sections' figures, by name.
func writeJSON(path string, e env, l layout, rows []loadRow, ctl []controlRow, gob []goResult, extra map[string]any) error {
	type serve struct {
		Target, Backend, Error string
		Concurrency, Requests  int
		ServerCPUSeconds       float64
		ClientCPUSeconds       float64
		CPUMicrosPerToken      float64
		Summary                loadgen.Summary
	}
	type control struct{ Name, Value, Note string }
	type gobench struct {
		Package, Name, Error string
		Metrics              map[string]float64
	}
	out := struct {
		Date, Commit, CPU, Layout string
		Cores                     int
		LoadAverage               string
		Serving                   []serve
		Control                   []control
		GoBenchmarks              []gobench
		Extra                     map[string]any `json:",omitempty"`
	}{Date: e.date, Commit: e.commit, CPU: e.cpu, Layout: l.describe(), Cores: e.cores, LoadAverage: e.load, Extra: extra}
	for _, r := range rows {
		out.Serving = append(out.Serving, serve{r.Target, r.Backend, r.Err, r.C, r.N, r.CPU.Seconds(), r.ClientCPU.Seconds(), r.cpuPerToken(), r.S})
	}
	for _, c := range ctl {
		out.Control = append(out.Control, control{c.name, c.value, c.note})
	}
	for _, g := range gob {
		if len(g.results) == 0 {
			out.GoBenchmarks = append(out.GoBenchmarks, gobench{Package: g.spec.pkg, Name: g.spec.bench, Error: g.err})
		}
		for _, r := range g.results {
			out.GoBenchmarks = append(out.GoBenchmarks, gobench{Package: g.spec.pkg, Name: r.Name, Metrics: r.Metrics})
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sys/unix"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/gateway"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/probe"
	"github.com/tsd-project/tsd/headless"
	"github.com/tsd-project/tsd/planner"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
	"github.com/tsd-project/tsd/supervisor/rolemetrics"
	"github.com/tsd-project/tsd/supervisor/telemetry"
)

// Wiring points the integrator sets (kept as variables so `tsd up` builds
// and runs before every piece exists).
var (
	// newGateway builds the embedded gateway for a plan; nil runs the
	// engines without one (a role is then ready on its launcher's ready line).
	newGateway = embeddedGateway
	// runDashboard attaches the TUI to a daemon until the user quits or
	// detaches; nil means headless.
	runDashboard = attachDashboard
)

type upCmd struct {
	Profile    string        `arg:"" optional:"" help:"Profile YAML file."`
	Detach     bool          `short:"d" help:"Start the deployment in the background and return once every role is ready (exit 1 with the reason if one fails); attach later with tsd attach."`
	Headless   bool          `help:"Run the supervisor in the foreground without a dashboard: role-prefixed logs and state changes; killing it stops every role (scripts, systemd, CI, Slurm; the default without a terminal)."`
	StopOnQuit bool          `name:"stop-on-quit" help:"Quitting the dashboard stops the deployment unless you pick detach (make demo)."`
	Name       string        `help:"Deployment name for tsd ls/attach/status, and its state folder .tsd/NAME beside the profile (default: the profile's name)."`
	Port       int           `help:"Serve the gateway on this port instead of the profile's gateway.port (make demo PORT=8001)."`
	Wait       time.Duration `default:"30m" help:"With -d: how long to wait for every role to be ready."`
	FakeGPUs   int           `name:"fake-gpus" help:"Simulate N H200 GPUs in telemetry (demo, tests)."`
	FakeNPUs   int           `name:"fake-npus" help:"Simulate N Ascend 910B NPUs in telemetry, for a profile with accelerator: ascend (demo, tests)."`
	PlanJSON   string        `name:"plan-json" hidden:"" help:"Run this plan (tsd plan --json output) instead of planning PROFILE."`
	NoGateway  bool          `name:"no-gateway" hidden:"" help:"Run the engines without the embedded gateway (ready = the launcher's ready line)."`
	NoProgress time.Duration `name:"no-progress" default:"15m" help:"Stop a starting role that logs nothing and reaches no milestone for this long."`
	LogLines   int           `name:"log-lines" default:"10000" help:"Lines of each role's log kept in memory."`
	StatusFD   int           `name:"status-fd" hidden:"" help:"Internal: the daemon reports its start on this file descriptor."`
	// TrendPeriod shortens the daemon's trend sample period (default 1s,
	// ten minutes of samples) so tests cover minutes of trends in seconds.
	TrendPeriod time.Duration `name:"trend-period" hidden:"" help:"Internal (tests): the trend rings' sample period, 100ms or more."`
	Launcher    string        `enum:"local,slurm" default:"local" help:"How roles start: local (this host) or slurm (each role a step of the Slurm job tsd runs in)."`
}

// Run picks the shape: with a terminal (or -d) `tsd up` starts the
// supervisor as a daemon in its own session and attaches a dashboard to it,
// so closing the terminal (an SSH drop) leaves the deployment running;
// --headless, no terminal, or the daemon itself run the supervisor here.
func (c upCmd) Run() error {
	if c.TrendPeriod != 0 && c.TrendPeriod < 100*time.Millisecond {
		return &exitError{code: 2, msg: fmt.Sprintf("tsd: --trend-period %s: at least 100ms (the publisher's tick)", c.TrendPeriod)}
	}
	if c.StatusFD == 0 && (c.Detach || (!c.Headless && isTerminal(os.Stdout) && isTerminal(os.Stdin) && runDashboard != nil)) {
		return c.spawnDaemon()
	}
	err := c.runSupervisor()
	if c.StatusFD > 0 {
		reportStatus(c.StatusFD, "error", errText(err))
	}
	return err
}

// errText is err as the user reads it (exit errors carry their message).
func errText(err error) string {
	if err == nil {
		return ""
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.msg
	}
	return "tsd: " + err.Error()
}

// statusPipe is the daemon's end of the pipe spawnDaemon reads: one
// "KIND\tTEXT" line (started, or error), then closed, so the fd is never
// written after it may have been reused.
var statusPipe struct {
	sync.Mutex
	f    *os.File
	done bool
}

// reportStatus sends the daemon's one status line; later calls do nothing.
// A parent that left already (closed pipe) is ignored.
func reportStatus(fd int, kind, text string) {
	if text == "" && kind == "error" {
		return
	}
	statusPipe.Lock()
	defer statusPipe.Unlock()
	if statusPipe.done {
		return
	}
	statusPipe.done = true
	f := os.NewFile(uintptr(fd), "status")
	if f == nil {
		return
	}
	_, _ = fmt.Fprintf(f, "%s\t%s\n", kind, strings.ReplaceAll(text, "\n", "\x1f"))
	_ = f.Close()
}

// register plans the deployment under the registry's lock, treating the
// ports of every other running deployment as taken, refuses a name already
// running, and records this process. The returned function unregisters.
func (c upCmd) register() (*profiles.Plan, upSource, func(), error) {
	reg, err := daemons.Open("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "warning: no deployment registry:", err)
		plan, src, err := c.loadPlan(profiles.LocalHostFacts())
		return plan, src, func() {}, err
	}
	unlock, err := reg.Lock()
	if err != nil {
		return nil, upSource{}, nil, err
	}
	defer unlock()
	// A dead deployment's leftover engines may still hold its ports.
	claimed, err := reg.Claimed()
	if err != nil {
		return nil, upSource{}, nil, err
	}
	live, err := reg.List()
	if err != nil {
		return nil, upSource{}, nil, err
	}
	facts := profiles.LocalHostFacts()
	free := facts.PortFree
	facts.PortFree = func(p int) bool { return !claimed[p] && free(p) }
	if c.Profile != "" {
		facts = stateFacts(facts, resolvedPath(c.Profile), c.Name, live)
	}
	plan, src, err := c.loadPlan(facts)
	if err != nil {
		return nil, upSource{}, nil, err
	}
	if err := stateClash(plan, cmp.Or(c.Profile, c.PlanJSON), live); err != nil {
		return nil, upSource{}, nil, err
	}
	prof := plan.ProfilePath
	if prof == "" && c.PlanJSON != "" {
		prof, _ = filepath.Abs(c.PlanJSON)
	}
	if real, err := filepath.EvalSymlinks(prof); err == nil {
		prof = real
	}
	e := daemons.Entry{
		Name: plan.Name, Profile: prof, Socket: plan.ControlSocket, PID: os.Getpid(),
		StartedAt: time.Now(), Ports: planPorts(plan), GatewayURL: plan.Gateway.URL,
		LogFile: daemonLog(plan), Records: supervisor.RecordDir(plan),
	}
	// The same run folder's leftovers are this daemon's to kill before it
	// starts anything (supervisor/orphans.go); another folder's would lose
	// their only entry.
	if err := deadNameInUse(reg, e); err != nil {
		return nil, upSource{}, nil, err
	}
	if c.NoGateway {
		e.GatewayURL = ""
	}
	if err := reg.Add(e); err != nil {
		var inUse *daemons.InUseError
		if errors.As(err, &inUse) {
			return nil, upSource{}, nil, &exitError{code: 1, msg: "tsd: " + err.Error()}
		}
		return nil, upSource{}, nil, err
	}
	pid := os.Getpid()
	return plan, src, func() { _ = reg.Remove(e.Name, pid) }, nil
}

// deadNameInUse refuses to register e over a dead deployment of the same
// name whose leftovers live in another run folder.
func deadNameInUse(reg *daemons.Registry, e daemons.Entry) error {
	dead, err := reg.Dead()
	if err != nil {
		return err
	}
	for _, d := range dead {
		if d.Name != e.Name || d.Records == e.Records {
			continue
		}
		if n := len(supervisor.Leftovers(d.Records)); n > 0 {
			return &exitError{code: 1, msg: fmt.Sprintf("tsd: a dead deployment named %q (profile %s) left %s running; stop them with `tsd stop %s`, or give this profile another name",
				d.Name, d.Profile, processes(n), d.Name)}
		}
	}
	return nil
}

// planPorts is every TCP port a plan binds or has its engines bind.
func planPorts(p *profiles.Plan) []int {
	var out []int
	add := func(hostport string) {
		hostport = strings.TrimPrefix(hostport, "tcp://")
		if _, port, err := net.SplitHostPort(hostport); err == nil {
			if n, err := strconv.Atoi(port); err == nil && n > 0 {
				out = append(out, n)
			}
		}
	}
	add(p.Gateway.Listen)
	for _, w := range p.Gateway.Workers {
		add(w.Handshake)
		add(w.Bootstrap)
		add(w.URL)
	}
	for _, r := range p.Roles {
		out = append(out, r.PortCluster...)
		if r.BootstrapPort > 0 {
			out = append(out, r.BootstrapPort)
		}
		out = append(out, r.KVEvents.Ports()...)
	}
	return out
}

// daemonLog is where a daemon's own output goes: beside the roles' logs.
func daemonLog(p *profiles.Plan) string {
	if p.LogDir == "" {
		return ""
	}
	return filepath.Join(p.LogDir, "tsd.log")
}

// runSupervisor is the supervisor and gateway in this process: the daemon
// body, and `tsd up --headless`.
func (c upCmd) runSupervisor() error {
	started := time.Now() // tsd_uptime_seconds
	tuneGCForServing()
	plan, src, unregister, err := c.register()
	if err != nil {
		return err
	}
	defer unregister()
	for _, w := range plan.Warnings {
		fmt.Fprintln(os.Stderr, "warning:", w)
	}
	tty := isTerminal(os.Stdout)
	daemon := c.StatusFD > 0

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.checkFakes(plan); err != nil {
		return err
	}
	tel := telemetry.New(telemetry.Options{FakeGPUs: c.FakeGPUs, FakeNPUs: c.FakeNPUs, Accelerator: plan.Accelerator})
	telDone := make(chan struct{})
	go func() { defer close(telDone); _ = tel.Run(ctx) }()
	defer func() { cancel(); <-telDone }()

	// One registry for the process (docs/architecture.md §D8): the gateway serves it
	// on /metrics with telemetry's GPU and role gauges beside its own.
	reg := prometheus.NewRegistry()
	registerProcessCollectors(reg, tel)
	var gw supervisor.Gateway
	// Built before both the gateway and the supervisor and handed to each:
	// the deployment's event list (the gateway's verdicts — a panic
	// recovered, a rank stalled or re-admitted — go beside the roles'),
	// and which process runs each role, which the gateway's lane admits
	// (docs/architecture.md §D12).
	events := supervisor.NewEventLog()
	runs := supervisor.NewRuns()
	// The gateway's log (its warnings, one access line per request) is a
	// log source of its own: rotated like a role's, and served as
	// "gateway" to `tsd logs` and the dashboard.
	var gwLog *supervisor.LogSource
	if newGateway != nil && !c.NoGateway {
		if gwLog, err = supervisor.NewLogSource(supervisor.GatewayLogSource, supervisor.LogSourceOptions{Lines: c.LogLines, Path: plan.Gateway.LogFile, FileMax: int64(plan.LogMaxMB) << 20, FileKeep: plan.LogKeep}); err != nil {
			return fmt.Errorf("open gateway log: %w", err)
		}
		defer gwLog.Close()
		var problem string
		if gw, problem, err = newGateway(plan, reg, gwLog, events, runs); err != nil {
			return fmt.Errorf("create gateway: %w", err)
		}
		if problem != "" {
			fmt.Fprintln(os.Stderr, red(isTerminal(os.Stderr), "tsd: "+problem))
		}
	}

	// A daemon's output is a file that lives as long as the deployment
	// (days): the engines' own lines are in their rotated log files, so
	// it keeps only tsd's notes and events.
	out := headless.New(os.Stdout, headless.Options{Colour: tty, NotesOnly: daemon})
	// The dashboard's test request (key t) is sent from the daemon, which
	// knows the gateway, the model name and the API key.
	tester := &probe.Target{URL: plan.Gateway.URL, Model: plan.ServedModelName, APIKeyEnv: plan.Gateway.APIKeyEnv}
	if gw == nil {
		tester.URL = ""
	}
	var steps *slurmSteps // what each Slurm role's step got (cmd/tsd/slurm.go)
	if plan.Launcher == profiles.LauncherSlurm {
		steps = newSlurmSteps(plan)
	}
	// The plan that runs now (tsd apply changes it): the supervisor's,
	// once it exists.
	var current func() *profiles.Plan
	planNow := func() *profiles.Plan {
		if current != nil {
			return current()
		}
		return plan
	}
	opts := supervisor.Options{
		Plan:        plan,
		Gateway:     gw,
		Preflight:   func(p *profiles.Plan) []error { return preflight(p, hostGPUs(tel, 3*time.Second)) },
		NoProgress:  c.NoProgress,
		LogLines:    c.LogLines,
		LogFileMax:  int64(plan.LogMaxMB) << 20, // 0: the default
		LogFileKeep: plan.LogKeep,
		GatewayLog:  gwLog,
		Telemetry:   telemetry.NewDecorator(tel, telemetryWatch(planNow, steps)),
		OnEvent:     out.Event,
		Events:      events,
		Runs:        runs,
		TestRequest: tester.Send,
		// tsd apply and tsd scale (docs/architecture.md §4.3): the
		// profile to change, the host as a new plan sees it, and the
		// registry's record of the ports each new plan claims.
		Profile:       src.profile,
		ProfileSource: src.data,
		ApplyFacts: func() (profiles.HostFacts, error) {
			f := applyFacts(tel)
			f.Name, f.GatewayPort = plan.Name, c.Port // as tsd up planned it
			return f, nil
		},
		OnPlan:      func(p *profiles.Plan) { claimPorts(p) },
		TrendPeriod: c.TrendPeriod,
	}
	sup, err := supervisor.New(opts)
	if err != nil {
		return err
	}
	current = sup.Plan
	tester.Key = sup.APIKey // tsd apply may change it
	// The SLO planner's series (tsd_planner_*), read from the snapshot
	// at each scrape (docs/architecture.md §4.5).
	reg.MustRegister(planner.NewCollector(func() *snapshot.PlannerStatus { return sup.Snapshot().Planner }))
	// The roles' states, restarts, exits and uptime, beside the gateway's
	// and telemetry's series on the one registry.
	reg.MustRegister(rolemetrics.New(sup.Snapshot, started, nil))

	// First Ctrl-C (or SIGTERM, or SIGHUP in the foreground): orderly
	// shutdown. Second: SIGKILL every process group now. A daemon has no
	// terminal; a stray SIGHUP must not stop it.
	sigs := make(chan os.Signal, 2)
	if daemon {
		signal.Ignore(syscall.SIGHUP)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	} else {
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	}
	defer signal.Stop(sigs)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if plan.Launcher == profiles.LauncherSlurm {
		go watchSlurmJob(runCtx, plan.SlurmJob, stopRun)
		go steps.run(runCtx)
	}
	go func() {
		n := 0
		for range sigs {
			n++
			if n == 1 {
				fmt.Fprintf(os.Stderr, "tsd: stopping: requests in flight drain (up to %s), then every role stops (Ctrl-C again to cut and kill now)\n", supervisor.HumanDuration(supervisor.PlanDrain(sup.Plan())))
				stopRun()
				continue
			}
			fmt.Fprintln(os.Stderr, "tsd: killing every process group")
			sup.Kill()
		}
	}()

	logsDone := out.Follow(sup)
	runErr := make(chan error, 1)
	go func() { runErr <- sup.Run(runCtx) }()
	if daemon {
		select {
		case <-sup.Started():
			reportStatus(c.StatusFD, "started", plan.ControlSocket)
		case err := <-runErr:
			runErr <- err
		}
	}
	if err := <-runErr; err != nil {
		return err
	}
	<-logsDone
	var failed []string
	for _, r := range sup.Snapshot().Roles {
		if r.State == snapshot.StateFailed {
			failed = append(failed, fmt.Sprintf("%s failed: %s", r.Name, r.Reason))
		}
	}
	if len(failed) > 0 {
		return &exitError{code: 1, msg: "tsd: " + strings.Join(failed, "\ntsd: ")}
	}
	return nil
}

// registerProcessCollectors puts telemetry's GPU and role gauges on reg,
// and the daemon's own goroutines, fds and RSS: a leak under faults shows
// on /metrics (make chaos checks them against their baseline). Every
// series is listed in docs/metrics.md (metrics_doc_test.go).
func registerProcessCollectors(reg prometheus.Registerer, tel *telemetry.Telemetry) {
	reg.MustRegister(tel.Collector())
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// applyFacts are the host facts tsd apply and tsd scale plan with in the
// daemon: the ports every deployment in the registry claims are taken
// (the supervisor counts the running plan's own as free), and the GPUs
// telemetry sees are the ones free GPUs are picked from.
func applyFacts(tel *telemetry.Telemetry) profiles.HostFacts {
	facts := profiles.LocalHostFacts()
	facts.GPUs = hostGPUs(tel, 3*time.Second)
	if reg, err := daemons.Open(""); err == nil {
		if claimed, err := reg.Claimed(); err == nil {
			free := facts.PortFree
			facts.PortFree = func(p int) bool { return !claimed[p] && free(p) }
		}
	}
	return facts
}

// claimPorts records in the registry the ports the daemon's plan uses
// now, so other deployments' plans keep clear of them.
func claimPorts(p *profiles.Plan) {
	reg, err := daemons.Open("")
	if err != nil {
		return
	}
	unlock, err := reg.Lock()
	if err != nil {
		return
	}
	defer unlock()
	_ = reg.SetPorts(p.Name, os.Getpid(), planPorts(p))
}

// checkFakes refuses simulated devices of the other kind than the plan's
// accelerator: roles would be handed devices the panel cannot show.
func (c upCmd) checkFakes(plan *profiles.Plan) error {
	ascend := plan.Accelerator == profiles.AcceleratorAscend
	switch {
	case c.FakeGPUs > 0 && c.FakeNPUs > 0:
		return errors.New("--fake-gpus and --fake-npus: pick one")
	case c.FakeNPUs > 0 && !ascend:
		return fmt.Errorf("--fake-npus needs a profile with accelerator: ascend (this plan is for %s)", orNVIDIA(plan.Accelerator))
	case c.FakeGPUs > 0 && ascend:
		return errors.New("--fake-gpus simulates NVIDIA GPUs but the profile says accelerator: ascend; use --fake-npus")
	}
	return nil
}

func orNVIDIA(a string) string {
	if a == "" {
		return profiles.AcceleratorNVIDIA
	}
	return a
}

// embeddedGateway is the gateway package's Gateway with the OpenAI front end
// mounted, logging to logw (the gateway's log source: its file and its
// ring), serving reg on /metrics, reporting its verdicts to events and
// admitting to each role's lane only the processes runs names. problem
// is what the operator must fix before it is fully usable (the OpenAI
// API is off), "" when nothing.
func embeddedGateway(plan *profiles.Plan, reg *prometheus.Registry, logw io.Writer, events *supervisor.EventLog, runs *supervisor.Runs) (gw supervisor.Gateway, problem string, err error) {
	log := slog.New(slog.NewTextHandler(logw, nil))
	mount, prompts, problem := frontEnds(plan, log)
	g, err := gateway.New(plan, gateway.Options{Logger: log, Registry: reg, Mount: mount, TokenizerCache: prompts,
		StallTimeout: plan.Gateway.StallTimeout.D(), QueueTimeout: plan.Gateway.QueueTimeout.D(),
		OnEvent: events.Gateway, PeerCheck: peerCheck(plan, runs.PIDs)})
	if err != nil {
		return nil, "", err
	}
	if problem == "" {
		return g, "", nil
	}
	return problemGateway{g, problem}, problem, nil
}

// peerCheck admits to a role's lane only processes of its current run's
// tree. A Slurm step's engine runs under slurmstepd on its node, outside
// tsd's tree, so those roles are not checked (like remote ones).
func peerCheck(plan *profiles.Plan, roots func(role string) []int) func(role string, peer lane.PeerInfo) error {
	tree := lane.TreeCheck(roots)
	return func(role string, peer lane.PeerInfo) error {
		if rp, ok := plan.Role(role); ok && rp.Launcher == profiles.LauncherSlurm {
			return nil
		}
		return tree(role, peer)
	}
}

// problemGateway adds a problem found while building the gateway (the
// OpenAI API is off) to every status, so the dashboard, `tsd status` and
// the headless output show it in red instead of only the gateway log.
type problemGateway struct {
	*gateway.Gateway
	problem string
}

func (g problemGateway) Status() snapshot.GatewayStatus {
	s := g.Gateway.Status()
	if s.Problem == "" {
		s.Problem = g.problem
	}
	return s
}

// red colours s on a terminal.
func red(colour bool, s string) string {
	if !colour {
		return s
	}
	return "\x1b[31m" + s + "\x1b[0m"
}

// upSource is the profile a deployment's plan came from and the file's
// bytes (tsd scale edits it, profile_revision names it); empty for a
// plan file (--plan-json).
type upSource struct {
	profile *profiles.Profile
	data    []byte
}

func (c upCmd) loadPlan(facts profiles.HostFacts) (*profiles.Plan, upSource, error) {
	plan, src, err := c.loadPlanOnly(facts)
	if err == nil && c.Name != "" {
		plan.Name = c.Name
	}
	return plan, src, err
}

func (c upCmd) loadPlanOnly(facts profiles.HostFacts) (*profiles.Plan, upSource, error) {
	if c.PlanJSON != "" {
		b, err := os.ReadFile(c.PlanJSON)
		if err != nil {
			return nil, upSource{}, fmt.Errorf("read plan: %w", err)
		}
		var p profiles.Plan
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, upSource{}, fmt.Errorf("decode plan %s: %w", c.PlanJSON, err)
		}
		return &p, upSource{}, nil
	}
	if c.Profile == "" {
		return nil, upSource{}, errors.New("tsd up needs a PROFILE")
	}
	facts, err := hostFacts(c.Launcher, c.Profile, facts, false)
	if err != nil {
		return nil, upSource{}, err
	}
	if c.Name != "" {
		facts.Name = c.Name
	}
	if c.Port != 0 {
		if c.Port < 1 || c.Port > 65535 {
			return nil, upSource{}, &exitError{code: 2, msg: fmt.Sprintf("tsd: --port %d: not a port (1-65535)", c.Port)}
		}
		facts.GatewayPort = c.Port
	}
	// Read once: the bytes planned are the bytes the revision names.
	data, rerr := profiles.ReadSource(c.Profile)
	if rerr != nil {
		return nil, upSource{}, profileErrors(profiles.Errors{{File: c.Profile, Msg: fmt.Sprintf("read profile: %v", rerr)}})
	}
	p, errs := profiles.Parse(c.Profile, data)
	if len(errs) > 0 {
		return nil, upSource{}, profileErrors(errs)
	}
	plan, errs := profiles.MakePlan(p, facts)
	if len(errs) > 0 {
		return nil, upSource{}, profileErrors(errs)
	}
	return plan, upSource{profile: p, data: data}, nil
}

// preflight runs the profiles package's host checks; warnings are printed,
// errors stop `tsd up` before anything starts. gpus nil: unknown.
func preflight(plan *profiles.Plan, gpus []profiles.GPU) []error {
	env := profiles.LocalPreflightEnv()
	env.GPUs = gpus
	var errs []error
	for _, p := range profiles.Preflight(plan, env) {
		if p.Severity == profiles.SeverityError {
			errs = append(errs, errors.New(p.String()))
		} else {
			fmt.Fprintln(os.Stderr, p.String())
		}
	}
	return errs
}

// hostGPUs is the GPU list telemetry found (NVML, nvidia-smi or simulated),
// so preflight can check the profile's GPUs by UUID; nil when there is no
// GPU provider or the first poll takes longer than wait.
func hostGPUs(tel *telemetry.Telemetry, wait time.Duration) []profiles.GPU {
	ch, cancel := tel.Subscribe()
	defer cancel()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case r := <-ch:
			if r.GPUPolledAt.IsZero() {
				if r.Panel.Provider == telemetry.ProviderNone && r.Panel.Note != telemetry.ProbingNote {
					return nil
				}
				continue
			}
			gpus := make([]profiles.GPU, 0, len(r.GPUs))
			for _, g := range r.GPUs {
				gpus = append(gpus, profiles.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name})
			}
			return gpus
		case <-timer.C:
			return nil
		}
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// telemetryWatch says what telemetry watches for each role (the GPU↔role
// join itself is telemetry.Decorator's): its process tree and the devices
// its plan gives it; a Slurm role's engine runs under slurmstepd, not
// under its pid (srun's), so it gets no process readings rather than
// srun's, and its GPUs are the ones Slurm gave the step, read on this
// node only when the step runs here.
func telemetryWatch(planNow func() *profiles.Plan, steps *slurmSteps) func(r *snapshot.RoleStatus) telemetry.RoleInfo {
	return func(r *snapshot.RoleStatus) telemetry.RoleInfo {
		info := telemetry.RoleInfo{Name: r.Name, RootPID: r.PID}
		plan := planNow()
		rp, ok := plan.Role(r.Name)
		if !ok {
			return info
		}
		info.CudaVisibleDevices = rp.Env[plan.DevicesVar()] // ASCEND_RT_VISIBLE_DEVICES on NPUs
		if rp.Launcher == profiles.LauncherSlurm {
			st, have := steps.get()[r.Name]
			info.RootPID = 0
			info.CudaVisibleDevices = slurmRoleView(rp, st, have, r)
		}
		return info
	}
}

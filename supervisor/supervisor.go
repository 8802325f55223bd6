// Package supervisor runs a Plan: it binds the gateway, starts every local
// role under an orphan guardian, restarts roles by a pure policy, captures
// their logs and publishes immutable Snapshots.
//
// Use:
//
//	sup, err := supervisor.New(supervisor.Options{Plan: plan, Gateway: gw})
//	go sup.Run(ctx)                       // until ctx ends, Shutdown, or `tsd stop`
//	cur, ch, cancel := sup.Subscribe()    // snapshot, then newer ones
//	backlog, batches, stop, err := sup.SubscribeLogs("decode") // "" = all roles
//	sup.Restart("decode")                 // also Stop, Start, RestartAll, StopAll; *Now skip the drain
//	sup.RollingRestart(ctx, "decode", false, nil) // one instance at a time
//
// Each role's lifecycle is data: typed phases and a pure step function
// (lifecycle.go) from (lifecycle, event) to the next lifecycle and the
// effects to carry out, each with its arguments; the actor runs events
// through a queue, so effects hand what they learn back as events
// (docs/architecture.md §4.1). Drain before a stop or restart, stalls (a
// stopped process tree, or ranks the gateway reports silent), the
// no-progress deadline, remote roles and rolling restarts (rolling.go)
// are phases and events like any other. The gateway hears one view of
// each role (SetRole, §4.2). Every live group is
// recorded in the run folder, and run in its own cgroup where writable
// (orphans.go), so a tsd that dies with its guardians leaves nothing the
// next `tsd up` does not kill.
//
// Each role instance is owned by one actor goroutine (actor.go) that starts
// `tsd _guard` (guardian.go), which starts the engine in its own process
// group and tears the group down when asked or when tsd dies. Restart
// decisions come from Decide (restart.go), a pure function. Output is read
// by one goroutine per run into a bounded ring and a rotated file
// (capture.go, logring.go) and never waits for readers. The publisher
// (publisher.go) owns the Snapshot. The control socket (control.go) serves
// `tsd status|restart|stop|logs`.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Telemetry decorates each Snapshot with the latest GPU and per-process
// readings. Decorate runs on the publisher goroutine for every snapshot, so
// it must be cheap (copy cached readings; no I/O) and only assign fields of
// s (s.GPUs, s.GPUInfo, s.Roles[i].Proc, s.Roles[i].GPUMemB,
// s.Roles[i].GPUUUIDs), never mutate slices it did not make. The role PIDs
// it needs are in s.Roles[i].PID (the engine's pid = its process group).
type Telemetry interface {
	Decorate(s *snapshot.Snapshot)
}

// GPUReleaseVerifier is a Telemetry that can also tell whether a stopped
// role's GPU memory was released (docs/architecture.md §4: on stop/restart the
// group is verified empty and, where GPU readings exist, the memory freed).
// A Telemetry without it gets the group check alone.
type GPUReleaseVerifier interface {
	// HoldGPUs notes what role holds on its GPUs now. It runs on the role's
	// actor goroutine when a requested stop begins, so it must be cheap (no
	// I/O). It returns nil when there is nothing to verify (no GPU
	// readings, no GPU mapped to the role); otherwise the wait the actor
	// runs on its own goroutine once the group is verified empty: it
	// returns when the memory is released or ctx ends, with one line for
	// the role's log ("GPU memory released (2048 MiB freed on GPU-…)").
	HoldGPUs(role string) func(ctx context.Context) (released bool, msg string)
}

// Options configure a Supervisor. Only Plan is required.
type Options struct {
	Plan *profiles.Plan
	// Gateway is the embedded gateway; nil runs engines without one, and a
	// role is then ready when its launcher logs "headless scheduler(s) ready".
	Gateway Gateway
	// Preflight runs before anything starts; every problem it returns is
	// reported at once. nil skips it.
	Preflight func(*profiles.Plan) []error

	LogLines    int   // per-role ring size in lines (default 10,000)
	LogBytes    int   // per-role ring size in bytes (default 32 MiB)
	LogFileMax  int64 // rotate a role's log file past this size (default 100 MiB)
	LogFileKeep int   // rotated files kept (default 3)
	NoLogFiles  bool  // do not write per-role log files
	// GatewayLog is the embedded gateway's log (GatewayLogSource), which
	// the caller hands the gateway as its log writer; nil: an empty one in
	// memory, so `tsd logs gateway` still answers.
	GatewayLog *LogSource

	// NoProgress stops a starting role that printed no line and reached no
	// milestone for this long (default 15m; negative disables).
	NoProgress time.Duration
	// ShutdownGrace, when set, bounds the gateway's drain on shutdown;
	// default: the plan's longest restart.drain_timeout (PlanDrain), or
	// what tsd stop asked for (ShutdownDrain).
	ShutdownGrace time.Duration

	// ControlSocket is the unix socket for `tsd status|restart|stop|logs`;
	// default Plan.ControlSocket; "-" disables it.
	ControlSocket string

	// GuardExe and GuardArgs start the guardian: default /proc/self/exe
	// with ["_guard"]. The guardian gets "--grace D -- argv..." appended.
	GuardExe  string
	GuardArgs []string

	Telemetry Telemetry
	// GPUReleaseTimeout bounds the wait for a stopped role's GPU memory to
	// be released when Telemetry is a GPUReleaseVerifier (default 15s;
	// negative skips the check). Past it the role still stops, and its
	// Reason says the memory was not released.
	GPUReleaseTimeout time.Duration
	// StallScan is how often every role's process tree is checked for
	// stopped processes (default 500ms; negative disables).
	StallScan time.Duration
	// OnEvent, if set, sees every event as it is recorded (headless output).
	// It runs on the publisher goroutine and must not block.
	OnEvent func(snapshot.Event)
	// TrendPeriod is the trend rings' sample period (snapshot/trend;
	// default a second, for ten minutes of samples). Tests shorten it so
	// that minutes of samples take seconds.
	TrendPeriod time.Duration
	// Events is the deployment's event log, built before the gateway
	// that writes into it too (NewEventLog); nil: a private one.
	Events *EventLog
	// Runs is the table of each role's current process, built before the
	// gateway that reads it (NewRuns); nil: a private one.
	Runs *Runs
	// TestRequest, if set, serves the control socket's test-request (the
	// dashboard's key t): one short request through the gateway.
	TestRequest func(ctx context.Context) (reply string, latency time.Duration, err error)

	// Profile and ProfileSource are the loaded profile the plan came from
	// and the file's bytes: the base tsd scale edits and what
	// profile_revision names. nil: the plan came from elsewhere
	// (--plan-json), and only tsd apply of a profile changes it.
	Profile       *profiles.Profile
	ProfileSource []byte
	// ApplyFacts are the host facts tsd apply and tsd scale plan with:
	// other deployments' ports taken, the GPUs telemetry sees; nil:
	// profiles.LocalHostFacts. The supervisor sets Running and counts the
	// running plan's own ports as free.
	ApplyFacts func() (profiles.HostFacts, error)
	// OnPlan hears every running plan an apply step makes (the registry
	// records its ports). It runs on the apply's goroutine.
	OnPlan func(*profiles.Plan)

	Now  func() time.Time // default time.Now
	Rand func() float64   // jitter source, default math/rand/v2
}

// Supervisor runs one Plan. Create it with New, then call Run once.
//
// It is the deployment's public face and the wiring between the owners
// that do the work, each its own type: the roster (which instances run,
// the one place names map to ids, roster.go), one actor per instance
// (actor.go), the publisher (the Snapshot, publisher.go), the applier
// (tsd apply and tsd scale, apply.go and applyrun.go), the SLO planner's
// loop (planner.go), the stopper (the whole deployment's stop, stop.go),
// the orphan recorder (orphans.go) and the control socket's server
// (control.go), which sees the supervisor only through the interfaces it
// defines.
type Supervisor struct {
	opts  Options
	plan  *runningPlan // the plan that runs now: tsd up's, then each apply step's
	gw    Gateway
	now   func() time.Time
	env   *env // what every actor shares
	gwLog *LogSource

	roster  *rosterOwner
	pub     *publisher
	events  *EventLog
	runs    *Runs
	rec     *groupRecords
	apply   *applier
	planner *plannerLoop
	stop    *stopper

	running  chan struct{} // closed when Run starts the actors
	teardown chan struct{} // closed when Run starts tearing down: an apply in progress stops
	ran      atomic.Bool
	closing  atomic.Bool  // tsd shuts down: ranks dropping from now on are part of it
	rolling  atomic.Int32 // rolling restarts under way (the planner waits for them)
}

// runningPlan is the plan that runs now; each new one is told to onPlan
// (the registry records its ports).
type runningPlan struct {
	v      atomic.Pointer[profiles.Plan]
	onPlan func(*profiles.Plan)
}

func (r *runningPlan) load() *profiles.Plan { return r.v.Load() }

// set makes plan the running one and tells onPlan.
func (r *runningPlan) set(plan *profiles.Plan) {
	r.v.Store(plan)
	if r.onPlan != nil {
		r.onPlan(plan)
	}
}

// Errors returned by the controls.
var (
	ErrUnknownRole = errors.New("unknown role")
	ErrNotRunning  = errors.New("supervisor is not running")
)

// New prepares a Supervisor: rings, log files and the initial Snapshot.
// Nothing is started until Run.
func New(opts Options) (*Supervisor, error) {
	if opts.Plan == nil {
		return nil, errors.New("supervisor needs a plan")
	}
	if opts.NoProgress == 0 {
		opts.NoProgress = 15 * time.Minute
	}
	if opts.GPUReleaseTimeout == 0 {
		opts.GPUReleaseTimeout = 15 * time.Second
	}
	if opts.StallScan == 0 {
		opts.StallScan = 500 * time.Millisecond
	}
	s := &Supervisor{
		opts: opts, gw: opts.Gateway,
		now: opts.Now, events: opts.Events, runs: opts.Runs,
		plan:     &runningPlan{onPlan: opts.OnPlan},
		rec:      newGroupRecords(RecordDir(opts.Plan)),
		stop:     newStopper(opts.ShutdownGrace),
		teardown: make(chan struct{}),
		running:  make(chan struct{}),
	}
	s.plan.v.Store(opts.Plan)
	if s.now == nil {
		s.now = time.Now
	}
	if s.events == nil {
		s.events = newEventLog(s.now)
	}
	if s.runs == nil {
		s.runs = NewRuns()
	}
	s.roster = newRosterOwner(s.makeActor, func(id int) { s.pub.in <- pubMsg{id: id, forget: true} })
	s.runs.lookup(func(role string) (int, bool) {
		m, ok := s.roster.current().route(role)
		return m.id, ok
	})
	s.env = s.newEnv()
	if err := s.roster.init(opts.Plan.Roles); err != nil {
		return nil, err
	}
	s.apply = newApplier(s, opts)
	s.planner = newPlannerLoop(s)
	s.pub = newPublisher(s)
	s.env.pub, s.apply.pub = s.pub, s.pub
	if s.gwLog = opts.GatewayLog; s.gwLog == nil {
		s.gwLog, _ = NewLogSource(GatewayLogSource, LogSourceOptions{Lines: opts.LogLines, Bytes: opts.LogBytes})
	} else if s.gwLog.file != nil {
		s.gwLog.file.setOnHealth(func(msg string) {
			s.pub.tryEvent(GatewayLogSource, msg)
			s.gwLog.ring.append([]LogLine{{Time: s.now(), Text: "[tsd] " + msg, Note: true}})
		})
	}
	return s, nil
}

// makeActor builds the actor of instance id: its ring (whose lines carry
// the instance's name as the roster has it), its log file and its first
// state.
func (s *Supervisor) makeActor(id int, rp profiles.RolePlan) (*actor, error) {
	ring := newNamedRing(func() string { return s.roster.nameOf(id) }, s.opts.LogLines, s.opts.LogBytes)
	var file *rotatingFile
	if rp.Local && rp.LogFile != "" && !s.opts.NoLogFiles {
		f, err := openRotating(rp.LogFile, s.opts.LogFileMax, s.opts.LogFileKeep)
		if err != nil {
			return nil, fmt.Errorf("role %s: %w", rp.Name, err)
		}
		file = f
	}
	a := newActor(s.env, id, rp, ranksExpected(rp, s.Plan().Gateway.Mode), ring, file)
	a.watchFile()
	return a, nil
}

// newEnv is what every actor of this supervisor shares (its publisher
// is set once made).
func (s *Supervisor) newEnv() *env {
	e := &env{
		now: s.now, rand: s.opts.Rand, gw: s.gw, names: s.roster, rec: s.rec, runs: s.runs,
		gpuLimit: s.opts.GPUReleaseTimeout, noProgress: s.opts.NoProgress, closing: &s.closing,
		guardExe: s.opts.GuardExe, guardArgs: s.opts.GuardArgs, plan: &s.plan.v,
	}
	if e.rand == nil {
		e.rand = rand.Float64
	}
	if e.guardExe == "" {
		e.guardExe = "/proc/self/exe"
		if e.guardArgs == nil {
			e.guardArgs = []string{"_guard"}
		}
	}
	if v, ok := s.opts.Telemetry.(GPUReleaseVerifier); ok {
		e.gpus = v
	}
	return e
}

// Run runs the deployment until ctx ends, Shutdown is called or `tsd stop`
// arrives on the control socket; then it tears everything down (gateway
// drain, every role stopped and verified, sockets removed) and returns.
// It fails before starting anything if preflight finds problems or the
// gateway or control socket cannot bind.
func (s *Supervisor) Run(ctx context.Context) error {
	if s.ran.Swap(true) {
		return errors.New("supervisor: Run called twice")
	}
	defer s.roster.closeFiles()

	pubStop := make(chan struct{})
	pubDone := make(chan struct{})
	go func() { s.pub.loop(pubStop); close(pubDone) }()
	defer func() { close(pubStop); <-pubDone }()
	rosterStop := make(chan struct{})
	go s.roster.loop(rosterStop)
	stopRoster := sync.OnceFunc(func() { close(rosterStop); <-s.roster.done })
	defer stopRoster()

	// The control socket first: a second `tsd up` of the same profile
	// should hear "another tsd is running", not a list of busy ports.
	ctl, err := listenControl(s.control())
	if err != nil {
		return err
	}
	// Before preflight: a group a dead tsd left holds the very ports and
	// GPUs preflight checks. Only after the control socket: a live tsd's
	// groups are never touched.
	if msg := s.rec.cleanOrphans(); msg != "" {
		s.pub.event("", msg)
	}
	if s.opts.Preflight != nil {
		if errs := s.opts.Preflight(s.Plan()); len(errs) > 0 {
			ctl.close()
			return &PreflightError{Problems: errs}
		}
	}
	if s.gw != nil {
		if err := s.gw.Bind(ctx); err != nil {
			ctl.close()
			// Bind may have bound part of the sockets before failing.
			sctx, cancel := context.WithTimeout(context.Background(), unbindGrace)
			_ = s.gw.Shutdown(sctx)
			cancel()
			return fmt.Errorf("bind gateway: %w", err)
		}
	}

	serveErr := make(chan error, 1)
	serveCtx, stopServe := context.WithCancel(context.Background())
	defer stopServe()
	var rankDone chan struct{}
	var rankCancel func()
	if s.gw != nil {
		go func() { serveErr <- s.gw.Serve(serveCtx) }()
		cur, changes, cancel := s.gw.SubscribeRanks()
		rankStop := make(chan struct{})
		rankCancel = func() { close(rankStop); cancel() }
		rankDone = make(chan struct{})
		go fanRanks(s.roster.current, cur, changes, rankStop, rankDone)
	}

	s.rec.open()
	defer s.rec.close()
	for _, m := range s.roster.current().members {
		go m.a.run(true)
	}
	scanStop, scanDone := make(chan struct{}), make(chan struct{})
	if s.opts.StallScan > 0 {
		go func() { defer close(scanDone); scanStalls(scanStop, s.opts.StallScan, s.roster.current, s.runs) }()
	} else {
		close(scanDone)
	}
	defer func() { close(scanStop); <-scanDone }()
	plannerStop := make(chan struct{})
	go s.planner.run(plannerStop)
	stopPlanner := sync.OnceFunc(func() { close(plannerStop); <-s.planner.done })
	defer stopPlanner()
	close(s.running)

	var runErr error
	select {
	case <-ctx.Done():
	case <-s.stop.shuttingDown():
	case err := <-serveErr:
		if err != nil && !errors.Is(err, context.Canceled) {
			runErr = fmt.Errorf("gateway stopped: %w", err)
			s.pub.event("", "gateway stopped: "+err.Error())
		}
	}
	s.closing.Store(true) // ranks dropping from here on are part of the shutdown
	close(s.teardown)     // an apply in progress stops
	stopPlanner()         // and no planner move starts
	s.pub.event("", "shutting down")

	// Reverse of startup: stop HTTP and drain, stop engines, unbind.
	s.stop.drainGateway(s.gw, s.Plan(), s.now(), s.pub.event)
	// No roster change from here on: every actor an apply added is in
	// the last roster, and each one is stopped.
	stopRoster()
	members := s.roster.current().members
	for _, m := range members {
		m.a.send(event{Kind: evQuit, Why: whyQuit})
	}
	for _, m := range members {
		<-m.a.done
	}
	close(s.stop.done) // a tsd stop that follows the stop answers before the socket closes
	stopServe()
	if rankCancel != nil {
		rankCancel()
		<-rankDone
	}
	ctl.close()
	removeSockets(s.Plan())
	return runErr
}

// PreflightError lists every preflight problem at once.
type PreflightError struct{ Problems []error }

func (e *PreflightError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "preflight found %d problem(s):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.Error())
	}
	return b.String()
}

func (e *PreflightError) Unwrap() []error { return e.Problems }

// fanRanks routes the gateway's rank events to the role actors until stop
// is closed (whether or not the gateway closes changes on cancel). The
// gateway names a role; the roster says which instance it means, by its
// name now or the one it had before a rename the gateway may not have
// caught up with.
func fanRanks(roster func() *roster, cur []snapshot.RankEvent, changes <-chan snapshot.RankEvent, stop, done chan struct{}) {
	defer close(done)
	route := func(ev snapshot.RankEvent) {
		if m, ok := roster().route(ev.Role); ok {
			select {
			case m.a.in.ranks <- ev:
			case <-m.a.done:
			case <-stop:
			}
		}
	}
	for _, ev := range cur {
		route(ev)
	}
	for {
		select {
		case ev, ok := <-changes:
			if !ok {
				return
			}
			route(ev)
		case <-stop:
			return
		}
	}
}

// removeSockets removes ipc socket files of the plan left behind (the
// gateway removes its own; this catches a gateway that could not).
func removeSockets(plan *profiles.Plan) {
	for _, w := range plan.Gateway.Workers {
		for _, addr := range []string{w.URL, w.Input, w.Output} {
			if path, ok := strings.CutPrefix(addr, "ipc://"); ok && path != "" {
				if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
					_ = os.Remove(path)
				}
			}
		}
	}
}

// Started is closed once Run has passed preflight, bound the gateway and
// the control socket, and started the roles (a dashboard waits for it so
// that startup errors are printed, not hidden behind the screen).
func (s *Supervisor) Started() <-chan struct{} { return s.running }

// Shutdown asks Run to tear everything down and return (`tsd stop`).
func (s *Supervisor) Shutdown() { s.stop.shutdown() }

// ShutdownDrain asks Run to tear everything down, as Shutdown does, with
// the gateway's drain bounded by d instead of the plan's drain_timeout
// (0: no drain, requests in flight are cut at once).
func (s *Supervisor) ShutdownDrain(d time.Duration) { s.stop.shutdownDrain(d) }

// RolePIDs is the process (group leader) of the role's current run, or
// nil while it has none: the lane admits only that tree's connections to
// the role's sockets (gateway/lane TreeCheck). It reads an atomic, so the
// gateway may ask from any goroutine without waiting on the actor.
func (s *Supervisor) RolePIDs(role string) []int { return s.runs.PIDs(role) }

// Kill sends SIGKILL to every role's process group at once (a second
// Ctrl-C) and makes Run return as soon as the groups are verified empty.
func (s *Supervisor) Kill() {
	s.stop.kill() // a drain under way cuts at once
	for _, m := range s.roster.current().members {
		if pid := s.runs.of(m.id); pid > 0 {
			killGroupNow(pid)
		}
		select {
		case m.a.in.cmds <- event{Kind: evKill, Why: whyKill}:
		default:
		}
	}
	s.Shutdown()
}

// Subscribe returns the current Snapshot and a channel of newer ones
// (coalesced, at most ~10 a second; a slow reader skips stale ones). The
// channel is closed when Run has returned or cancel is called.
func (s *Supervisor) Subscribe() (current snapshot.Snapshot, updates <-chan snapshot.Snapshot, cancel func()) {
	return s.pub.subscribe()
}

// Event records one line in the Snapshot's event list (and the headless
// output), e.g. the gateway's verdicts ("stall", "readmit", "panic")
// through its event sink. role may be "". Safe from any goroutine once
// New has returned; it never blocks: with the publisher's queue full (or
// Run over) the line is dropped, since a gateway goroutine must not wait
// on the dashboard.
func (s *Supervisor) Event(role, msg string) { s.events.Add(role, msg) }

// Snapshot returns the latest published Snapshot.
func (s *Supervisor) Snapshot() snapshot.Snapshot { return s.pub.current() }

// History is a copy of the daemon's trend rings (snapshot/trend): what a
// dashboard that attaches shows of the past. nil once Run has ended.
func (s *Supervisor) History() *snapshot.History { return s.pub.history() }

// Plan returns the plan that runs now: tsd up's, as each apply step
// changed it (`tsd plan --running`). Callers must not modify it.
func (s *Supervisor) Plan() *profiles.Plan { return s.plan.load() }

// Roles lists role instance names in plan order.
func (s *Supervisor) Roles() []string { return s.roster.current().list() }

// command sends role's actor a command (role: its name now); with a
// waiter in c.Reply, the actor answers it once the command's end is
// known.
func (s *Supervisor) command(role string, c event) error {
	m, ok := s.roster.current().find(role)
	if !ok {
		return fmt.Errorf("%w %q (have %s)", ErrUnknownRole, role, strings.Join(s.Roles(), ", "))
	}
	if !m.a.send(c) {
		return ErrNotRunning
	}
	return nil
}

// Restart restarts one role: it leaves routing at once, its in-flight
// requests get up to restart.drain_timeout to finish (what is left then
// ends with an error naming the role), its group is stopped and verified
// empty, it starts again and is re-admitted once its ranks register. A
// manual restart bypasses the restart budget and revives a failed role.
// The call returns once the actor has the command.
func (s *Supervisor) Restart(role string) error { return s.RestartNow(role, false) }

// RestartNow is Restart; with now, in-flight requests end at once (no drain).
func (s *Supervisor) RestartNow(role string, now bool) error {
	return s.command(role, event{Kind: evRestart, Now: now, Why: whyRestart})
}

// Stop stops one role after draining it like Restart (it stays stopped
// until Start or Restart).
func (s *Supervisor) Stop(role string) error { return s.StopNow(role, false) }

// StopNow is Stop; with now, in-flight requests end at once (no drain).
func (s *Supervisor) StopNow(role string, now bool) error {
	return s.command(role, event{Kind: evStop, Now: now, Why: whyStop})
}

// Start starts a stopped, failed or backing-off role now.
func (s *Supervisor) Start(role string) error { return s.command(role, event{Kind: evStart}) }

// RestartAll restarts every local role at once.
func (s *Supervisor) RestartAll() error { return s.all(event{Kind: evRestart, Why: whyRestart}) }

// StopAll stops every local role; tsd and the gateway keep running.
func (s *Supervisor) StopAll() error { return s.all(event{Kind: evStop, Why: whyStop}) }

func (s *Supervisor) all(c event) error {
	var errs []error
	for _, m := range s.roster.current().members {
		if m.local {
			if !m.a.send(c) {
				errs = append(errs, fmt.Errorf("%s: %w", m.name, ErrNotRunning))
			}
		}
	}
	return errors.Join(errs...)
}

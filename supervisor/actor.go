package supervisor

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

type cmdKind int

const (
	cmdStart cmdKind = iota
	cmdStop
	cmdRestart
	cmdQuit
	cmdKill
)

func (c cmdKind) String() string {
	return [...]string{"start", "stop", "restart", "quit", "kill"}[c]
}

// command is one request to an actor; now skips the drain.
type command struct {
	kind cmdKind
	now  bool
}

// runInfo is what the capture goroutine of one run shares with the actor:
// the furthest milestone and the last error-looking line.
type runInfo struct {
	lines    atomic.Uint64 // lines seen; the no-progress check watches it
	matching atomic.Bool   // milestone matching is only needed until ready

	mu        sync.Mutex
	milestone Milestone
	hasMS     bool
	lastErr   string
	// The engine's own progress through the current step (nil when that
	// step printed none), when each step was first seen, and the phase
	// durations measured from them that the actor has yet to publish.
	prog      *snapshot.Progress
	phaseAt   map[string]time.Time
	graphDone bool
	pending   []string
}

// stepped records that the run entered phase at now and returns the
// phase-duration events it completes (docs/architecture.md §4): weights
// loaded, CUDA graphs captured. Called with mu held.
func (info *runInfo) stepped(phase string, now time.Time) {
	if info.phaseAt == nil {
		info.phaseAt = map[string]time.Time{}
	}
	if _, seen := info.phaseAt[phase]; !seen {
		info.phaseAt[phase] = now
	}
	if t, ok := info.phaseAt[PhaseWeights]; ok && phase == PhaseWeightsDone {
		info.pending = append(info.pending, "weights loaded in "+snapshot.FormatDuration(now.Sub(t)))
	}
	if t, ok := info.phaseAt[PhaseGraph]; ok && phase != PhaseGraph && !info.graphDone {
		info.graphDone = true
		info.pending = append(info.pending, "CUDA graphs captured in "+snapshot.FormatDuration(now.Sub(t)))
	}
}

// drainPoll is how often a draining role's in-flight count is read: the
// gateway has no event for "the last request on a role finished".
const drainPoll = 50 * time.Millisecond

// actor owns one role instance: its process, its lifecycle and its
// restart history. Everything below "loop state" is touched only by run().
// Decisions come from step (lifecycle.go); the actor gathers the facts of
// each event and executes the effects step returns.
type actor struct {
	sup    *Supervisor
	idx    int
	plan   profiles.RolePlan
	policy RestartPolicy
	drain  time.Duration // restart.drain_timeout
	ring   *logRing
	file   *rotatingFile

	cmds   chan command
	ranks  chan snapshot.RankEvent
	poke   chan struct{}    // capture saw a milestone
	stalls chan stallReport // the /proc scanner: whether the tree is stopped
	done   chan struct{}
	curPID atomic.Int64 // for Supervisor.Kill and the /proc scanner, which must not wait on the loop

	// loop state
	st           snapshot.RoleStatus
	lc           lifecycle
	proc         *process
	info         *runInfo
	hist         []time.Time
	attempt      int
	backoffT     *time.Timer
	backoffC     <-chan time.Time
	stopC        <-chan time.Time
	failReason   string // why tsd killed the run itself (no progress)
	rankMap      map[int]snapshot.RankStatus
	progressSeen uint64
	progressAt   time.Time
	lastPhase    int
	cgroup       string // this run's cgroup directory, or ""

	// Reasons the show effects use, set with the event that needs them.
	why       string   // why the process is being stopped
	shownWhy  string   // stopped / failed reason
	crashWhy  string   // crashed reason
	crashErr  string   // last error line of a crashed run
	decision  Decision // the restart policy's answer for a crash
	crashHold func(context.Context) (bool, string)
	warn      string // the GPU memory was not seen released

	// Drain: polled while draining.
	drainT     *time.Ticker
	drainC     <-chan time.Time
	drainUntil time.Time
	drainTimed bool // the deadline passed with requests left

	// Stall: two sources, the process tree's state and the gateway's
	// rank reports; stalling is their union, stalledSet whether the
	// gateway was told.
	procStall  string
	gwStall    map[int]bool
	stalling   bool
	stallProc  bool // the stall began with a stopped tree
	stalledSet bool

	// GPU release check of a requested stop: gpuWait is taken when the
	// stop begins; gpuDone is non-nil while the wait runs after the group
	// emptied (the role is then still "stopping").
	gpuWait     func(context.Context) (bool, string)
	pendingWait func(context.Context) (bool, string)
	gpuDone     chan gpuRelease
	gpuCancel   context.CancelFunc
	// GPU release check before an automatic restart after a crash: it
	// runs alongside the backoff timer, and the role starts once both are
	// done (start = max(backoff, release)). relC is non-nil while it runs;
	// it is part of the backoff, so cancelBackoff ends it.
	relC      chan gpuRelease
	relCancel context.CancelFunc
}

type gpuRelease struct {
	ok  bool
	msg string
}

func newActor(s *Supervisor, idx int, rp profiles.RolePlan, ring *logRing, file *rotatingFile) *actor {
	a := &actor{
		sup: s, idx: idx, plan: rp, policy: PolicyFromPlan(rp.Restart), ring: ring, file: file,
		drain:   rp.Restart.DrainTimeout.D(),
		cmds:    make(chan command, 16),
		ranks:   make(chan snapshot.RankEvent, 256),
		poke:    make(chan struct{}, 1),
		stalls:  make(chan stallReport, 1),
		done:    make(chan struct{}),
		rankMap: map[int]snapshot.RankStatus{},
		gwStall: map[int]bool{},
	}
	if a.drain <= 0 {
		a.drain = profiles.DefaultDrainTimeout
	}
	a.st = snapshot.RoleStatus{
		Name: rp.Name, Group: rp.Group, Kind: rp.Kind, GPUs: rp.GPUs, State: snapshot.StatePlanned,
		Worker: rp.Worker, LogFile: rp.LogFile, Remote: !rp.Local,
		RanksExpected: a.ranksExpected(),
	}
	if !rp.Local {
		a.st.State = snapshot.StateRemote
		// Nothing ties a remote engine's lane connections to a process
		// tsd owns: say so where the operator looks (SECURITY.md).
		a.st.Reason = "runs on " + rp.Host + "; waiting for its ranks to dial in; its lane is unauthenticated: keep that network trusted"
	}
	return a
}

// ranksExpected: every attention-DP rank dials the gateway (docs/protocol.md
// §10.2); encode engines do not dial at all upstream (docs/protocol.md §9.1).
func (a *actor) ranksExpected() int {
	if a.plan.Kind == profiles.KindEncode && a.sup.plan.Gateway.Mode != profiles.ModeEPD {
		// Outside epd mode nothing is routed to an encode server, so its
		// launcher's ready line is the signal; in epd mode its rank 0
		// registers on the lane like any role (docs/protocol.md §9.4).
		return 0
	}
	if a.plan.DP > 1 {
		return a.plan.DP
	}
	return 1
}

// send queues a command; false if the actor has ended.
func (a *actor) send(c command) bool {
	select {
	case a.cmds <- c:
		return true
	case <-a.done:
		return false
	}
}

func (a *actor) note(format string, args ...any) {
	a.ring.append([]LogLine{{Time: a.sup.now(), Text: "[tsd] " + fmt.Sprintf(format, args...), Note: true}})
}

func (a *actor) publish() {
	a.sup.pub.role(a.idx, a.roleCopy())
}

func (a *actor) roleCopy() snapshot.RoleStatus {
	st := a.st
	st.Ranks = make([]snapshot.RankStatus, 0, len(a.rankMap))
	for _, r := range a.rankMap {
		st.Ranks = append(st.Ranks, r)
	}
	sort.Slice(st.Ranks, func(i, j int) bool { return st.Ranks[i].Identity < st.Ranks[j].Identity })
	return st
}

func (a *actor) publishChange(msg string) {
	st := a.roleCopy()
	a.sup.pub.in <- pubMsg{idx: a.idx, role: &st, event: &snapshot.Event{Time: a.sup.now(), Role: a.plan.Name, Message: msg}, ring: a.ring}
}

func (a *actor) setState(state, reason string) {
	changed := a.st.State != state || a.st.Reason != reason
	from := a.st.State
	a.st.State, a.st.Reason = state, reason
	if changed {
		msg := from + " → " + state
		if reason != "" {
			msg += ": " + reason
		}
		// The publisher records the event, publishes at once, then adds
		// the same line to the role's log: whoever sees the line can read
		// the new state from the Snapshot.
		a.publishChange(msg)
		return
	}
	a.publish()
}

func (a *actor) run(autostart bool) {
	defer close(a.done)
	a.publish()
	if autostart && a.plan.Local {
		a.fire(event{Kind: evStart})
	}
	tick := a.sup.progressTick()
	defer tick.Stop()
	defer a.endDrain()
	for {
		if a.lc.Quit && a.proc == nil && a.gpuDone == nil {
			a.publish()
			return
		}
		var procDone chan struct{}
		if a.proc != nil {
			procDone = a.proc.done
		}
		select {
		case c := <-a.cmds:
			a.handle(c)
		case <-procDone:
			a.onExit()
		case ev := <-a.ranks:
			a.onRank(ev)
		case <-a.poke:
			a.onMilestone()
		case rep := <-a.stalls:
			a.onProcStall(rep)
		case <-a.drainC:
			a.onDrainTick()
		case r := <-a.gpuDone:
			a.onGPURelease(r)
		case r := <-a.relC:
			a.onCrashRelease(r)
		case <-a.backoffC:
			a.backoffC = nil
			a.st.NextTryAt = time.Time{}
			a.fire(event{Kind: evDelayDone, Waiting: a.relC != nil})
		case <-a.stopC:
			a.stopC = nil
			if a.proc != nil {
				a.note("guardian did not finish within %s; SIGKILL to process group %d", HumanDuration(a.policy.StopGrace+5*time.Second), a.proc.pid)
				a.proc.kill()
			}
		case <-tick.C:
			a.checkProgress()
		}
	}
}

// fire runs one event through the lifecycle and executes its effects.
func (a *actor) fire(ev event) {
	next, fxs := step(a.lc, ev)
	a.lc = next
	for _, e := range fxs {
		a.exec(e, ev)
	}
}

func (a *actor) handle(c command) {
	if !a.plan.Local {
		if c.kind == cmdQuit || c.kind == cmdKill {
			a.lc.Quit = true
			return
		}
		a.note("%s: role runs on %s; tsd does not manage its process", c.kind, a.plan.Host)
		return
	}
	waiting := a.relC != nil
	switch c.kind {
	case cmdStart:
		a.fire(event{Kind: evStart, Waiting: waiting})
	case cmdRestart:
		a.why = "restart requested"
		a.fire(event{Kind: evRestart, Now: c.now, Waiting: waiting})
	case cmdStop:
		a.why, a.shownWhy = "stop requested", ""
		a.fire(event{Kind: evStop, Now: c.now})
	case cmdQuit:
		a.why, a.shownWhy = "tsd shutting down", ""
		a.fire(event{Kind: evQuit})
	case cmdKill:
		a.why, a.shownWhy = "SIGKILL requested", ""
		a.fire(event{Kind: evKill})
	}
}

// exec carries out one effect of step.
func (a *actor) exec(e effect, ev event) {
	gw := a.sup.gw
	switch e {
	case fxSpawn:
		a.start()
	case fxCountRestart:
		a.st.Restarts++
	case fxResetBudget:
		a.attempt, a.hist = 0, nil
	case fxCancelBackoff:
		a.cancelBackoff()
	case fxCancelDelay:
		if a.backoffT != nil {
			a.backoffT.Stop()
			a.backoffT, a.backoffC = nil, nil
		}
		a.st.NextTryAt = time.Time{}
	case fxBackoff:
		if a.decision.Delay > 0 {
			a.backoffT = time.NewTimer(a.decision.Delay)
			a.backoffC = a.backoffT.C
			// Views count down to this (the reason keeps the delay as set).
			a.st.NextTryAt = a.sup.now().Add(a.decision.Delay)
		}
		a.setState(snapshot.StateBackoff, a.decision.Reason)
		if a.crashHold != nil {
			a.relC, a.relCancel = a.launchRelease(a.crashHold)
		}
		a.crashHold = nil
	case fxRoute:
		if gw != nil {
			gw.SetRouted(a.plan.Name, true)
		}
		a.st.Routed = true
		first := a.st.State == snapshot.StateStarting || a.st.State == snapshot.StateHandshaking
		a.st.Progress = nil
		a.setState(snapshot.StateReady, "")
		if first && a.proc != nil {
			a.sup.pub.event(a.plan.Name, "ready after "+snapshot.FormatDuration(a.sup.now().Sub(a.proc.started)))
		}
	case fxUnroute:
		if gw != nil {
			gw.SetRouted(a.plan.Name, false)
		}
		a.st.Routed = false
	case fxDrain:
		a.beginDrain()
	case fxEndDrain:
		a.endDrain()
	case fxAbort:
		if gw != nil {
			why := "role " + a.plan.Name + ": " + a.why
			if a.drainTimed {
				why += fmt.Sprintf("; drain_timeout %s passed", HumanDuration(a.drain))
			} else if ev.Now {
				why += " (--now)"
			}
			if n := gw.AbortRole(a.plan.Name, why); n > 0 {
				a.note("ended %d request(s) still in flight: %s", n, why)
			}
		}
		a.drainTimed = false
	case fxTerm:
		a.term()
	case fxKill:
		if a.proc != nil {
			a.proc.kill()
		}
		a.setState(snapshot.StateStopping, a.why)
	case fxHoldGPUs:
		a.gpuWait = nil
		if v, ok := a.sup.opts.Telemetry.(GPUReleaseVerifier); ok && a.sup.opts.GPUReleaseTimeout > 0 {
			a.gpuWait = v.HoldGPUs(a.plan.Name)
		}
	case fxDropGPUWait:
		a.gpuWait = nil
	case fxWaitRelease:
		// The empty group is published first: telemetry then stops counting
		// the dead tree as the role's, which is what the wait watches for.
		a.publish()
		a.gpuDone, a.gpuCancel = a.launchRelease(a.pendingWait)
		a.pendingWait = nil
	case fxCancelRelease:
		if a.gpuCancel != nil {
			a.gpuCancel()
		}
	case fxStallOn:
		a.st.Routed = false
		if gw != nil && !a.stalledSet {
			gw.SetStalled(a.plan.Name, true, "role "+a.plan.Name+" stalled: "+a.st.Reason)
		}
		a.stalledSet = true
		if a.lc.Phase == phStalled {
			a.setState(snapshot.StateStalled, a.st.Reason)
		}
	case fxStallOff:
		// A role on its way down stays out; the exit clears the verdict.
		if a.stalledSet && (a.lc.Phase == phRunning || a.lc.Phase == phStarting) {
			if gw != nil {
				gw.SetStalled(a.plan.Name, false, "")
			}
			a.stalledSet = false
			if a.lc.Phase == phStarting {
				a.setState(snapshot.StateHandshaking, fmt.Sprintf("recovered; %d/%d ranks registered", a.st.RanksRegistered, a.ranksExpected()))
			}
		}
	case fxShowStopped:
		if ev.Kind == evStop && a.st.State == snapshot.StateStopped {
			return
		}
		reason := a.shownWhy
		if reason == "" {
			reason = "stopped by request"
			if a.lc.Quit {
				reason = "tsd shutting down"
			}
		}
		if a.warn != "" {
			reason += "; " + a.warn
			a.warn = ""
		}
		a.shownWhy = ""
		a.setState(snapshot.StateStopped, reason)
	case fxShowFailed:
		a.setState(snapshot.StateFailed, a.shownWhy)
		a.shownWhy = ""
	case fxShowCrashed:
		a.setState(snapshot.StateCrashed, a.crashWhy)
		if a.crashErr != "" {
			a.sup.pub.event(a.plan.Name, "last error line: "+a.crashErr)
		}
	case fxShowReleaseWait:
		a.st.NextTryAt = time.Time{}
		a.setState(snapshot.StateBackoff, "waiting for the GPU memory to be released")
	}
}

func (a *actor) cancelBackoff() {
	a.st.NextTryAt = time.Time{}
	if a.backoffT != nil {
		a.backoffT.Stop()
		a.backoffT, a.backoffC = nil, nil
	}
	if a.relC != nil {
		a.relCancel()
		a.relC, a.relCancel = nil, nil
	}
}

// holdForCrash is the GPU release wait for a crashed run, or nil when
// telemetry cannot verify it. It must run before the role's empty group
// is published: telemetry then stops counting the dead tree as the role's.
func (a *actor) holdForCrash() func(context.Context) (bool, string) {
	if v, ok := a.sup.opts.Telemetry.(GPUReleaseVerifier); ok && a.sup.opts.GPUReleaseTimeout > 0 {
		return v.HoldGPUs(a.plan.Name)
	}
	return nil
}

// launchRelease runs one bounded release wait on its own goroutine; the
// loop receives its result on the returned channel.
func (a *actor) launchRelease(wait func(context.Context) (bool, string)) (chan gpuRelease, context.CancelFunc) {
	limit := a.sup.opts.GPUReleaseTimeout
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	done := make(chan gpuRelease, 1)
	a.note("waiting up to %s for the GPU memory to be released", HumanDuration(limit))
	go func() {
		ok, msg := wait(ctx)
		done <- gpuRelease{ok: ok, msg: msg}
	}()
	return done, cancel
}

// reportRelease logs a finished release wait in the role log and events.
func (a *actor) reportRelease(r gpuRelease) {
	a.note("%s", r.msg)
	a.sup.pub.event(a.plan.Name, r.msg)
}

// onCrashRelease: the memory was released (or the bound passed, which
// the line says); start unless the backoff still runs.
func (a *actor) onCrashRelease(r gpuRelease) {
	a.relCancel()
	a.relC, a.relCancel = nil, nil
	a.reportRelease(r)
	a.fire(event{Kind: evCrashReleased, Waiting: a.backoffC != nil})
}

func (a *actor) start() {
	if a.proc != nil {
		return
	}
	a.cancelBackoff()
	a.failReason, a.lastPhase = "", 0
	a.rankMap = map[int]snapshot.RankStatus{}
	a.gwStall = map[int]bool{}
	a.procStall, a.stalling, a.stallProc = "", false, false
	a.st.RanksRegistered = 0
	a.st.Phase, a.st.PID, a.st.ExitCode, a.st.Progress = "", 0, nil, nil
	a.setState(snapshot.StateStarting, "")
	info := &runInfo{}
	info.matching.Store(true)
	a.info = info
	a.note("starting: %s", strings.Join(a.plan.Argv, " "))
	a.cgroup = a.sup.roleCgroup(a.plan.Name)
	argv, grace := launcherFor(&a.plan, a.sup.guardExe).Command(&a.plan, a.policy.StopGrace)
	spec := procSpec{
		Role: a.plan.Name, Argv: argv, Env: a.plan.Env, Unset: childEnvUnset(a.sup.plan, a.plan), Grace: grace,
		GuardExe: a.sup.guardExe, GuardArgs: a.sup.guardArgs, Cgroup: a.cgroup,
	}
	poke, now := a.poke, a.sup.now
	onLine := func(line string) {
		info.lines.Add(1)
		var m Milestone
		var pr snapshot.Progress
		ok, pok := false, false
		if info.matching.Load() {
			m, ok = MatchMilestone(line)
			pr, pok = parseProgress(line)
		}
		// Messages sit inside the colour codes, so the raw line can be
		// tested; it is only stripped when kept.
		isErr := !ok && !pok && looksLikeError(line)
		if !ok && !pok && !isErr {
			return
		}
		wake := false
		info.mu.Lock()
		if ok && (!info.hasMS || m.Order >= info.milestone.Order) {
			if !info.hasMS || m.Phase != info.milestone.Phase {
				info.stepped(m.Phase, now())
				if info.prog != nil && info.prog.Phase != m.Phase {
					info.prog = nil // a new step: the last one's bar is done
				}
			}
			info.milestone, info.hasMS = m, true
			wake = true
		}
		// tqdm repeats a bar many times a second: only a new count wakes
		// the actor.
		if pok && (info.prog == nil || *info.prog != pr) {
			info.prog = &pr
			wake = true
		}
		if isErr {
			info.lastErr = strings.TrimSpace(StripANSI(line))
		}
		info.mu.Unlock()
		if wake {
			select {
			case poke <- struct{}{}:
			default:
			}
		}
	}
	var file interface{ Write([]byte) (int, error) }
	if a.file != nil {
		file = a.file
	}
	p, err := startProcess(spec, func(out *os.File) error {
		if file == nil {
			return captureStream(out, a.ring, nil, onLine)
		}
		return captureStream(out, a.ring, file, onLine)
	})
	if err != nil {
		a.note("%v", err)
		if p == nil {
			p = &process{exit: Exit{StartErr: err.Error(), Code: 127}, started: a.sup.now(), empty: true}
		}
		a.proc = nil
		a.sup.releaseCgroup(a.cgroup)
		a.cgroup = ""
		a.afterExit(p)
		return
	}
	a.proc = p
	a.curPID.Store(int64(p.pid))
	a.st.PID = p.pid
	a.st.StartedAt = p.started
	a.progressSeen, a.progressAt = 0, a.sup.now()
	a.note("engine pid %d (process group %d)", p.pid, p.pid)
	a.sup.recordGroup(a.plan.Name, p, a.cgroup)
	if a.sup.gw != nil {
		a.sup.gw.SetAlive(a.plan.Name, true)
	}
	a.publish()
}

// term asks the guardian for a graceful stop of the group. A stopped
// (SIGSTOP) tree cannot act on SIGTERM, so it is continued too.
func (a *actor) term() {
	a.setState(snapshot.StateStopping, a.why)
	if a.proc == nil {
		return
	}
	a.note("%s: SIGTERM to process group %d (SIGKILL after %s)", a.why, a.proc.pid, HumanDuration(a.policy.StopGrace))
	a.proc.term()
	_ = syscall.Kill(-a.proc.pid, syscall.SIGCONT)
	a.stopC = time.After(a.policy.StopGrace + 5*time.Second)
}

// beginDrain starts watching the role's in-flight requests; the gateway
// no longer routes new ones to it.
func (a *actor) beginDrain() {
	a.drainTimed = false
	a.drainUntil = a.sup.now().Add(a.drain)
	n := 0
	if a.sup.gw != nil {
		n = a.sup.gw.DrainCount(a.plan.Name)
	}
	if n == 0 {
		a.fire(event{Kind: evDrained})
		return
	}
	a.st.DrainInFlight, a.st.DrainDeadline = n, a.drainUntil
	a.note("%s: draining %d request(s) in flight (up to %s)", a.why, n, HumanDuration(a.drain))
	a.setState(snapshot.StateDraining, a.why)
	a.drainT = time.NewTicker(drainPoll)
	a.drainC = a.drainT.C
}

func (a *actor) endDrain() {
	if a.drainT != nil {
		a.drainT.Stop()
		a.drainT, a.drainC = nil, nil
	}
	a.st.DrainInFlight, a.st.DrainDeadline = 0, time.Time{}
}

func (a *actor) onDrainTick() {
	if a.lc.Phase != phDraining {
		a.endDrain()
		return
	}
	n := 0
	if a.sup.gw != nil {
		n = a.sup.gw.DrainCount(a.plan.Name)
	}
	switch {
	case n == 0:
		a.note("drained: no request in flight")
		a.fire(event{Kind: evDrained})
	case !a.sup.now().Before(a.drainUntil):
		a.drainTimed = true
		a.note("drain_timeout %s passed with %d request(s) in flight; ending them", HumanDuration(a.drain), n)
		a.fire(event{Kind: evDrained})
	case n != a.st.DrainInFlight:
		a.st.DrainInFlight = n
		a.publish()
	}
}

func (a *actor) onExit() {
	p := a.proc
	a.proc = nil
	a.curPID.Store(0)
	a.stopC = nil
	if gw := a.sup.gw; gw != nil {
		if a.stalledSet {
			gw.SetStalled(a.plan.Name, false, "")
		}
		gw.SetAlive(a.plan.Name, false)
		gw.SetRouted(a.plan.Name, false)
	}
	a.stalledSet, a.stalling, a.procStall = false, false, ""
	a.gwStall = map[int]bool{}
	a.st.Routed = false
	if p.empty {
		a.sup.dropGroup(a.plan.Name)
	}
	a.sup.releaseCgroup(a.cgroup)
	a.cgroup = ""
	a.afterExit(p)
}

func (a *actor) afterExit(p *process) {
	now := a.sup.now()
	code := p.exit.Code
	a.st.ExitCode = &code
	a.st.PID, a.st.Phase, a.st.Progress = 0, "", nil
	ran := now.Sub(p.started)
	if p.killedGrace {
		a.note("process group %d ignored SIGTERM for %s and was SIGKILLed", p.pid, HumanDuration(a.policy.StopGrace))
	}
	if p.strays != "" {
		a.note("killed processes that had left process group %d: %s", p.pid, p.strays)
	}
	if p.guardNote != "" {
		a.note("%s", p.guardNote)
	}
	if p.captureErr != nil {
		a.note("log capture: %v", p.captureErr)
	}
	if !p.empty {
		a.note("process group %d still has live processes %v after SIGKILL", p.pid, p.leftover)
		a.shownWhy = fmt.Sprintf("%s after %s; process group %d could not be emptied (pids %v)", p.exit, HumanDuration(ran), p.pid, p.leftover)
		a.fire(event{Kind: evExited, GroupLeft: true})
		return
	}
	if p.pid > 0 {
		a.note("%s after %s; process group %d verified empty", p.exit, HumanDuration(ran), p.pid)
	}
	if ph := a.lc.Phase; ph == phDraining || ph == phStopping || a.lc.Quit {
		a.pendingWait, a.gpuWait = a.gpuWait, nil
		a.fire(event{Kind: evExited, GPUWait: a.pendingWait != nil && (ph == phDraining || ph == phStopping)})
		return
	}
	a.crashHold = a.holdForCrash()
	head := ""
	if a.failReason != "" {
		head = a.failReason + "; "
	}
	a.crashErr = ""
	if info := a.info; info != nil {
		info.mu.Lock()
		a.crashErr = info.lastErr
		info.mu.Unlock()
	}
	a.crashWhy = head + p.exit.String() + " after " + HumanDuration(ran)
	d := Decide(RestartInput{
		Policy: a.policy, Exit: p.exit, Ran: ran, History: a.hist, Attempt: a.attempt,
		Now: now, Rand: a.sup.rand,
	})
	a.hist, a.attempt = d.History, d.Attempt
	d.Reason = head + d.Reason
	a.decision = d
	if d.Action != ActionRestart {
		a.shownWhy = d.Reason
	}
	immediate := d.Delay <= 0 && a.crashHold == nil
	a.fire(event{Kind: evExited, Action: d.Action, Immediate: immediate})
	if a.lc.Phase != phBackoff {
		a.crashHold = nil
	}
}

func (a *actor) onGPURelease(r gpuRelease) {
	a.gpuCancel()
	a.gpuDone, a.gpuCancel = nil, nil
	a.reportRelease(r)
	if !r.ok {
		a.warn = r.msg
	}
	a.fire(event{Kind: evReleased})
}

func (a *actor) onMilestone() {
	info := a.info
	if info == nil || a.proc == nil {
		return
	}
	info.mu.Lock()
	m, ok := info.milestone, info.hasMS
	var prog *snapshot.Progress
	if info.prog != nil {
		p := *info.prog // the snapshot gets its own copy: the next line may replace it
		prog = &p
	}
	pending := info.pending
	info.pending = nil
	info.mu.Unlock()
	for _, msg := range pending {
		a.sup.pub.event(a.plan.Name, msg)
	}
	if prog != nil && (a.st.Progress == nil || *a.st.Progress != *prog) {
		a.progressAt = a.sup.now() // a moving bar is progress, even inside one step
	}
	a.st.Progress = prog
	if !ok || (m.Order < a.lastPhase) {
		a.publish()
		return
	}
	a.lastPhase = m.Order
	a.progressAt = a.sup.now()
	a.st.Phase = m.Phase
	if m.Phase == PhaseReady {
		a.st.Progress = nil
		info.matching.Store(false) // the last milestone: spare the per-line cost
		if a.sup.gw == nil || a.ranksExpected() == 0 {
			// Without a gateway (or for an encode role outside epd mode)
			// the launcher's "ready" line is the best signal there is (docs/protocol.md §10.4).
			if a.lc.Phase == phStarting {
				a.fire(event{Kind: evReady})
				return
			}
		}
	}
	a.publish()
}

// becomeReadyRemote: a remote role's state is its ranks' state.
func (a *actor) becomeReadyRemote() {
	if a.st.State == snapshot.StateReady {
		a.publish()
		return
	}
	if a.sup.gw != nil {
		a.sup.gw.SetRouted(a.plan.Name, true)
	}
	a.st.Routed = true
	a.setState(snapshot.StateReady, "")
}

func (a *actor) onRank(ev snapshot.RankEvent) {
	a.rankMap[ev.Rank.Identity] = ev.Rank
	reg, seen := 0, 0
	for _, r := range a.rankMap {
		switch r.State {
		case snapshot.RankRegistered:
			reg++
			seen++
		case snapshot.RankHello, snapshot.RankInitSent, snapshot.RankReady, snapshot.RankStalled:
			seen++
		}
	}
	a.st.RanksRegistered = reg
	a.progressAt = a.sup.now()
	if ev.Err != "" {
		a.sup.pub.event(a.plan.Name, fmt.Sprintf("rank %d: %s", ev.Rank.Identity, ev.Err))
	}
	if !a.plan.Local {
		if exp := a.ranksExpected(); exp > 0 && reg >= exp {
			a.becomeReadyRemote()
		} else if a.st.State == snapshot.StateReady {
			a.setState(snapshot.StateRemote, "waiting for its ranks to dial in")
		} else {
			a.publish()
		}
		return
	}
	if ev.Rank.State == snapshot.RankStalled {
		a.gwStall[ev.Rank.Identity] = true
	} else {
		delete(a.gwStall, ev.Rank.Identity)
	}
	ph := a.lc.Phase
	if a.proc == nil || a.lc.Quit || a.sup.closing.Load() || (ph != phStarting && ph != phRunning && ph != phStalled) {
		a.publish()
		return
	}
	if a.updateStall() {
		return
	}
	exp := a.ranksExpected()
	switch {
	case a.lc.Phase == phStalled:
		a.publish()
	case a.lc.Phase == phStarting && exp > 0 && reg >= exp:
		a.fire(event{Kind: evReady})
	case a.lc.Phase == phRunning && reg < exp:
		a.fire(event{Kind: evUnready})
		a.setState(snapshot.StateHandshaking, fmt.Sprintf("%d/%d ranks registered", reg, exp))
	case seen > 0 && a.st.State == snapshot.StateStarting:
		a.setState(snapshot.StateHandshaking, "")
	default:
		a.publish()
	}
}

// onProcStall: the /proc scanner saw the role's tree stop, or run again.
func (a *actor) onProcStall(rep stallReport) {
	why := rep.why
	if a.proc == nil || rep.pid != a.proc.pid || why == a.procStall {
		return
	}
	a.procStall = why
	if why != "" {
		a.note("process tree stopped: %s", why)
	} else {
		a.note("process tree runs again")
	}
	a.updateStall()
}

// updateStall folds the two stall sources into one verdict and fires
// stall or recover when it changes; true if it fired.
func (a *actor) updateStall() bool {
	switch a.lc.Phase {
	case phStarting, phRunning, phDraining, phStalled:
	default:
		return false // on its way down or not running: nothing to judge
	}
	v := judgeStall(stallFacts{Proc: a.procStall, Ranks: a.gwStall, Stalling: a.stalling, FromProc: a.stallProc})
	if v.ForgetRanks {
		a.gwStall = map[int]bool{}
	}
	switch v.Change {
	case stallBegins:
		a.stalling, a.stallProc = true, v.FromProc
		wait := a.plan.StallAction == profiles.StallWait
		a.st.Reason = v.Why
		if wait {
			a.note("stalled: %s; out of routing until it recovers (health.stall_action: wait)", v.Why)
		} else {
			a.note("stalled: %s; restarting (health.stall_action: restart)", v.Why)
		}
		a.why = "stalled: " + v.Why + "; restarting"
		a.fire(event{Kind: evStall, Wait: wait})
		return true
	case stallEnds:
		a.stalling, a.stallProc = false, false
		exp := a.ranksExpected()
		a.note("recovered from the stall")
		a.fire(event{Kind: evRecover, Ready: exp == 0 || a.st.RanksRegistered >= exp})
		return true
	}
	return false
}

// checkProgress kills a run that has printed nothing and reached no
// milestone for the no-progress deadline while starting.
func (a *actor) checkProgress() {
	if a.proc == nil || a.lc.Phase != phStarting || a.info == nil {
		return
	}
	now := a.sup.now()
	if n := a.info.lines.Load(); n != a.progressSeen {
		a.progressSeen, a.progressAt = n, now
		return
	}
	limit := a.sup.opts.NoProgress
	if limit <= 0 || now.Sub(a.progressAt) < limit {
		return
	}
	phase := a.st.Phase
	if phase == "" {
		phase = "no milestone yet"
	}
	a.failReason = fmt.Sprintf("no progress for %s (phase: %s)", HumanDuration(limit), phase)
	a.note("%s; stopping it", a.failReason)
	a.st.Reason = a.failReason
	a.publish()
	a.proc.term()
	a.stopC = time.After(a.policy.StopGrace + 5*time.Second)
}

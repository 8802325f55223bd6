package supervisor

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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

// after says what to do once the current process has ended on request.
type after int

const (
	afterNothing after = iota
	afterStart
	afterQuit
)

// runInfo is what the capture goroutine of one run shares with the actor:
// the furthest milestone and the last error-looking line.
type runInfo struct {
	lines    atomic.Uint64 // lines seen; the no-progress check watches it
	matching atomic.Bool   // milestone matching is only needed until ready

	mu        sync.Mutex
	milestone Milestone
	hasMS     bool
	lastErr   string
}

// actor owns one role instance: its process, its state and its restart
// history. Everything below "loop state" is touched only by run().
type actor struct {
	sup    *Supervisor
	idx    int
	plan   profiles.RolePlan
	policy RestartPolicy
	ring   *logRing
	file   *rotatingFile

	cmds   chan cmdKind
	ranks  chan snapshot.RankEvent
	poke   chan struct{} // capture saw a milestone
	done   chan struct{}
	curPID atomic.Int64 // for Supervisor.Kill, which must not wait on the loop

	// loop state
	st           snapshot.RoleStatus
	proc         *process
	info         *runInfo
	stopReq      bool
	next         after
	quitting     bool
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
	// GPU release check of a requested stop: gpuWait is taken when the
	// stop begins; gpuDone is non-nil while the wait runs after the group
	// emptied (the role is then still "stopping").
	gpuWait   func(context.Context) (bool, string)
	gpuDone   chan gpuRelease
	gpuCancel context.CancelFunc
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
		cmds:    make(chan cmdKind, 16),
		ranks:   make(chan snapshot.RankEvent, 256),
		poke:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		rankMap: map[int]snapshot.RankStatus{},
	}
	a.st = snapshot.RoleStatus{
		Name: rp.Name, Kind: rp.Kind, GPUs: rp.GPUs, State: snapshot.StatePlanned,
		Worker: rp.Worker, LogFile: rp.LogFile, Remote: !rp.Local,
		RanksExpected: a.ranksExpected(),
	}
	if !rp.Local {
		a.st.State = snapshot.StateRemote
		a.st.Reason = "runs on " + rp.Host + "; waiting for its ranks to dial in"
	}
	return a
}

// ranksExpected: every attention-DP rank dials the gateway (launch.md
// §1.2); encode engines do not dial at all (§1.3).
func (a *actor) ranksExpected() int {
	if a.plan.Kind == profiles.KindEncode && a.sup.plan.Gateway.Mode != profiles.ModeEPD {
		// Outside epd mode nothing is routed to an encode server, so its
		// launcher's ready line is the signal; in epd mode its rank 0
		// registers on the lane like any role (zmq-lane.md §5.8).
		return 0
	}
	if a.plan.DP > 1 {
		return a.plan.DP
	}
	return 1
}

// send queues a command; false if the actor has ended.
func (a *actor) send(c cmdKind) bool {
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
		a.start()
	}
	tick := a.sup.progressTick()
	defer tick.Stop()
	for {
		if a.quitting && a.proc == nil && a.gpuDone == nil {
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
		case r := <-a.gpuDone:
			a.onGPURelease(r)
		case r := <-a.relC:
			a.onCrashRelease(r)
		case <-a.backoffC:
			a.backoffC = nil
			if a.relC != nil {
				// The delay is over but a rank may still hold the GPU.
				a.setState(snapshot.StateBackoff, "waiting for the GPU memory to be released")
				continue
			}
			a.start()
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

func (a *actor) handle(c cmdKind) {
	if !a.plan.Local && c != cmdQuit {
		a.note("%s: role runs on %s; tsd does not manage its process", c, a.plan.Host)
		return
	}
	switch c {
	case cmdStart:
		if a.proc == nil && a.gpuDone == nil {
			// A person stepped in: fresh backoff and budget.
			a.attempt, a.hist = 0, nil
			if a.skipDelayKeepRelease() {
				return
			}
			a.start()
		} else if a.stopReq {
			a.next = afterStart
		}
	case cmdRestart:
		a.attempt, a.hist = 0, nil
		if a.gpuDone != nil {
			a.next = afterStart // once the GPU memory is released
			return
		}
		if a.proc == nil {
			if a.skipDelayKeepRelease() {
				return // counted when the crash scheduled it
			}
			a.st.Restarts++
			a.start()
			return
		}
		a.next = afterStart
		a.beginStop("restart requested")
	case cmdStop:
		a.next = afterNothing
		a.cancelBackoff()
		if a.gpuDone != nil {
			return
		}
		if a.proc == nil {
			if a.st.State != snapshot.StateFailed && a.st.State != snapshot.StateStopped {
				a.setState(snapshot.StateStopped, "stopped by request")
			}
			return
		}
		a.beginStop("stop requested")
	case cmdQuit:
		a.quitting = true
		a.next = afterQuit
		a.cancelBackoff()
		if a.gpuDone != nil {
			return
		}
		if a.proc == nil {
			if a.plan.Local && a.st.State != snapshot.StateFailed {
				a.setState(snapshot.StateStopped, "tsd shutting down")
			}
			return
		}
		a.beginStop("tsd shutting down")
	case cmdKill:
		a.quitting = true
		a.next = afterQuit
		a.cancelBackoff()
		a.gpuWait = nil
		if a.gpuDone != nil {
			a.gpuCancel() // killing means now: the wait ends at once, unverified
			return
		}
		if a.proc != nil {
			a.stopReq = true
			a.proc.kill()
			a.setState(snapshot.StateStopping, "SIGKILL requested")
		} else if a.plan.Local && a.st.State != snapshot.StateFailed && a.st.State != snapshot.StateStopped {
			a.setState(snapshot.StateStopped, "tsd shutting down")
		}
	}
}

func (a *actor) cancelBackoff() {
	if a.backoffT != nil {
		a.backoffT.Stop()
		a.backoffT, a.backoffC = nil, nil
	}
	if a.relC != nil {
		a.relCancel()
		a.relC, a.relCancel = nil, nil
	}
}

// skipDelayKeepRelease: a person asked for a start while a crashed role
// waits for its GPU memory; the delay goes, the wait stays (a start now
// could OOM on memory a dying rank still holds). false if no wait runs.
func (a *actor) skipDelayKeepRelease() bool {
	if a.relC == nil {
		return false
	}
	if a.backoffT != nil {
		a.backoffT.Stop()
		a.backoffT, a.backoffC = nil, nil
	}
	a.setState(snapshot.StateBackoff, "waiting for the GPU memory to be released")
	return true
}

// crashHold is the GPU release wait for a crashed run, or nil when
// telemetry cannot verify it. It must run before the role's empty group
// is published: telemetry then stops counting the dead tree as the role's.
func (a *actor) crashHold() func(context.Context) (bool, string) {
	if v, ok := a.sup.opts.Telemetry.(GPUReleaseVerifier); ok && a.sup.opts.GPUReleaseTimeout > 0 {
		return v.HoldGPUs(a.plan.Name)
	}
	return nil
}

// startCrashRelease runs the release wait off the loop, alongside the
// backoff timer; onCrashRelease or the timer, whichever is last, starts.
func (a *actor) startCrashRelease(wait func(context.Context) (bool, string)) {
	a.relC, a.relCancel = a.launchRelease(wait)
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
	if a.backoffC == nil {
		a.start()
	}
}

func (a *actor) start() {
	if a.proc != nil {
		return
	}
	a.cancelBackoff()
	a.stopReq, a.failReason, a.lastPhase = false, "", 0
	a.rankMap = map[int]snapshot.RankStatus{}
	a.st.RanksRegistered = 0
	a.st.Phase, a.st.PID, a.st.ExitCode = "", 0, nil
	a.setState(snapshot.StateStarting, "")
	info := &runInfo{}
	info.matching.Store(true)
	a.info = info
	a.note("starting: %s", strings.Join(a.plan.Argv, " "))
	argv, grace := launcherFor(&a.plan, a.sup.guardExe).Command(&a.plan, a.policy.StopGrace)
	spec := procSpec{
		Role: a.plan.Name, Argv: argv, Env: a.plan.Env, Grace: grace,
		GuardExe: a.sup.guardExe, GuardArgs: a.sup.guardArgs,
	}
	poke := a.poke
	onLine := func(line string) {
		info.lines.Add(1)
		var m Milestone
		ok := false
		if info.matching.Load() {
			m, ok = MatchMilestone(line)
		}
		// Messages sit inside the colour codes, so the raw line can be
		// tested; it is only stripped when kept.
		isErr := !ok && looksLikeError(line)
		if !ok && !isErr {
			return
		}
		info.mu.Lock()
		if ok && (!info.hasMS || m.Order >= info.milestone.Order) {
			info.milestone, info.hasMS = m, true
		}
		if isErr {
			info.lastErr = strings.TrimSpace(StripANSI(line))
		}
		info.mu.Unlock()
		if ok {
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
			p = &process{exit: Exit{StartErr: err.Error(), Code: 127}, started: a.sup.now()}
		}
		a.proc = nil
		a.afterExit(p)
		return
	}
	a.proc = p
	a.curPID.Store(int64(p.pid))
	a.st.PID = p.pid
	a.st.StartedAt = p.started
	a.progressSeen, a.progressAt = 0, a.sup.now()
	a.note("engine pid %d (process group %d)", p.pid, p.pid)
	if a.sup.gw != nil {
		a.sup.gw.SetAlive(a.plan.Name, true)
	}
	a.publish()
}

func (a *actor) beginStop(reason string) {
	a.cancelBackoff()
	if a.proc == nil || a.stopReq {
		return
	}
	a.stopReq = true
	a.gpuWait = nil
	if v, ok := a.sup.opts.Telemetry.(GPUReleaseVerifier); ok && a.sup.opts.GPUReleaseTimeout > 0 {
		a.gpuWait = v.HoldGPUs(a.plan.Name)
	}
	if a.sup.gw != nil {
		a.sup.gw.SetRouted(a.plan.Name, false)
	}
	a.st.Routed = false
	a.setState(snapshot.StateStopping, reason)
	a.note("%s: SIGTERM to process group %d (SIGKILL after %s)", reason, a.proc.pid, HumanDuration(a.policy.StopGrace))
	a.proc.term()
	a.stopC = time.After(a.policy.StopGrace + 5*time.Second)
}

func (a *actor) onExit() {
	p := a.proc
	a.proc = nil
	a.curPID.Store(0)
	a.stopC = nil
	if a.sup.gw != nil {
		a.sup.gw.SetAlive(a.plan.Name, false)
		a.sup.gw.SetRouted(a.plan.Name, false)
	}
	a.st.Routed = false
	a.afterExit(p)
}

func (a *actor) afterExit(p *process) {
	now := a.sup.now()
	code := p.exit.Code
	a.st.ExitCode = &code
	a.st.PID, a.st.Phase = 0, ""
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
		// Starting again would put two engines on the same GPUs and ports.
		a.note("process group %d still has live processes %v after SIGKILL", p.pid, p.leftover)
		a.setState(snapshot.StateFailed, fmt.Sprintf("%s after %s; process group %d could not be emptied (pids %v)", p.exit, HumanDuration(ran), p.pid, p.leftover))
		return
	}
	if p.pid > 0 {
		a.note("%s after %s; process group %d verified empty", p.exit, HumanDuration(ran), p.pid)
	}
	wait := a.gpuWait
	a.gpuWait = nil
	if a.stopReq && wait != nil {
		a.waitGPURelease(wait)
		return
	}
	if a.stopReq {
		a.finishStop("")
		return
	}
	if a.quitting {
		a.setState(snapshot.StateStopped, "tsd shutting down")
		return
	}
	hold := a.crashHold()
	head := ""
	if a.failReason != "" {
		head = a.failReason + "; "
	}
	info := a.info
	lastErr := ""
	if info != nil {
		info.mu.Lock()
		lastErr = info.lastErr
		info.mu.Unlock()
	}
	a.setState(snapshot.StateCrashed, head+p.exit.String()+" after "+HumanDuration(ran))
	if lastErr != "" {
		a.sup.pub.event(a.plan.Name, "last error line: "+lastErr)
	}
	d := Decide(RestartInput{
		Policy: a.policy, Exit: p.exit, Ran: ran, History: a.hist, Attempt: a.attempt,
		Now: now, Rand: a.sup.rand,
	})
	a.hist, a.attempt = d.History, d.Attempt
	reason := head + d.Reason
	switch d.Action {
	case ActionRestart:
		a.st.Restarts++
		if d.Delay <= 0 && hold == nil {
			a.start()
			return
		}
		if d.Delay > 0 {
			a.backoffT = time.NewTimer(d.Delay)
			a.backoffC = a.backoffT.C
		}
		a.setState(snapshot.StateBackoff, reason)
		if hold != nil {
			a.startCrashRelease(hold)
		}
	case ActionStop:
		a.setState(snapshot.StateStopped, reason)
	case ActionGiveUp:
		a.setState(snapshot.StateFailed, reason)
	}
}

// waitGPURelease runs the telemetry's release wait off the loop; the
// loop goes on serving commands and finishes the stop in onGPURelease.
func (a *actor) waitGPURelease(wait func(context.Context) (bool, string)) {
	// The empty group is published first: telemetry then stops counting
	// the dead tree as the role's, which is what the wait watches for.
	a.publish()
	a.gpuDone, a.gpuCancel = a.launchRelease(wait)
}

func (a *actor) onGPURelease(r gpuRelease) {
	a.gpuCancel()
	a.gpuDone, a.gpuCancel = nil, nil
	a.reportRelease(r)
	warn := ""
	if !r.ok {
		warn = r.msg
	}
	a.finishStop(warn)
}

// finishStop ends a requested stop whose group is verified empty: start
// again, or rest in stopped. warn (the GPU memory was not seen released)
// goes into the stopped Reason.
func (a *actor) finishStop(warn string) {
	a.stopReq = false
	suffix := ""
	if warn != "" {
		suffix = "; " + warn
	}
	switch a.next {
	case afterStart:
		a.next = afterNothing
		a.st.Restarts++
		a.start()
	case afterQuit:
		a.setState(snapshot.StateStopped, "tsd shutting down"+suffix)
	default:
		a.setState(snapshot.StateStopped, "stopped by request"+suffix)
	}
}

func (a *actor) onMilestone() {
	info := a.info
	if info == nil || a.proc == nil {
		return
	}
	info.mu.Lock()
	m, ok := info.milestone, info.hasMS
	info.mu.Unlock()
	if !ok || (m.Order < a.lastPhase) {
		return
	}
	a.lastPhase = m.Order
	a.progressAt = a.sup.now()
	a.st.Phase = m.Phase
	if m.Phase == PhaseReady {
		info.matching.Store(false) // the last milestone: spare the per-line cost
		if a.sup.gw == nil || a.ranksExpected() == 0 {
			// Without a gateway (or for an encode role outside epd mode)
			// the launcher's "ready" line is the best signal there is (§1.4).
			a.becomeReady()
			return
		}
	}
	a.publish()
}

func (a *actor) becomeReady() {
	if a.st.State == snapshot.StateReady || a.stopReq {
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
		case snapshot.RankHello, snapshot.RankInitSent, snapshot.RankReady:
			seen++
		}
	}
	a.st.RanksRegistered = reg
	a.progressAt = a.sup.now()
	if ev.Err != "" {
		a.sup.pub.event(a.plan.Name, fmt.Sprintf("rank %d: %s", ev.Rank.Identity, ev.Err))
	}
	if !a.plan.Local {
		// A remote role's state is its ranks' state.
		if exp := a.ranksExpected(); exp > 0 && reg >= exp {
			a.becomeReady()
		} else if a.st.State == snapshot.StateReady {
			a.setState(snapshot.StateRemote, "waiting for its ranks to dial in")
		} else {
			a.publish()
		}
		return
	}
	if a.proc == nil || a.stopReq || a.quitting || a.sup.closing.Load() {
		a.publish()
		return
	}
	exp := a.ranksExpected()
	switch {
	case exp > 0 && reg >= exp:
		a.becomeReady()
	case a.st.State == snapshot.StateReady && reg < exp:
		a.setState(snapshot.StateHandshaking, fmt.Sprintf("%d/%d ranks registered", reg, exp))
	case seen > 0 && a.st.State == snapshot.StateStarting:
		a.setState(snapshot.StateHandshaking, "")
	default:
		a.publish()
	}
}

// checkProgress kills a run that has printed nothing and reached no
// milestone for the no-progress deadline while starting.
func (a *actor) checkProgress() {
	if a.proc == nil || a.stopReq || a.info == nil {
		return
	}
	if a.st.State != snapshot.StateStarting && a.st.State != snapshot.StateHandshaking {
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

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
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

// inbox is everything that reaches an actor from other goroutines.
type inbox struct {
	cmds   chan event              // commands: start, restart, stop, quit, kill
	ranks  chan snapshot.RankEvent // the gateway's rank changes for this role
	poke   chan struct{}           // capture saw a milestone
	stalls chan stallReport        // the /proc scanner: whether the tree is stopped
}

// run is one run of the engine: its process and what its capture saw.
type run struct {
	proc       *process
	info       *runInfo
	cgroup     string    // this run's cgroup directory, or ""
	linesSeen  uint64    // the line count at the last progress check
	progressAt time.Time // the last sign of progress (a line, a milestone, a rank)
	lastOrder  int       // the furthest milestone's order
}

// budget is the restart policy's memory: recent restarts and the attempt.
type budget struct {
	hist    []time.Time
	attempt int
}

// timers are the actor's running clocks; a nil channel never fires.
type timers struct {
	backoff    *time.Timer
	backoffC   <-chan time.Time
	drain      *time.Ticker
	drainC     <-chan time.Time
	drainUntil time.Time
	stopC      <-chan time.Time // the guardian's time to end the group after SIGTERM
}

// gpuWait is the GPU release check of a stop or a crash: held is taken
// when the stop begins (or the run crashed), and done is non-nil while the
// wait for its memory runs after the group emptied.
type gpuWait struct {
	held   func(context.Context) (bool, string)
	done   chan gpuRelease
	cancel context.CancelFunc
}

type gpuRelease struct {
	ok  bool
	msg string
}

// observed is what the actor has heard of its ranks and its tree.
type observed struct {
	ranks  map[int]snapshot.RankStatus
	silent map[int]bool // ranks the gateway reports stalled
	proc   string       // why the tree is stopped, "" when it runs
}

func newObserved() observed {
	return observed{ranks: map[int]snapshot.RankStatus{}, silent: map[int]bool{}}
}

// actor owns one role instance: its process, its lifecycle and its
// restart history. Everything below done is touched only by run().
// Decisions come from step (lifecycle.go); the actor turns what it hears
// into events, runs each through step, and executes the effects step
// returns, queueing the events they return (dispatch). It is its id
// inside the supervisor; its name, which the roster holds, is looked up
// where it speaks to the edges (name).
type actor struct {
	env    *env
	id     int               // the instance's id: every owner inside keys it by this; never reused
	plan   profiles.RolePlan // what it runs (its Name is the plan's; the roster has the name now)
	policy RestartPolicy
	drain  time.Duration // restart.drain_timeout
	ring   *logRing
	file   *rotatingFile
	in     inbox
	done   chan struct{}

	lc     lifecycle
	st     snapshot.RoleStatus // published; State, Reason, Routed and Restarts derive from lc
	view   snapshot.RoleView   // what the gateway was last told
	cur    *run                // the current run; nil while no process runs
	budget budget
	timers timers
	gpu    gpuWait
	seen   observed
	waits  answers // commands waiting for their outcome (answer.go)
}

func newActor(e *env, id int, rp profiles.RolePlan, expect int, ring *logRing, file *rotatingFile) *actor {
	a := &actor{
		env: e, id: id, plan: rp, policy: PolicyFromPlan(rp.Restart), ring: ring, file: file,
		drain: rp.Restart.DrainTimeout.D(),
		in: inbox{
			cmds:   make(chan event, 16),
			ranks:  make(chan snapshot.RankEvent, 256),
			poke:   make(chan struct{}, 1),
			stalls: make(chan stallReport, 1),
		},
		done: make(chan struct{}),
		seen: newObserved(),
	}
	if a.drain <= 0 {
		a.drain = profiles.DefaultDrainTimeout
	}
	a.lc = newLifecycle(factsFor(rp, expect, e.gw != nil))
	a.st = snapshot.RoleStatus{
		Name: rp.Name, Group: rp.Group, Kind: rp.Kind, GPUs: rp.GPUs, // the publisher names it as the roster does
		Worker: rp.Worker, LogFile: rp.LogFile, Remote: !rp.Local,
		RanksExpected: expect,
	}
	a.st.State, a.st.Reason = shown(a.lc)
	return a
}

// factsFor is what the lifecycle fixes from a role's plan: expect ranks
// must register before it is ready (ranksExpected).
func factsFor(rp profiles.RolePlan, expect int, gateway bool) roleFacts {
	facts := roleFacts{Remote: !rp.Local, Host: rp.Host, Expect: expect, StallWait: rp.StallAction == profiles.StallWait}
	if !gateway {
		// Without a gateway the launcher's "ready" line is the best
		// signal there is (docs/protocol.md §10.4).
		facts.Expect = 0
	}
	return facts
}

// ranksExpected: every attention-DP rank dials the gateway (docs/protocol.md
// §10.2), whatever the kind (an aggregated engine's as a prefill's or a
// decode's); encode engines do not dial at all upstream (docs/protocol.md
// §9.1), so the kind's row says when they are awaited.
func ranksExpected(rp profiles.RolePlan, mode string) int {
	if k, ok := profiles.KindOf(rp.Kind); ok && !k.AwaitsRanks(mode) {
		// Outside epd mode nothing is routed to an encode server, so its
		// launcher's ready line is the signal; in epd mode its rank 0
		// registers on the lane like any role (docs/protocol.md §9.4).
		return 0
	}
	if rp.DP > 1 {
		return rp.DP
	}
	return 1
}

// send queues a command; false if the actor has ended.
func (a *actor) send(ev event) bool {
	select {
	case a.in.cmds <- ev:
		return true
	case <-a.done:
		return false
	}
}

// name is the instance's name now: the roster's, the one place names
// map to ids. It is what the gateway, the events and the log lines call
// the instance.
func (a *actor) name() string { return a.env.names.nameOf(a.id) }

// watchFile reports the log file's write problems (a full disk, a log
// reopened by path) in the events, under the name the role has when they
// happen, and as a note among the role's lines, which tsd up --headless
// and tsd logs print (events of a role are the dashboard's).
func (a *actor) watchFile() {
	if a.file != nil {
		a.file.setOnHealth(func(msg string) {
			a.env.pub.tryEvent(a.name(), msg)
			a.note("%s", msg)
		})
	}
}

func (a *actor) note(format string, args ...any) {
	a.ring.append([]LogLine{{Time: a.env.now(), Text: "[tsd] " + fmt.Sprintf(format, args...), Note: true}})
}

func (a *actor) roleCopy() snapshot.RoleStatus {
	st := a.st
	st.Ranks = make([]snapshot.RankStatus, 0, len(a.seen.ranks))
	for _, r := range a.seen.ranks {
		st.Ranks = append(st.Ranks, r)
	}
	sort.Slice(st.Ranks, func(i, j int) bool { return st.Ranks[i].Identity < st.Ranks[j].Identity })
	return st
}

// show publishes the role: its state and reason as shown derives them
// from the lifecycle, and an event when they changed. It is the one place
// a role's state is set.
func (a *actor) show() {
	state, reason := shown(a.lc)
	a.st.Routed, a.st.Restarts = a.view.Routed, a.lc.Restarts
	if a.lc.Phase != phStarting {
		a.st.Progress = nil // a startup step's bar ends with the startup
	}
	from := a.st.State
	changed := from != state || a.st.Reason != reason
	a.st.State, a.st.Reason = state, reason
	st := a.roleCopy()
	name := a.name()
	// Commands whose end this state shows are answered by the publisher
	// once the snapshot with it is out: whoever hears the outcome can read
	// the state from the Snapshot.
	done := a.waits.settle(answerFacts{State: state, Running: a.cur != nil, Remote: a.lc.Role.Remote},
		outcome{Name: name, State: state, Reason: reason, PID: a.st.PID})
	if !changed {
		a.env.pub.in <- pubMsg{id: a.id, role: &st, answers: done}
		return
	}
	msg := from + " → " + state
	if reason != "" {
		msg += ": " + reason
	}
	// The publisher records the event, publishes at once, then adds the
	// same line to the role's log: whoever sees the line can read the new
	// state from the Snapshot.
	a.env.pub.in <- pubMsg{id: a.id, role: &st, event: &snapshot.Event{Time: a.env.now(), Role: name, Message: msg}, ring: a.ring, answers: done}
}

// sendView tells the gateway the role's view when it changed.
func (a *actor) sendView() {
	name := a.name()
	v := roleView(name, a.lc)
	if v == a.view {
		return
	}
	a.view = v
	if a.env.gw != nil {
		a.env.gw.SetRole(name, v)
	}
}

// dispatch runs ev, and every event the effects of its steps return,
// through the lifecycle: each step's effects run against the lifecycle
// that step made, and the gateway hears the role's view before them.
// The role is published once the queue is empty (and where a step says
// fxShow).
func (a *actor) dispatch(ev event) {
	if ev.Reply != nil {
		a.waits.add(ev.Reply) // answered from the state this command leads to (show)
	}
	queue := []event{ev}
	for len(queue) > 0 {
		ev, queue = queue[0], queue[1:]
		next, fxs := step(a.lc, ev)
		a.lc = next
		a.sendView()
		for _, e := range fxs {
			queue = append(queue, a.exec(e)...)
		}
	}
	a.show()
}

func (a *actor) run(autostart bool) {
	defer close(a.done)
	defer func() { a.waits.end(outcome{Name: a.name(), State: a.st.State, Reason: a.st.Reason}) }()
	defer a.endDrain()
	a.sendView()
	a.show()
	if autostart && !a.lc.Role.Remote {
		a.dispatch(event{Kind: evStart})
	}
	tick := a.env.progressTick()
	defer tick.Stop()
	for !a.lc.over() {
		var procDone chan struct{}
		if a.cur != nil {
			procDone = a.cur.proc.done
		}
		select {
		case ev := <-a.in.cmds:
			a.dispatch(ev)
		case <-procDone:
			a.dispatch(a.exited())
		case ev := <-a.in.ranks:
			a.dispatch(a.rankEvent(ev))
		case <-a.in.poke:
			a.onMilestone()
		case rep := <-a.in.stalls:
			if ev, ok := a.procStall(rep); ok {
				a.dispatch(ev)
			}
		case <-a.timers.drainC:
			a.onDrainTick()
		case r := <-a.gpu.done:
			a.dispatch(a.released(r))
		case <-a.timers.backoffC:
			a.timers.backoff, a.timers.backoffC = nil, nil
			a.st.NextTryAt = time.Time{}
			a.dispatch(event{Kind: evDelayDone})
		case <-a.timers.stopC:
			a.timers.stopC = nil
			a.dispatch(event{Kind: evTermTimeout, Why: "guardian did not finish within " + HumanDuration(a.policy.StopGrace+5*time.Second)})
		case <-tick.C:
			if ev, ok := a.progress(); ok {
				a.dispatch(ev)
			}
		}
	}
	a.show()
}

// exec carries out one effect of step and returns the events it learned.
func (a *actor) exec(e effect) []event {
	switch e.Kind {
	case fxSpawn:
		return a.spawn()
	case fxResetBudget:
		a.budget = budget{}
	case fxCancelBackoff:
		a.cancelDelay()
		a.forgetRelease()
	case fxCancelDelay:
		a.cancelDelay()
	case fxDelay:
		a.timers.backoff = time.NewTimer(e.Delay)
		a.timers.backoffC = a.timers.backoff.C
		a.st.NextTryAt = a.env.now().Add(e.Delay) // views count down to this
	case fxDrain:
		return a.beginDrain(e.Reason)
	case fxEndDrain:
		a.endDrain()
	case fxAbort:
		a.abort(e.Reason)
	case fxTerm:
		a.term(e.Reason)
	case fxKill:
		a.kill(e.Reason)
	case fxHoldGPUs:
		a.gpu.held = a.holdGPUs()
	case fxDropHold:
		a.gpu.held = nil
	case fxWaitRelease:
		a.gpu.done, a.gpu.cancel = a.launchRelease(a.gpu.held)
		a.gpu.held = nil
	case fxCancelRelease:
		a.gpu.cancel() // its result still arrives on done
	case fxDecide:
		return []event{a.decide(e)}
	case fxForgetSilent:
		a.seen.silent = map[int]bool{}
	case fxNote:
		a.note("%s", e.Reason)
	case fxEvent:
		a.env.pub.event(a.name(), e.Reason)
	case fxShow:
		a.show()
	case fxAdopt:
		a.adopt(*e.Plan)
	case fxRename:
		a.rename(e.Name)
	}
	return nil
}

// adopt takes a new plan for the instance (an apply changed it): its
// command, environment and supervision settings from now on. Its name
// is the roster's, changed by rename alone.
func (a *actor) adopt(rp profiles.RolePlan) {
	a.plan = rp
	a.policy = PolicyFromPlan(rp.Restart)
	a.drain = rp.Restart.DrainTimeout.D()
	if a.drain <= 0 {
		a.drain = profiles.DefaultDrainTimeout
	}
	a.st.Kind, a.st.Group, a.st.GPUs, a.st.Worker, a.st.LogFile = rp.Kind, rp.Group, rp.GPUs, rp.Worker, rp.LogFile
	a.st.RanksExpected = a.lc.Role.Expect
	a.note("plan changed by tsd apply")
}

// rename gives the instance a new name (docs/architecture.md §4.3): the
// roster's map is the one thing inside that changes; the edges that name
// it are told — the gateway's worker, and the record of its group that a
// later tsd reads. Its process, sockets, ports and log file stay. It runs
// on the actor's goroutine, between two of its own gateway calls, so the
// gateway never hears the new name before its worker has it; meanwhile
// the roster still routes the gateway's calls by the old name.
func (a *actor) rename(to string) {
	from := a.name()
	if from == to {
		return
	}
	if err := a.env.names.rename(a.id, to); err != nil {
		a.note("rename to %s: %v", to, err)
		return
	}
	if r, ok := a.env.gw.(LiveGateway); ok {
		if err := r.RenameWorker(from, to); err != nil {
			a.note("rename the gateway's worker %s to %s: %v", from, to, err)
		}
	}
	if a.cur != nil {
		a.env.rec.recordGroup(a.id, to, a.cur.proc, a.cur.cgroup)
	}
	a.note("renamed from %s: the same process, socket, ports and log file", from)
	a.env.pub.event(to, "renamed from "+from)
}

func (a *actor) cancelDelay() {
	if a.timers.backoff != nil {
		a.timers.backoff.Stop()
	}
	a.timers.backoff, a.timers.backoffC = nil, nil
	a.st.NextTryAt = time.Time{}
}

// forgetRelease ends a crash's release wait without waiting for its answer.
func (a *actor) forgetRelease() {
	if a.gpu.done != nil {
		a.gpu.cancel()
	}
	a.gpu.done, a.gpu.cancel = nil, nil
}

// holdGPUs is what the role holds on its GPUs now, as the wait for its
// release, or nil when telemetry cannot verify it. For a crash it must
// run before the role's empty group is published: telemetry then stops
// counting the dead tree as the role's.
func (a *actor) holdGPUs() func(context.Context) (bool, string) {
	if a.env.gpus == nil || a.env.gpuLimit <= 0 {
		return nil
	}
	return a.env.gpus.HoldGPUs(a.name())
}

// launchRelease runs one bounded release wait on its own goroutine; the
// loop receives its result on the returned channel.
func (a *actor) launchRelease(wait func(context.Context) (bool, string)) (chan gpuRelease, context.CancelFunc) {
	limit := a.env.gpuLimit
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	done := make(chan gpuRelease, 1)
	a.note("waiting up to %s for the GPU memory to be released", HumanDuration(limit))
	go func() {
		ok, msg := false, "no GPU reading to wait for"
		if wait != nil {
			ok, msg = wait(ctx)
		}
		done <- gpuRelease{ok: ok, msg: msg}
	}()
	return done, cancel
}

// released: a release wait ended; its line goes to the role log and the
// events whatever the lifecycle makes of it.
func (a *actor) released(r gpuRelease) event {
	a.gpu.cancel()
	a.gpu.done, a.gpu.cancel = nil, nil
	a.note("%s", r.msg)
	a.env.pub.event(a.name(), r.msg)
	return event{Kind: evReleased, OK: r.ok, Why: r.msg}
}

// decide asks the restart policy about the run that just crashed.
func (a *actor) decide(e effect) event {
	d := Decide(RestartInput{
		Policy: a.policy, Exit: e.Exit, Ran: e.Ran, History: a.budget.hist, Attempt: a.budget.attempt,
		Now: a.env.now(), Rand: a.env.rand,
	})
	a.budget = budget{hist: d.History, attempt: d.Attempt}
	return event{Kind: evDecided, Action: d.Action, Delay: d.Delay, Why: e.Reason + d.Reason, Holding: a.gpu.held != nil}
}

// spawn starts the engine under its guardian: evSpawned, or evExited
// when it could not be started.
func (a *actor) spawn() []event {
	if a.cur != nil {
		return nil
	}
	a.waits.spawns++ // a command's wait for ready counts from here
	a.seen = newObserved()
	a.st.RanksRegistered = 0
	a.st.Phase, a.st.PID, a.st.ExitCode, a.st.Progress = "", 0, nil, nil
	a.show() // starting, before the engine is: a start that fails is seen to begin
	info := &runInfo{}
	info.matching.Store(true)
	a.note("starting: %s", strings.Join(a.plan.Argv, " "))
	name := a.name()
	cgroup := a.env.rec.roleCgroup(name)
	argv, grace := launcherFor(&a.plan, a.env.guardExe).Command(&a.plan, a.policy.StopGrace)
	spec := procSpec{
		Role: name, Argv: argv, Env: a.plan.Env, Unset: childEnvUnset(a.env.plan.Load(), a.plan), Grace: grace,
		GuardExe: a.env.guardExe, GuardArgs: a.env.guardArgs, Cgroup: cgroup,
	}
	onLine := captureLine(info, a.in.poke, a.env.now)
	var file interface{ Write([]byte) (int, error) }
	if a.file != nil {
		file = a.file
	}
	if why := a.missingModel(); why != "" {
		a.note("%s", why)
		a.env.rec.releaseCgroup(cgroup)
		p := &process{exit: Exit{StartErr: why, Code: 127, Lasting: true}, started: a.env.now(), empty: true}
		return []event{a.ended(p, "")}
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
			p = &process{exit: Exit{StartErr: err.Error(), Code: 127}, started: a.env.now(), empty: true}
		}
		a.env.rec.releaseCgroup(cgroup)
		return []event{a.ended(p, "")}
	}
	a.cur = &run{proc: p, info: info, cgroup: cgroup, progressAt: a.env.now()}
	a.env.runs.set(a.id, p.pid)
	a.st.PID = p.pid
	a.st.StartedAt = p.started
	a.note("engine pid %d (process group %d)", p.pid, p.pid)
	a.env.rec.recordGroup(a.id, name, p, cgroup)
	return []event{{Kind: evSpawned}}
}

// captureLine is what the capture goroutine of a run does with each line:
// milestones, progress bars and error-looking lines for the actor, poked
// when there is something new. It never waits on the actor.
func captureLine(info *runInfo, poke chan struct{}, now func() time.Time) func(string) {
	return func(line string) {
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
}

// term asks the guardian for a graceful stop of the group. A stopped
// (SIGSTOP) tree cannot act on SIGTERM, so it is continued too.
func (a *actor) term(why string) {
	if a.cur == nil {
		return
	}
	p := a.cur.proc
	a.note("%s: SIGTERM to process group %d (SIGKILL after %s)", why, p.pid, HumanDuration(a.policy.StopGrace))
	p.term()
	_ = syscall.Kill(-p.pid, syscall.SIGCONT)
	a.timers.stopC = time.After(a.policy.StopGrace + 5*time.Second)
}

// kill SIGKILLs the group now; why, when set, is logged.
func (a *actor) kill(why string) {
	if a.cur == nil {
		return
	}
	if why != "" {
		a.note("%s; SIGKILL to process group %d", why, a.cur.proc.pid)
	}
	a.cur.proc.kill()
}

// abort ends what is still in flight on the role.
func (a *actor) abort(why string) {
	if a.env.gw == nil {
		return
	}
	name := a.name()
	why = "role " + name + ": " + why
	if n := a.env.gw.AbortRole(name, why); n > 0 {
		a.note("ended %d request(s) still in flight: %s", n, why)
	}
}

// beginDrain starts watching the role's in-flight requests (the gateway
// no longer routes new ones to it), or says at once that none is left.
func (a *actor) beginDrain(why string) []event {
	a.timers.drainUntil = a.env.now().Add(a.drain)
	n := 0
	if a.env.gw != nil {
		n = a.env.gw.DrainCount(a.name())
	}
	if n == 0 {
		return []event{{Kind: evDrained}}
	}
	a.st.DrainInFlight, a.st.DrainDeadline = n, a.timers.drainUntil
	a.note("%s: draining %d request(s) in flight (up to %s)", why, n, HumanDuration(a.drain))
	a.timers.drain = time.NewTicker(drainPoll)
	a.timers.drainC = a.timers.drain.C
	return nil
}

func (a *actor) endDrain() {
	if a.timers.drain != nil {
		a.timers.drain.Stop()
	}
	a.timers.drain, a.timers.drainC = nil, nil
	a.st.DrainInFlight, a.st.DrainDeadline = 0, time.Time{}
}

// onDrainTick reads the draining role's in-flight count (the ticker runs
// only while the lifecycle drains).
func (a *actor) onDrainTick() {
	n := 0
	if a.env.gw != nil {
		n = a.env.gw.DrainCount(a.name())
	}
	switch {
	case n == 0:
		a.note("drained: no request in flight")
		a.dispatch(event{Kind: evDrained})
	case !a.env.now().Before(a.timers.drainUntil):
		a.note("drain_timeout %s passed with %d request(s) in flight; ending them", HumanDuration(a.drain), n)
		a.dispatch(event{Kind: evDrained, TimedOut: true, Limit: a.drain})
	case n != a.st.DrainInFlight:
		a.st.DrainInFlight = n
		a.show()
	}
}

// exited gathers the facts of a run that ended.
func (a *actor) exited() event {
	r := a.cur
	a.cur = nil
	a.env.runs.set(a.id, 0)
	a.timers.stopC = nil
	a.seen.silent, a.seen.proc = map[int]bool{}, ""
	if r.proc.empty {
		a.env.rec.dropGroup(a.id)
	}
	a.env.rec.releaseCgroup(r.cgroup)
	r.info.mu.Lock()
	errLine := r.info.lastErr
	r.info.mu.Unlock()
	return a.ended(r.proc, errLine)
}

// ended logs how a run ended and makes its evExited.
func (a *actor) ended(p *process, errLine string) event {
	code := p.exit.Code
	a.st.ExitCode = &code
	// No process, no uptime: a role in backoff, crashed or stopped shows
	// none, never its dead process's age (StartedAt is the running one's).
	a.st.PID, a.st.Phase, a.st.Progress, a.st.StartedAt = 0, "", nil, time.Time{}
	ran := a.env.now().Sub(p.started)
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
	ev := event{Kind: evExited, Exit: p.exit, Ran: ran, Held: a.gpu.held != nil, ErrLine: errLine}
	a.countExit(exitReason(a.lc, ev))
	if !p.empty {
		a.note("process group %d still has live processes %v after SIGKILL", p.pid, p.leftover)
		ev.Left = fmt.Sprintf("%s after %s; process group %d could not be emptied (pids %v)", p.exit, HumanDuration(ran), p.pid, p.leftover)
		return ev
	}
	if p.pid > 0 {
		a.note("%s after %s; process group %d verified empty", p.exit, HumanDuration(ran), p.pid)
	}
	return ev
}

// countExit counts one end of the role's process by reason (exits.go):
// the map is replaced, never changed, since published snapshots share it.
func (a *actor) countExit(reason string) {
	m := make(map[string]int, len(a.st.Exits)+1)
	for k, v := range a.st.Exits {
		m[k] = v
	}
	m[reason]++
	a.st.Exits = m
}

// onMilestone publishes what the capture saw; the launcher's ready line
// is an event (a role whose ranks are not awaited is ready on it).
func (a *actor) onMilestone() {
	r := a.cur
	if r == nil {
		return
	}
	info := r.info
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
		a.env.pub.event(a.name(), msg)
	}
	if prog != nil && (a.st.Progress == nil || *a.st.Progress != *prog) {
		r.progressAt = a.env.now() // a moving bar is progress, even inside one step
	}
	a.st.Progress = prog
	if !ok || m.Order < r.lastOrder {
		a.show()
		return
	}
	r.lastOrder = m.Order
	r.progressAt = a.env.now()
	a.st.Phase = m.Phase
	if m.Phase != PhaseReady {
		a.show()
		return
	}
	info.matching.Store(false) // the last milestone: spare the per-line cost
	a.dispatch(event{Kind: evReadyLine, Since: a.env.now().Sub(r.proc.started)})
}

// rankEvent folds one rank change into what the actor knows and makes the
// lifecycle's event of it.
func (a *actor) rankEvent(rev snapshot.RankEvent) event {
	a.seen.ranks[rev.Rank.Identity] = rev.Rank
	reg, seen := 0, 0
	for _, r := range a.seen.ranks {
		switch r.State {
		case snapshot.RankRegistered:
			reg++
			seen++
		case snapshot.RankHello, snapshot.RankInitSent, snapshot.RankReady, snapshot.RankStalled:
			seen++
		}
	}
	a.st.RanksRegistered = reg
	if rev.Err != "" {
		a.env.pub.event(a.name(), fmt.Sprintf("rank %d: %s", rev.Rank.Identity, rev.Err))
	}
	if !a.lc.Role.Remote {
		if rev.Rank.State == snapshot.RankStalled {
			a.seen.silent[rev.Rank.Identity] = true
		} else {
			delete(a.seen.silent, rev.Rank.Identity)
		}
	}
	ev := event{Kind: evRanks, Reg: reg, Seen: seen, Closing: a.env.closing.Load(), Proc: a.seen.proc, Silent: a.seen.silent}
	if a.cur != nil {
		a.cur.progressAt = a.env.now()
		ev.Since = a.env.now().Sub(a.cur.proc.started)
	}
	return ev
}

// procStall: the /proc scanner saw the role's tree stop, or run again.
func (a *actor) procStall(rep stallReport) (event, bool) {
	why := rep.why
	if a.cur == nil || rep.pid != a.cur.proc.pid || why == a.seen.proc {
		return event{}, false
	}
	a.seen.proc = why
	if why != "" {
		a.note("process tree stopped: %s", why)
	} else {
		a.note("process tree runs again")
	}
	return event{Kind: evProcStall, Reg: a.st.RanksRegistered, Proc: why, Silent: a.seen.silent}, true
}

// progress watches a run's output for the no-progress deadline: a run
// that printed nothing and reached no milestone for that long is reported
// once per deadline (the lifecycle stops it while it is starting).
func (a *actor) progress() (event, bool) {
	r := a.cur
	limit := a.env.noProgress
	if r == nil || limit <= 0 {
		return event{}, false
	}
	now := a.env.now()
	if n := r.info.lines.Load(); n != r.linesSeen {
		r.linesSeen, r.progressAt = n, now
		return event{}, false
	}
	if now.Sub(r.progressAt) < limit {
		return event{}, false
	}
	r.progressAt = now
	phase := a.st.Phase
	if phase == "" {
		phase = "no milestone yet"
	}
	return event{Kind: evNoProgress, Why: fmt.Sprintf("no progress for %s (phase: %s)", HumanDuration(limit), phase)}, true
}

// missingModel says why a local engine cannot start when its model is a
// folder path that does not exist (an absolute path: a Hugging Face id is
// never one): starting it again would fail the same way until someone
// fixes the profile or the disk, so it is a lasting start error. Roles
// started elsewhere (Slurm steps) read their own filesystem.
func (a *actor) missingModel() string {
	plan := a.env.plan.Load()
	if plan == nil || a.plan.Launcher == profiles.LauncherSlurm || !a.plan.Local || !filepath.IsAbs(plan.Model) {
		return ""
	}
	if _, err := os.Stat(plan.Model); errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("model folder %s does not exist", plan.Model)
	}
	return ""
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/planner"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The SLO planner's loop (docs/architecture.md §4.5): once per
// slo.interval it observes the gateway (per profile entry: TTFT and ITL
// p90 of the interval, the load that came in), asks the pure decision
// (planner.Decide) what layout holds the targets, shows the answer
// (events, Snapshot.Planner, /metrics) and, in act mode, carries a move
// out through the very steps of `tsd scale` (Apply with Scale: drain and
// stop the donor's last replica, its GPUs freed, then start the new
// replica there and wait until it is ready). One goroutine owns the
// loop's state; a move runs in its own goroutine and hands its outcome
// back on a channel. A move that fails is rolled back to the profile
// that served before it; a move never starts while an apply, a rolling
// restart, a drain or any role that is not ready is under way, nor while
// paused (tsd planner pause).

// PlannerGateway is what the planner needs of the gateway: its traffic
// account over the last interval, per role instance and per profile
// entry (groups: the entry's instances). A gateway without it gets no
// planner (Snapshot.Planner says why).
type PlannerGateway interface {
	Observe(window time.Duration, groups map[string][]string) snapshot.TrafficWindow
}

// plannerRecent bounds the decisions kept for views; plannerSeries the
// intervals of each entry's pressure trend.
const (
	plannerRecent = 20
	plannerSeries = 40
	// plannerIdlePoll is how often a deployment without slo: looks
	// whether tsd apply gave it one.
	plannerIdlePoll = time.Second
)

// plannerCmd is an operator's command (pause, resume); the loop answers
// on reply.
type plannerCmd struct {
	pause bool
	reply chan string
}

// moveDone is a move's outcome, handed back to the loop.
type moveDone struct {
	move       *planner.Move
	reason     string
	err        error // the move failed (its apply refused or stopped)
	refused    bool  // it was refused before any step: nothing to roll back
	rolledBack bool
	rbErr      error // the rollback failed too
}

// plannerLoop is the loop: the commands it takes, the status it
// publishes (read by the publisher without a lock) and what it uses of
// the deployment (plannerDeps).
type plannerLoop struct {
	cmds   chan plannerCmd
	status atomic.Pointer[snapshot.PlannerStatus]
	done   chan struct{}
	plannerDeps
}

// plannerDeps are what the planner's loop uses of the deployment: it
// reads the plan and the roles, observes the gateway, changes the layout
// only through Apply, as tsd scale does.
type plannerDeps struct {
	plan     func() *profiles.Plan
	snapshot func() snapshot.Snapshot
	apply    func(ctx context.Context, req ApplyRequest, follow func(ApplyPlan, string)) (ApplyPlan, error)
	// busy is what else changes the deployment now (an apply, a
	// rolling restart) and whether it has a profile to scale, as
	// plannerWaits reads them (its mode, pause, move and roles unset).
	busy    func() waitFacts
	observe PlannerGateway // nil: no gateway to observe
	event   func(role, msg string)
	sync    func() // returns once the snapshot shows what the loop did
	now     func() time.Time
	running <-chan struct{} // closed once the deployment runs
}

func newPlannerLoop(s *Supervisor) *plannerLoop {
	d := plannerDeps{
		plan: s.Plan, snapshot: s.Snapshot, apply: s.Apply, now: s.now, running: s.running,
		event: func(role, msg string) { s.pub.event(role, msg) },
		sync:  func() { s.pub.sync() },
		busy: func() waitFacts {
			f := waitFacts{noProfile: s.apply.applied.Load().profile == nil, rolling: int(s.rolling.Load())}
			if st := s.apply.status(); st != nil {
				f.apply, f.applyStep = st.State == snapshot.ApplyRunning, st.Step
			}
			return f
		},
	}
	if obs, ok := s.gw.(PlannerGateway); ok && s.gw != nil {
		d.observe = obs
	}
	return &plannerLoop{cmds: make(chan plannerCmd), done: make(chan struct{}), plannerDeps: d}
}

// plannerState is what the loop goroutine owns.
type plannerState struct {
	hist     planner.History
	prev     map[string]snapshot.RoleWindow
	prevAt   time.Time
	paused   bool
	moving   *planner.Move
	lastKey  string
	counts   map[string]uint64
	moves    uint64
	failed   uint64
	recent   []snapshot.PlannerChange
	series   map[string][]float64
	last     *snapshot.PlannerStatus
	lastTick time.Time
}

// run is the loop; it returns when stop is closed, once a move under way
// has handed its outcome back.
func (pl *plannerLoop) run(stop <-chan struct{}) {
	defer close(pl.done)
	st := &plannerState{counts: map[string]uint64{}, series: map[string][]float64{}}
	moves := make(chan moveDone, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.NewTimer(pl.delay())
	defer timer.Stop()
	for {
		select {
		case <-stop:
			cancel()
			if st.moving != nil {
				<-moves
			}
			return
		case c := <-pl.cmds:
			c.reply <- pl.command(st, c)
		case m := <-moves:
			pl.moved(st, m)
			pl.status.Store(pl.publish(st))
		case <-timer.C:
			pl.tick(ctx, st, moves)
			timer.Reset(pl.delay())
		}
	}
}

// delay is the time to the next interval: slo.interval, or the idle
// poll without slo:.
func (pl *plannerLoop) delay() time.Duration {
	if slo := pl.plan().SLO; slo != nil && slo.Interval > 0 {
		return slo.Interval.D()
	}
	return plannerIdlePoll
}

func (pl *plannerLoop) command(st *plannerState, c plannerCmd) string {
	if pl.plan().SLO == nil {
		return "this deployment has no slo: in its profile, so no planner (add one and tsd apply)"
	}
	var answer string
	switch {
	case c.pause && st.paused:
		answer = "the planner is already paused"
	case c.pause:
		st.paused = true
		answer = "the planner is paused: it observes and proposes, and changes nothing until tsd planner resume"
		if st.moving != nil {
			answer += " (the move under way completes first)"
		}
		pl.event("", "planner: paused by tsd planner pause")
	case !st.paused:
		answer = "the planner is not paused"
	default:
		st.paused = false
		answer = "the planner resumed"
		pl.event("", "planner: resumed by tsd planner resume")
	}
	if st.last != nil {
		cp := *st.last
		cp.Paused = st.paused
		st.last = &cp
		pl.status.Store(&cp)
	}
	return answer
}

// tick is one interval: observe, decide, show, maybe act.
func (pl *plannerLoop) tick(ctx context.Context, st *plannerState, moves chan<- moveDone) {
	plan := pl.plan()
	slo := plan.SLO
	if slo == nil {
		if st.last != nil {
			pl.event("", "planner: off (the profile has no slo: any more)")
		}
		*st = plannerState{counts: st.counts, series: map[string][]float64{}, moving: st.moving, paused: st.paused, moves: st.moves, failed: st.failed}
		pl.status.Store(nil)
		return
	}
	now := pl.now()
	cfg := plannerConfig(slo)
	layout, groups := plannerLayout(plan, slo)
	if pl.observe == nil {
		st.last = &snapshot.PlannerStatus{Mode: slo.Mode, Paused: st.paused, TTFT: cfg.TTFT, ITL: cfg.ITL, Interval: cfg.Interval, Cooldown: cfg.Cooldown,
			GPUs: cfg.GPUs, Code: "no_gateway", Reason: "no gateway to observe: the planner needs the embedded gateway's traffic account"}
		pl.status.Store(st.last)
		return
	}
	tw := pl.observe.Observe(cfg.Interval, groups)
	o := st.observation(tw, groups, now, cfg.Interval)
	d := planner.Decide(st.hist, o, layout, cfg, now)
	st.hist = d.History
	st.counts[d.Code]++
	st.lastTick = now
	for _, v := range d.Groups {
		ser := append(st.series[v.Group], v.Pressure)
		if len(ser) > plannerSeries {
			ser = ser[len(ser)-plannerSeries:]
		}
		st.series[v.Group] = ser
	}
	facts := pl.busy()
	facts.mode, facts.paused, facts.moving, facts.roles = slo.Mode, st.paused, st.moving != nil, pl.snapshot().Roles
	waiting := plannerWaits(facts, d.Move != nil)
	proposal := moveText(d.Move)
	key := d.Code + "|" + proposal
	act := d.Move != nil && waiting == ""
	if key != st.lastKey {
		st.lastKey = key
		pl.event("", "planner: "+d.Reason+modeNote(slo.Mode, d.Move, waiting))
		if d.Move != nil && !act {
			st.remember(snapshot.PlannerChange{Time: now, Code: d.Code, Reason: d.Reason, Outcome: "proposed"})
		}
	}
	st.last = st.status(slo, cfg, d, proposal, waiting, now)
	if act {
		st.moving = d.Move
		st.remember(snapshot.PlannerChange{Time: now, Code: d.Code, Reason: d.Reason, Outcome: "running"})
		st.last.Waiting = "the move is under way: " + proposal
		before := map[string]int{}
		for _, g := range layout.Groups {
			if _, ok := d.Move.Replicas[g.Name]; ok {
				before[g.Name] = g.Replicas()
			}
		}
		go pl.move(ctx, d.Move, d.Reason, before, moves)
	}
	pl.status.Store(st.last)
}

func modeNote(mode string, m *planner.Move, waiting string) string {
	switch {
	case m == nil:
		return ""
	case mode == profiles.SLOAdvise:
		return " (advise: not carried out)"
	case waiting != "":
		return " (waits: " + waiting + ")"
	}
	return ""
}

func (st *plannerState) remember(c snapshot.PlannerChange) {
	st.recent = append(st.recent, c)
	if len(st.recent) > plannerRecent {
		st.recent = st.recent[len(st.recent)-plannerRecent:]
	}
}

// move carries a move out as tsd scale would, and rolls it back when it
// fails: the apply of the profile that served before the move (the
// supervisor keeps it until an apply completes), with each entry at the
// replicas it had.
func (pl *plannerLoop) move(ctx context.Context, m *planner.Move, reason string, before map[string]int, out chan<- moveDone) {
	res := moveDone{move: m, reason: reason}
	defer func() {
		if r := recover(); r != nil {
			res.err = fmt.Errorf("panic: %v", r)
		}
		out <- res
	}()
	pl.event("", "planner: carrying out "+moveText(m)+" (as tsd scale "+scaleText(m.Replicas)+")")
	quiet := func(ApplyPlan, string) {} // the apply's own lines are events already
	started := false
	_, err := pl.apply(ctx, ApplyRequest{Scale: maps.Clone(m.Replicas), GPUs: append([]string(nil), m.GPUs...)}, func(ApplyPlan, string) { started = true })
	if err == nil {
		return
	}
	res.err = err
	if !started || errors.Is(err, ErrApplyRunning) {
		res.refused = true
		return
	}
	if ctx.Err() != nil {
		return // tsd is stopping: no rollback to start now
	}
	pl.event("", "planner: the move failed ("+oneLine(err.Error())+"): rolling back to the layout that served before it (tsd scale "+scaleText(before)+")")
	_, res.rbErr = pl.apply(ctx, ApplyRequest{Scale: before}, quiet)
	res.rolledBack = res.rbErr == nil
}

// moved takes a move's outcome.
func (pl *plannerLoop) moved(st *plannerState, m moveDone) {
	st.moving = nil
	text := moveText(m.move)
	outcome := "done"
	switch {
	case m.err == nil:
		st.moves++
		pl.event("", "planner: done: "+text)
	case m.refused:
		outcome = "refused"
		pl.event("", "planner: "+text+" was refused, nothing changed: "+oneLine(m.err.Error()))
	case m.rbErr != nil:
		st.failed++
		outcome = "failed"
		st.paused = true
		pl.event("", "planner: the rollback failed too ("+oneLine(m.rbErr.Error())+"); paused until tsd planner resume: see tsd status and tsd plan --running")
	default:
		st.failed++
		outcome = "rolled back"
		pl.event("", "planner: "+text+" failed and was rolled back: "+oneLine(m.err.Error()))
	}
	for i := len(st.recent) - 1; i >= 0; i-- {
		if st.recent[i].Outcome == "running" {
			st.recent[i].Outcome = outcome
			break
		}
	}
	if !m.refused {
		st.lastKey = "" // the layout changed: say the next decision, whatever it is
	}
}

// publish is the last status with the loop's counters now.
func (pl *plannerLoop) publish(st *plannerState) *snapshot.PlannerStatus {
	if st.last == nil {
		return nil
	}
	cp := *st.last
	cp.Paused, cp.Moves, cp.Failed = st.paused, st.moves, st.failed
	cp.Recent = append([]snapshot.PlannerChange(nil), st.recent...)
	if st.moving == nil && strings.HasPrefix(cp.Waiting, "the move is under way") {
		cp.Waiting = ""
	}
	st.last = &cp
	return &cp
}

// status is the Snapshot's view of one decision.
func (st *plannerState) status(slo *profiles.SLOPlan, cfg planner.Config, d planner.Decision, proposal, waiting string, now time.Time) *snapshot.PlannerStatus {
	ps := &snapshot.PlannerStatus{Mode: slo.Mode, Paused: st.paused, TTFT: cfg.TTFT, ITL: cfg.ITL, Interval: cfg.Interval, Cooldown: cfg.Cooldown,
		GPUs: append([]string(nil), cfg.GPUs...), Last: now, Next: now.Add(cfg.Interval), Code: d.Code, Reason: d.Reason,
		Proposal: proposal, Waiting: waiting, Decisions: maps.Clone(st.counts), Moves: st.moves, Failed: st.failed,
		Recent: append([]snapshot.PlannerChange(nil), st.recent...)}
	if d.Move == nil {
		ps.Waiting = ""
	}
	for _, v := range d.Groups {
		b, _ := slo.Bounds(v.Group)
		ps.Groups = append(ps.Groups, snapshot.PlannerGroup{Group: v.Group, Kind: v.Kind, Replicas: v.Replicas, Proposed: v.Proposed,
			Min: b.Min, Max: b.Max, TTFT: v.TTFT, ITL: v.ITL, TTFTN: v.TTFTN, ITLN: v.ITLN, Pressure: v.Pressure, Predicted: v.Predicted,
			Judged: v.Judged, Streak: v.Streak, CooldownUntil: v.CooldownUntil, ReqPerSec: v.RequestsPerSec, PromptPerReq: v.PromptPerReq,
			CachedShare: v.Cached, InFlight: v.InFlight, QueuedPrompt: v.Queued, Backlog: v.Backlog, OutputTokPerS: v.OutputTokPerSec,
			PressureSeries: append([]float64(nil), st.series[v.Group]...)})
	}
	return ps
}

// observation turns the gateway's reading into the decision's: each
// entry's p90s over its instances' samples, and the differences of the
// counters since the last reading, summed over the instances present in
// both (an instance new this interval, or renamed, counts from the next).
func (st *plannerState) observation(tw snapshot.TrafficWindow, groups map[string][]string, now time.Time, interval time.Duration) planner.Observation {
	cur := make(map[string]snapshot.RoleWindow, len(tw.Roles))
	for _, r := range tw.Roles {
		cur[r.Role] = r
	}
	span := interval
	if !st.prevAt.IsZero() {
		span = now.Sub(st.prevAt)
	}
	o := planner.Observation{Span: span}
	for _, gw := range tw.Groups {
		g := planner.GroupObs{Group: gw.Role, TTFT: gw.TTFTp90, ITL: gw.ITLp90, TTFTN: gw.TTFTN, ITLN: gw.ITLN}
		var prefilled, cached uint64
		var busy float64
		for _, inst := range groups[gw.Role] {
			c, ok := cur[inst]
			if !ok {
				continue
			}
			g.Queued += c.Queued
			p, seen := st.prev[inst]
			if !seen || st.prev == nil {
				continue
			}
			g.Requests += int(sub(c.Requests, p.Requests))
			g.Prompt += int(sub(c.PromptIn, p.PromptIn))
			g.OutputToks += int(sub(c.Output, p.Output))
			prefilled += sub(c.Prefilled, p.Prefilled)
			g.Prefilled += int(sub(c.Prefilled, p.Prefilled))
			cached += sub(c.Cached, p.Cached)
			busy += max(0, c.BusySec-p.BusySec)
		}
		if prefilled > 0 {
			g.Cached = float64(cached) / float64(prefilled)
		}
		if span > 0 {
			g.InFlight = busy / span.Seconds()
		}
		o.Groups = append(o.Groups, g)
	}
	st.prev, st.prevAt = cur, now
	return o
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0 // a row that started over (a name given to a new role)
	}
	return a - b
}

// plannerConfig is slo: as the decision reads it.
func plannerConfig(slo *profiles.SLOPlan) planner.Config {
	return planner.Config{TTFT: slo.TTFTP90.D(), ITL: slo.ITLP90.D(), Interval: slo.Interval.D(), Window: slo.Window.D(),
		Cooldown: slo.Cooldown.D(), Breach: slo.Breach, Headroom: slo.Headroom, GPUs: append([]string(nil), slo.GPUs...)}
}

// plannerLayout is the running plan as the decision reads it: every
// entry slo: resizes, its local instances in replica order with their
// GPUs, and the GPUs every other local role holds; and each entry's
// instances by name, for the gateway's reading.
func plannerLayout(p *profiles.Plan, slo *profiles.SLOPlan) (planner.Layout, map[string][]string) {
	var l planner.Layout
	groups := map[string][]string{}
	inGroup := map[string]bool{}
	for _, b := range slo.Roles {
		var insts []profiles.RolePlan
		for _, r := range p.Roles {
			if r.Local && r.Group == b.Group {
				insts = append(insts, r)
			}
		}
		if len(insts) == 0 {
			continue
		}
		sort.SliceStable(insts, func(i, j int) bool {
			a, _ := insts[i].ReplicaIndex()
			c, _ := insts[j].ReplicaIndex()
			return a < c
		})
		g := planner.Group{Name: b.Group, Kind: b.Kind, Min: b.Min, Max: b.Max}
		for _, r := range insts {
			g.Instances = append(g.Instances, r.Name)
			g.Sets = append(g.Sets, append([]string(nil), r.GPUs...))
			inGroup[r.Name] = true
		}
		l.Groups = append(l.Groups, g)
		groups[b.Group] = g.Instances
	}
	for _, r := range p.Roles {
		if r.Local && !inGroup[r.Name] {
			l.Other = append(l.Other, r.GPUs...)
		}
	}
	return l, groups
}

// waitFacts are what may hold a proposal back.
type waitFacts struct {
	mode      string
	paused    bool
	noProfile bool // a plan-file deployment: tsd scale has no profile to edit
	moving    bool
	apply     bool
	applyStep string
	rolling   int
	roles     []snapshot.RoleStatus
}

// plannerWaits says what holds a proposal back ("" when it may be carried
// out now): pause, advise mode, a move or an apply under way, a rolling
// restart, or a role that is not ready (draining, starting, backing off,
// failed or stopped). A pure function (planner_test.go).
func plannerWaits(f waitFacts, proposal bool) string {
	switch {
	case !proposal:
		return ""
	case f.paused:
		return "paused (tsd planner resume gives it the wheel back)"
	case f.mode != profiles.SLOAct:
		return "advise mode (slo.mode: act carries proposals out)"
	case f.noProfile:
		return "a deployment run from a plan file has no profile to scale (tsd apply a profile first)"
	case f.moving:
		return "the last move is under way"
	case f.apply:
		return "an apply is in progress (" + f.applyStep + ")"
	case f.rolling > 0:
		return "a rolling restart is in progress"
	}
	var busy []string
	for _, r := range f.roles {
		if r.Remote {
			continue
		}
		switch r.State {
		case snapshot.StateReady:
			continue
		case snapshot.StateDraining:
			busy = append(busy, r.Name+" draining")
		default:
			busy = append(busy, r.Name+" "+r.State)
		}
	}
	if len(busy) > 0 {
		if len(busy) > 3 {
			busy = append(busy[:3], fmt.Sprintf("%d more", len(busy)-3))
		}
		return strings.Join(busy, ", ")
	}
	return ""
}

// moveText is a move in words: "move GPU 3 from decode-2 to prefill-1".
func moveText(m *planner.Move) string {
	if m == nil {
		return ""
	}
	gpus := "GPU " + strings.Join(m.GPUs, ",")
	if len(m.GPUs) > 1 {
		gpus = "GPUs " + strings.Join(m.GPUs, ",")
	}
	if m.From == "" {
		return "add " + m.ToInstance + " on " + gpus
	}
	return "move " + gpus + " from " + m.FromInstance + " to " + m.ToInstance
}

// scaleText is a scale request as tsd scale takes it: "decode=2 prefill=2".
func scaleText(n map[string]int) string {
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, n[k])
	}
	return strings.Join(parts, " ")
}

// snapshot is the planner as the last interval left it (nil: no slo:,
// or Run has not started it).
func (pl *plannerLoop) snapshotStatus() *snapshot.PlannerStatus {
	if pl == nil {
		return nil
	}
	return pl.status.Load()
}

// PlannerPause stops the planner from carrying out proposals (it still
// observes and proposes) until PlannerResume; a move under way completes.
func (s *Supervisor) PlannerPause() (string, error) { return s.planner.ask(true) }

// PlannerResume lets the planner carry out its proposals again.
func (s *Supervisor) PlannerResume() (string, error) { return s.planner.ask(false) }

// ask hands the loop an operator's command and returns its answer.
func (pl *plannerLoop) ask(pause bool) (string, error) {
	select {
	case <-pl.running:
	default:
		return "", ErrNotRunning
	}
	c := plannerCmd{pause: pause, reply: make(chan string, 1)}
	select {
	case pl.cmds <- c:
	case <-pl.done:
		return "", ErrNotRunning
	}
	select {
	case a := <-c.reply:
		pl.sync() // the answer's state is in the snapshot the caller reads next
		return a, nil
	case <-pl.done:
		return "", ErrNotRunning
	}
}

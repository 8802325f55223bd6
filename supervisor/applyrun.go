package supervisor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The execution half of an apply (docs/architecture.md §4.3): one
// goroutine per apply carries out its batches of steps. Every step is a
// command to the roster (add, remove, refresh, order: it answers with
// the actor or why not), to an actor (start, restart, stop, rename,
// update: it answers with the outcome, answer.go), or a gateway call;
// nothing is learned by reading a snapshot back. The running plan is
// patched after each step (tsd plan --running).

// ErrApplyRunning refuses a second apply while one runs.
var ErrApplyRunning = errors.New("an apply is in progress")

// applyJob is one apply: what it does and how far it got. Its goroutine
// (runJob) owns the steps; followers and the publisher read the lines and
// the status under mu.
type applyJob struct {
	plan    ApplyPlan
	target  *profiles.Plan
	next    *applied
	batches [][]applyStep
	apiKey  string
	apiKeys map[string]string // gateway.api_keys' values by variable

	mu     sync.Mutex
	lines  []string
	wake   chan struct{} // closed and replaced on every new line
	status snapshot.ApplyStatus
	err    error
	done   chan struct{}
}

// expected refuses req when the caller confirmed another target than
// the one planned now.
func (j *applyJob) expected(req ApplyRequest) error {
	if req.Expect != "" && req.Expect != j.plan.To {
		return fmt.Errorf("the target changed since it was shown (revision %s, now %s): run tsd apply again to see the new diff", req.Expect, j.plan.To)
	}
	return nil
}

// say adds a progress line for followers and the deployment's events.
func (j *applyJob) say(pub *publisher, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	j.mu.Lock()
	j.lines = append(j.lines, line)
	close(j.wake)
	j.wake = make(chan struct{})
	j.mu.Unlock()
	pub.event("", "apply: "+line)
}

func (j *applyJob) setStep(step string, done int) {
	j.mu.Lock()
	j.status.Step, j.status.Done = step, done
	j.mu.Unlock()
}

// finish records how j ended; whoever it wakes sees the snapshot with
// the outcome (and the new revision) published.
func (j *applyJob) finish(pub *publisher, err error) {
	j.mu.Lock()
	j.err = err
	j.status.State = snapshot.ApplyDone
	if err != nil {
		j.status.State, j.status.Error = snapshot.ApplyFailed, err.Error()
	}
	j.mu.Unlock()
	pub.sync()
	close(j.done)
}

func (j *applyJob) snapshotStatus() snapshot.ApplyStatus {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.status
}

// follow hands each progress line to fn until the apply ends (its error)
// or ctx does.
func (j *applyJob) follow(ctx context.Context, fn func(string)) error {
	next := 0
	for {
		j.mu.Lock()
		lines, wake := j.lines[next:], j.wake
		next = len(j.lines)
		j.mu.Unlock()
		for _, l := range lines {
			fn(l)
		}
		select {
		case <-wake:
		case <-j.done:
			j.mu.Lock()
			rest := j.lines[next:]
			err := j.err
			j.mu.Unlock()
			for _, l := range rest {
				fn(l)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// status is the last apply as the snapshot shows it (nil: none yet).
func (ap *applier) status() *snapshot.ApplyStatus {
	j := ap.job.Load()
	if j == nil {
		return nil
	}
	st := j.snapshotStatus()
	return &st
}

// revision is the profile revision the deployment runs.
func (ap *applier) revision() string {
	if a := ap.applied.Load(); a != nil {
		return a.revision
	}
	return ""
}

// startJob runs j unless another apply runs.
func (ap *applier) startJob(j *applyJob) error {
	ap.jobMu.Lock()
	defer ap.jobMu.Unlock()
	if prev := ap.job.Load(); prev != nil {
		select {
		case <-prev.done:
		default:
			st := prev.snapshotStatus()
			return fmt.Errorf("%w (revision %s, %s); wait for it or follow it with tsd status", ErrApplyRunning, st.Revision, st.Step)
		}
	}
	total := 0
	for _, b := range j.batches {
		total += len(b)
	}
	j.status = snapshot.ApplyStatus{Revision: j.plan.To, State: snapshot.ApplyRunning, Steps: total, Started: ap.now()}
	ap.job.Store(j)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-ap.teardown:
			cancel()
		case <-j.done:
		}
	}()
	go func() {
		defer cancel()
		ap.runJob(ctx, j)
	}()
	return nil
}

// runJob carries out j's steps, batch by batch.
func (ap *applier) runJob(ctx context.Context, j *applyJob) {
	pp := &planPatch{plan: ap.plan}
	pp.cur = ap.plan.load()
	j.say(ap.pub, "%s → %s: %s", orDash(j.plan.From), j.plan.To, j.plan.Summary)
	done := 0
	for bi, batch := range j.batches {
		step := j.plan.Steps[bi]
		j.setStep(step, done)
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for i, st := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					if r := recover(); r != nil {
						errs[i] = fmt.Errorf("%s: panic: %v", st, r)
					}
				}()
				errs[i] = ap.runStep(ctx, j, pp, st)
			}()
		}
		wg.Wait()
		done += len(batch)
		if err := errors.Join(errs...); err != nil {
			ap.failJob(j, bi, err)
			return
		}
		j.setStep(step, done)
		if batch[0].Kind == stepStart {
			ap.order(j.target)
		}
	}
	ap.order(j.target)
	ap.plan.set(j.target)
	ap.applied.Store(j.next)
	j.say(ap.pub, "done: the deployment runs revision %s", j.plan.To)
	j.finish(ap.pub, nil)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// failJob ends j at batch bi: what stopped it, what runs now, what is
// left to do.
func (ap *applier) failJob(j *applyJob, bi int, err error) {
	j.say(ap.pub, "stopped at step %d/%d (%s): %v", bi+1, len(j.batches), j.plan.Steps[bi], err)
	var now []string
	for _, r := range ap.pub.current().Roles {
		st := r.Name + " " + r.State
		if r.Reason != "" && r.State != snapshot.StateReady {
			st += " (" + r.Reason + ")"
		}
		now = append(now, st)
	}
	j.say(ap.pub, "running now: %s", strings.Join(now, ", "))
	if rest := j.plan.Steps[bi+1:]; len(rest) > 0 {
		j.say(ap.pub, "not done: %s", strings.Join(rest, ", "))
	}
	j.say(ap.pub, "tsd plan --running prints what runs; tsd apply again completes the change")
	j.finish(ap.pub, fmt.Errorf("stopped at %s: %w", j.plan.Steps[bi], err))
}

// order puts the roster in the target plan's order.
func (ap *applier) order(target *profiles.Plan) {
	names := make([]string, len(target.Roles))
	for i, r := range target.Roles {
		names[i] = r.Name
	}
	_, _ = ap.roster.change(rosterCmd{op: opOrder, order: names})
}

// planPatch is the running plan as an apply's steps change it: each
// change makes a new plan value (readers hold the old ones).
type planPatch struct {
	mu   sync.Mutex
	plan *runningPlan
	cur  *profiles.Plan
}

func (pp *planPatch) patch(change func(p *profiles.Plan)) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	p := *pp.cur
	p.Roles = append([]profiles.RolePlan(nil), pp.cur.Roles...)
	p.Gateway.Workers = append([]profiles.WorkerPlan(nil), pp.cur.Gateway.Workers...)
	change(&p)
	pp.cur = &p
	pp.plan.set(&p)
}

// hasWorker reports whether the patched plan has a worker for name.
func (pp *planPatch) hasWorker(name string) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	_, ok := pp.cur.Gateway.Worker(name)
	return ok
}

// setRole puts rp (and its worker) in p, replacing the role named name.
func setRole(p *profiles.Plan, name string, rp *profiles.RolePlan, wp *profiles.WorkerPlan) {
	removeRole(p, name)
	p.Roles = append(p.Roles, *rp)
	if wp != nil {
		p.Gateway.Workers = append(p.Gateway.Workers, *wp)
	}
}

func removeRole(p *profiles.Plan, name string) {
	roles := p.Roles[:0]
	for _, r := range p.Roles {
		if r.Name != name {
			roles = append(roles, r)
		}
	}
	p.Roles = roles
	workers := p.Gateway.Workers[:0]
	for _, w := range p.Gateway.Workers {
		if w.Role != name {
			workers = append(workers, w)
		}
	}
	p.Gateway.Workers = workers
}

// runStep carries out one step.
func (ap *applier) runStep(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	switch st.Kind {
	case stepStop:
		return ap.stopStep(ctx, j, pp, st)
	case stepRename:
		return ap.renameStep(ctx, j, pp, st)
	case stepUpdate:
		return ap.updateStep(ctx, j, pp, st)
	case stepGateway:
		return ap.gatewayStep(j, pp)
	case stepStart:
		return ap.startStep(ctx, j, pp, st)
	case stepRestart:
		return ap.restartStep(ctx, j, pp, st)
	}
	return fmt.Errorf("unknown step %v", st.Kind)
}

func (ap *applier) live() LiveGateway {
	lg, _ := ap.gw.(LiveGateway)
	return lg
}

// ask sends name's actor ev and waits for its answer (the outcome, or
// why there is none).
func (ap *applier) ask(ctx context.Context, name string, ev event, g goal) (outcome, error) {
	_, w, err := ask(ap.roster.current(), name, ev, g)
	if err != nil {
		return outcome{}, err
	}
	return awaitFor(ctx, name, w)
}

// awaitFor is await, its ctx error naming what it waited for.
func awaitFor(ctx context.Context, name string, w *waiter) (outcome, error) {
	o, err := await(ctx, w)
	if err != nil && ctx.Err() != nil {
		return o, fmt.Errorf("waiting for %s: %w", name, err)
	}
	return o, err
}

// stopAndWait drains and stops name and waits until its process is gone.
func (ap *applier) stopAndWait(ctx context.Context, name string) error {
	_, w, err := ask(ap.roster.current(), name, event{Kind: evStop, Why: whyStop}, goalGone)
	if err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	_, err = awaitFor(ctx, name, w)
	return err
}

func (ap *applier) stopStep(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	m, ok := ap.roster.current().find(st.Name)
	if !ok {
		return nil // gone already
	}
	j.say(ap.pub, "stop %s: drain its requests, stop it, unbind its sockets", st.Name)
	if err := ap.stopAndWait(ctx, st.Name); err != nil {
		return err
	}
	m.a.send(event{Kind: evQuit, Why: "removed by tsd apply"})
	select {
	case <-m.a.done: // the actor's end is its answer
	case <-ctx.Done():
		return ctx.Err()
	}
	if lg := ap.live(); lg != nil && pp.hasWorker(st.Name) {
		if err := lg.RemoveWorker(st.Name); err != nil {
			return fmt.Errorf("unbind %s's sockets: %w", st.Name, err)
		}
	}
	if _, err := ap.roster.change(rosterCmd{op: opRemove, id: m.id}); err != nil {
		return fmt.Errorf("remove %s: %w", st.Name, err)
	}
	pp.patch(func(p *profiles.Plan) { removeRole(p, st.Name) })
	j.say(ap.pub, "%s stopped and removed", st.Name)
	return nil
}

// renameStep renames an instance: its actor changes the roster's name and
// tells the edges (the gateway's worker, the group record), then answers.
func (ap *applier) renameStep(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	if _, taken := ap.roster.current().find(st.Name); taken {
		return fmt.Errorf("rename %s to %s: a role of that name runs", st.Was, st.Name)
	}
	o, err := ap.ask(ctx, st.Was, event{Kind: evRename, Name: st.Name}, goalTaken)
	if err != nil {
		return fmt.Errorf("rename %s: %w", st.Was, err)
	}
	if o.Name != st.Name {
		return fmt.Errorf("rename %s to %s did not take (its log says why)", st.Was, st.Name)
	}
	plannedAs := ""
	if tr, ok := j.target.Role(st.Name); ok {
		plannedAs = tr.PlannedAs
	}
	pp.patch(func(p *profiles.Plan) {
		for i := range p.Roles {
			if p.Roles[i].Name == st.Was {
				p.Roles[i].Name, p.Roles[i].PlannedAs = st.Name, plannedAs
			}
		}
		for i := range p.Gateway.Workers {
			if p.Gateway.Workers[i].Role == st.Was {
				p.Gateway.Workers[i].Role = st.Name
			}
		}
	})
	pid := "no process"
	if o.PID > 0 {
		pid = fmt.Sprintf("pid %d", o.PID)
	}
	j.say(ap.pub, "renamed %s to %s: the same process (%s), socket, ports and log", st.Was, st.Name, pid)
	return nil
}

func (ap *applier) updateStep(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	rp := *st.Role
	facts := factsFor(rp, ranksExpected(rp, ap.plan.load().Gateway.Mode), ap.gw != nil)
	if _, err := ap.ask(ctx, st.Name, event{Kind: evUpdate, Plan: &rp, Facts: facts}, goalTaken); err != nil {
		return fmt.Errorf("update %s: %w", st.Name, err)
	}
	pp.patch(func(p *profiles.Plan) {
		var wp *profiles.WorkerPlan
		if w, ok := p.Gateway.Worker(st.Name); ok {
			c := *w
			wp = &c
		}
		setRole(p, st.Name, &rp, wp)
	})
	j.say(ap.pub, "%s takes %s without a restart", st.Name, st.Why)
	return nil
}

func (ap *applier) gatewayStep(j *applyJob, pp *planPatch) error {
	if lg := ap.live(); lg != nil {
		if err := lg.Reconfigure(j.target.Gateway, j.apiKey, j.apiKeys); err != nil {
			return fmt.Errorf("gateway settings: %w", err)
		}
	}
	key, keys := j.apiKey, j.apiKeys
	ap.apiKey.Store(&key)
	ap.apiKeys.Store(&keys)
	pp.patch(func(p *profiles.Plan) {
		workers := p.Gateway.Workers
		p.Gateway = j.target.Gateway
		p.Gateway.Workers = workers
	})
	j.say(ap.pub, "the gateway takes %s in place", fieldsText(j.plan.Diff.Gateway))
	return nil
}

func (ap *applier) startStep(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	lg := ap.live()
	if st.Worker != nil && lg != nil {
		if err := lg.AddWorker(*st.Worker); err != nil {
			return fmt.Errorf("bind %s's sockets: %w", st.Name, err)
		}
	}
	a, err := ap.roster.change(rosterCmd{op: opAdd, rp: *st.Role})
	if err != nil {
		if st.Worker != nil && lg != nil {
			_ = lg.RemoveWorker(st.Name)
		}
		return fmt.Errorf("add %s: %w", st.Name, err)
	}
	go a.run(false) // in the roster already: its name resolves from its first line
	pp.patch(func(p *profiles.Plan) { setRole(p, st.Name, st.Role, st.Worker) })
	j.say(ap.pub, "start %s on GPU(s) %s: its sockets are bound", st.Name, gpuText(st.Role.GPUs))
	w := newWaiter(goalReady)
	if !a.send(event{Kind: evStart, Reply: w}) {
		return fmt.Errorf("start %s: %w", st.Name, ErrNotRunning)
	}
	return ap.awaitReady(ctx, j, st.Name, w)
}

func gpuText(g []string) string {
	if len(g) == 0 {
		return "none"
	}
	return strings.Join(g, ",")
}

func (ap *applier) restartStep(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	if st.Rebind {
		j.say(ap.pub, "restart %s (%s): its worker moves, so it stops first", st.Name, st.Why)
		if err := ap.stopAndWait(ctx, st.Name); err != nil {
			return err
		}
		if lg := ap.live(); lg != nil {
			if pp.hasWorker(st.Name) {
				if err := lg.RemoveWorker(st.Name); err != nil {
					return fmt.Errorf("unbind %s's sockets: %w", st.Name, err)
				}
			}
			if st.Worker != nil {
				if err := lg.AddWorker(*st.Worker); err != nil {
					return fmt.Errorf("bind %s's new sockets: %w", st.Name, err)
				}
			}
		}
	} else {
		j.say(ap.pub, "restart %s (%s)", st.Name, st.Why)
	}
	rp := *st.Role
	facts := factsFor(rp, ranksExpected(rp, ap.plan.load().Gateway.Mode), ap.gw != nil)
	m, w, err := ask(ap.roster.current(), st.Name, event{Kind: evRestart, Why: "tsd apply: " + st.Why, Plan: &rp, Facts: facts}, goalReady)
	if err != nil {
		return fmt.Errorf("restart %s: %w", st.Name, err)
	}
	pp.patch(func(p *profiles.Plan) { setRole(p, st.Name, st.Role, st.Worker) })
	_, _ = ap.roster.change(rosterCmd{op: opRefresh, id: m.id, rp: rp})
	return ap.awaitReady(ctx, j, st.Name, w)
}

// awaitReady waits for the answer to a start or restart of name: ready,
// or failed or stopped (an error); a crash the restart policy answers is
// waited out by the actor.
func (ap *applier) awaitReady(ctx context.Context, j *applyJob, name string, w *waiter) error {
	start := ap.now()
	o, err := awaitFor(ctx, name, w)
	switch {
	case err != nil:
		return err
	case o.Kind != outReady:
		return fmt.Errorf("%s %s: %s", name, o.State, o.Reason)
	}
	j.say(ap.pub, "%s ready after %s (pid %d)", name, HumanDuration(ap.now().Sub(start)), o.PID)
	return nil
}

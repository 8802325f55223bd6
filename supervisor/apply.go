package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Changing a running deployment (tsd apply, tsd scale; docs/architecture.md
// §4.3). An apply plans the edited profile against the running plan (the
// stable planner), diffs the two (profiles.Diff), orders the diff into
// steps (applySteps) and carries them out with the machinery roles already
// have: a new instance is a new actor whose worker the gateway binds
// first; one that goes drains and stops, then its worker is unbound and
// its actor dropped; a changed one restarts into its new plan; a renamed
// one keeps its process. Refusals (a profile that does not validate, GPUs
// two engines would share without memory fractions, settings that cannot
// change live) come before any step, so they change nothing. One apply
// runs at a time, in its own goroutine: the caller may follow it or
// leave, and it is shown in the snapshot (Snapshot.Apply) and the events.

// ApplyRequest is one change to a running deployment.
type ApplyRequest struct {
	// Profile is the profile file to apply (an absolute path); "" with
	// Scale changes the profile the deployment runs now.
	Profile string `json:"profile,omitempty"`
	// Scale sets the replicas of profile entries (tsd scale decode=3);
	// GPUs are the new replicas' GPUs, in order (--gpus; none: free ones).
	Scale map[string]int `json:"scale,omitempty"`
	GPUs  []string       `json:"gpus,omitempty"`
	// APIKey is the value of the target's api_key_env in the caller's
	// environment ("" leaves it to the daemon's); never shown.
	APIKey string `json:"api_key,omitempty"`
	// Keys are the values of the target's gateway.api_keys variables in
	// the caller's environment, by variable (one missing: the daemon's);
	// never shown.
	Keys map[string]string `json:"keys,omitempty"`
	// DryRun answers the plan and does nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Expect is the target revision the caller was shown and confirmed;
	// an apply whose target differs by now is refused.
	Expect string `json:"expect,omitempty"`
}

// ApplyPlan is what an apply would do.
type ApplyPlan struct {
	From     string            `json:"from"` // the profile revision running now
	To       string            `json:"to"`   // the revision it applies
	Diff     profiles.PlanDiff `json:"diff"`
	Lines    []string          `json:"lines"` // the diff as tsd apply prints it
	Summary  string            `json:"summary"`
	Steps    []string          `json:"steps"` // in order; "a + b" run together
	Warnings []string          `json:"warnings,omitempty"`
}

// applied is the profile the deployment runs: what tsd up or the last
// complete apply gave it.
type applied struct {
	profile  *profiles.Profile // nil: the deployment runs a plan file
	file     *profiles.Profile // the profile as the file says it, before tsd scale
	source   []byte
	scaled   map[string]string // profile entry → the replicas and GPUs tsd scale gave it
	revision string
}

func newApplied(p, file *profiles.Profile, source []byte, scaled map[string]string) *applied {
	a := &applied{profile: p, file: file, source: source, scaled: scaled}
	if source != nil {
		a.revision = profiles.Revision(source, a.scaledText())
	}
	return a
}

func (a *applied) scaledText() string {
	keys := make([]string, 0, len(a.scaled))
	for k := range a.scaled {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + a.scaled[k]
	}
	return strings.Join(parts, ";")
}

// APIKey is the key the gateway checks now: the daemon's $api_key_env at
// start, then what each apply gave it ("" when none).
func (s *Supervisor) APIKey() string { return *s.apiKey.Load() }

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

// say adds a progress line for followers and the deployment's events.
func (j *applyJob) say(s *Supervisor, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	j.mu.Lock()
	j.lines = append(j.lines, line)
	close(j.wake)
	j.wake = make(chan struct{})
	j.mu.Unlock()
	s.pub.event("", "apply: "+line)
}

func (j *applyJob) setStep(step string, done int) {
	j.mu.Lock()
	j.status.Step, j.status.Done = step, done
	j.mu.Unlock()
}

// finish records how j ended; whoever it wakes sees the snapshot with
// the outcome (and the new revision) published.
func (j *applyJob) finish(s *Supervisor, err error) {
	j.mu.Lock()
	j.err = err
	j.status.State = snapshot.ApplyDone
	if err != nil {
		j.status.State, j.status.Error = snapshot.ApplyFailed, err.Error()
	}
	j.mu.Unlock()
	s.pub.sync()
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

// PlanApply plans req against the running deployment and says what an
// apply would do, changing nothing (tsd apply --dry-run); an error is a
// refusal.
func (s *Supervisor) PlanApply(req ApplyRequest) (ApplyPlan, error) {
	j, err := s.prepare(req)
	if err != nil {
		return ApplyPlan{}, err
	}
	return j.plan, nil
}

// Apply starts req's apply and returns its plan at once; follow, if set,
// hears every progress line until it ends, and Apply then returns how it
// ended. The apply goes on if follow's ctx ends first.
func (s *Supervisor) Apply(ctx context.Context, req ApplyRequest, follow func(ApplyPlan, string)) (ApplyPlan, error) {
	j, err := s.prepare(req)
	if err != nil {
		return ApplyPlan{}, err
	}
	if req.Expect != "" && req.Expect != j.plan.To {
		return j.plan, fmt.Errorf("the target changed since it was shown (revision %s, now %s): run tsd apply again to see the new diff", req.Expect, j.plan.To)
	}
	if req.DryRun {
		return j.plan, nil
	}
	if err := s.startJob(j); err != nil {
		return j.plan, err
	}
	if follow == nil {
		return j.plan, nil
	}
	follow(j.plan, "")
	return j.plan, j.follow(ctx, func(l string) { follow(j.plan, l) })
}

// prepare plans req: the profile (or the running one, scaled), the target
// plan against the running one, the diff and the steps, or the refusal.
func (s *Supervisor) prepare(req ApplyRequest) (*applyJob, error) {
	select {
	case <-s.running:
	default:
		return nil, ErrNotRunning
	}
	running := s.Plan()
	if running.Launcher == profiles.LauncherSlurm {
		return nil, errors.New("tsd apply does not change a deployment run as Slurm job steps yet: stop it and start the changed profile")
	}
	cur := s.applied.Load()
	var next applied
	switch {
	case req.Profile != "":
		data, err := profiles.ReadSource(req.Profile)
		if err != nil {
			return nil, fmt.Errorf("read profile: %w", err)
		}
		p, errs := profiles.Parse(req.Profile, data)
		if len(errs) > 0 {
			return nil, errs
		}
		next = applied{profile: p, file: p, source: data}
	case cur.profile == nil:
		return nil, errors.New("this deployment runs a plan file (tsd up --plan-json), not a profile: tsd apply a profile first")
	default:
		next = applied{profile: cur.profile, file: cur.file, source: cur.source, scaled: map[string]string{}}
		for k, v := range cur.scaled {
			next.scaled[k] = v
		}
	}
	facts := profiles.LocalHostFacts()
	if s.opts.ApplyFacts != nil {
		f, err := s.opts.ApplyFacts()
		if err != nil {
			return nil, fmt.Errorf("host facts: %w", err)
		}
		facts = f
	}
	if len(req.Scale) > 0 {
		if err := s.scale(&next, req, running, facts.GPUs); err != nil {
			return nil, err
		}
	}
	// The running plan's own ports count as free: the kept ones are
	// reserved by the stable planner, and those of instances that go are
	// released before any new instance starts.
	ours := map[int]bool{}
	for _, p := range running.LocalPorts() {
		ours[p] = true
	}
	free := facts.PortFree
	facts.PortFree = func(p int) bool { return ours[p] || free == nil || free(p) }
	facts.Running = running
	target, errs := profiles.MakePlan(next.profile, facts)
	if len(errs) > 0 {
		return nil, errs
	}
	target.Name = running.Name // tsd up --name holds
	d := profiles.Diff(running, target)
	if err := d.Refusal(); err != nil {
		return nil, err
	}
	key, err := s.applyKey(target, req.APIKey)
	if err != nil {
		return nil, err
	}
	if key != *s.apiKey.Load() && target.Gateway.APIKeyEnv != "" && target.Gateway.APIKeyEnv == running.Gateway.APIKeyEnv {
		d.Gateway = append(d.Gateway, profiles.FieldChange{Field: "gateway.api_key", From: "***", To: "*** (changed)"})
	}
	keys, err := s.applyKeys(target, req.Keys)
	if err != nil {
		return nil, err
	}
	for _, k := range target.Gateway.APIKeys {
		if old, ok := (*s.apiKeys.Load())[k.KeyEnv]; ok && old != keys[k.KeyEnv] {
			d.Gateway = append(d.Gateway, profiles.FieldChange{Field: "gateway.api_keys." + k.Name, From: "***", To: "*** (changed)"})
		}
	}
	restartIdle(&d, s.Snapshot())
	if _, live := s.gw.(LiveGateway); !live && s.gw != nil && needsLive(d) {
		return nil, errors.New("this gateway cannot change while it runs (no live worker binding); stop the deployment and start the changed profile")
	}
	batches, err := applySteps(running, target, d)
	if err != nil {
		return nil, err
	}
	nx := newApplied(next.profile, next.file, next.source, next.scaled)
	j := &applyJob{target: target, next: nx, batches: batches, apiKey: key, apiKeys: keys, wake: make(chan struct{}), done: make(chan struct{})}
	j.plan = ApplyPlan{From: cur.revision, To: nx.revision, Diff: d, Lines: d.Lines(), Summary: d.Summary(), Warnings: target.Warnings}
	for _, b := range batches {
		parts := make([]string, len(b))
		for i, st := range b {
			parts[i] = st.String()
		}
		j.plan.Steps = append(j.plan.Steps, strings.Join(parts, " + "))
	}
	return j, nil
}

// needsLive reports whether the diff changes the gateway: a worker to
// bind, unbind or rename, or a live setting.
func needsLive(d profiles.PlanDiff) bool {
	if len(d.Gateway) > 0 {
		return true
	}
	for _, r := range d.Roles {
		if r.Action == profiles.ActionStart || r.Action == profiles.ActionStop || r.Was != "" {
			return true
		}
	}
	return false
}

// restartIdle makes the instances the target keeps but that do not run
// now (failed, stopped) restart: the profile says they should run, and a
// second apply after one that failed half-way completes it.
func restartIdle(d *profiles.PlanDiff, snap snapshot.Snapshot) {
	for i := range d.Roles {
		rc := &d.Roles[i]
		if rc.Action == profiles.ActionStart || rc.Action == profiles.ActionStop {
			continue
		}
		name := rc.Name
		if rc.Was != "" {
			name = rc.Was
		}
		r, ok := roleIn(snap, name)
		if !ok || r.Remote || (r.State != snapshot.StateFailed && r.State != snapshot.StateStopped && r.State != snapshot.StatePlanned) {
			continue
		}
		rc.Action = profiles.ActionRestart
		rc.Fields = append(rc.Fields, profiles.FieldChange{Field: "state", From: r.State, To: snapshot.StateReady})
	}
}

// applyKey is the API key the target's api_key_env names: the caller's
// value, else the daemon's environment.
func (s *Supervisor) applyKey(target *profiles.Plan, given string) (string, error) {
	env := target.Gateway.APIKeyEnv
	if env == "" {
		return "", nil
	}
	if given != "" {
		return given, nil
	}
	if v := os.Getenv(env); v != "" {
		return v, nil
	}
	if env == s.Plan().Gateway.APIKeyEnv {
		return *s.apiKey.Load(), nil
	}
	return "", fmt.Errorf("gateway.api_key_env: %s is empty or unset in tsd apply's environment and the daemon's", env)
}

// applyKeys are the values of the target's gateway.api_keys variables:
// the caller's, else the daemon's environment, else what the gateway
// checks now for a variable it already reads.
func (s *Supervisor) applyKeys(target *profiles.Plan, given map[string]string) (map[string]string, error) {
	cur := *s.apiKeys.Load()
	out := map[string]string{}
	for _, k := range target.Gateway.APIKeys {
		v := given[k.KeyEnv]
		if v == "" {
			v = os.Getenv(k.KeyEnv)
		}
		if v == "" {
			v = cur[k.KeyEnv]
		}
		if v == "" {
			return nil, fmt.Errorf("gateway.api_keys %s: $%s is empty or unset in tsd apply's environment and the daemon's", k.Name, k.KeyEnv)
		}
		out[k.KeyEnv] = v
	}
	return out, nil
}

// scale applies req.Scale to next's profile: the new replicas take the
// GPUs given, in order, or free ones.
func (s *Supervisor) scale(next *applied, req ApplyRequest, running *profiles.Plan, host []profiles.GPU) error {
	groups := make([]string, 0, len(req.Scale))
	for g := range req.Scale {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	// Entries that shrink first: the GPUs their replicas leave may be the
	// ones given to an entry that grows (the SLO planner's moves), and
	// each scaled profile is checked for GPUs two engines would share.
	shrinks := func(g string) bool {
		i := roleEntry(next.profile, g)
		return i >= 0 && req.Scale[g] < next.profile.Roles[i].Replicas
	}
	sort.SliceStable(groups, func(i, j int) bool { return shrinks(groups[i]) && !shrinks(groups[j]) })
	given := append([]string(nil), req.GPUs...)
	taken := *running
	taken.Roles = append([]profiles.RolePlan(nil), running.Roles...)
	if next.scaled == nil {
		next.scaled = map[string]string{}
	}
	for _, g := range groups {
		n := req.Scale[g]
		var role *profiles.Role
		for i := range next.profile.Roles {
			if next.profile.Roles[i].Name == g {
				role = &next.profile.Roles[i]
			}
		}
		if role == nil {
			p, err := next.profile.Scaled(g, n, nil) // the error names the entries there are
			if err == nil {
				next.profile = p
			}
			return err
		}
		per, add := role.TP*role.DP, max(0, n-role.Replicas)
		var sets [][]string
		switch {
		case add == 0:
		case len(req.GPUs) > 0:
			if len(given) < add*per {
				return fmt.Errorf("--gpus: %s=%d needs %d more GPU(s) (%d per replica), %d left", g, n, add*per, per, len(given))
			}
			sets = profiles.SplitGPUs(given[:add*per], per)
			given = given[add*per:]
		default:
			var err error
			if sets, err = profiles.FreeGPUs(host, &taken, add, per); err != nil {
				return fmt.Errorf("%s=%d: %w", g, n, err)
			}
		}
		for _, set := range sets {
			taken.Roles = append(taken.Roles, profiles.RolePlan{Local: true, GPUs: set})
		}
		p, err := next.profile.ScaledLike(next.file, g, n, sets) // replicas back on the file's own ports
		if err != nil {
			return err
		}
		next.profile = p
		r := p.Roles[roleEntry(p, g)]
		if i := roleEntry(next.file, g); i >= 0 && next.file.Roles[i].Replicas == r.Replicas && reflect.DeepEqual(next.file.Roles[i].GPUs, r.GPUs) {
			delete(next.scaled, g) // as the file says: the file's revision again
			continue
		}
		var desc []string
		for _, set := range r.GPUs {
			desc = append(desc, strings.Join(set, ","))
		}
		next.scaled[g] = fmt.Sprintf("%d[%s]", n, strings.Join(desc, ";"))
	}
	if len(given) > 0 {
		return fmt.Errorf("--gpus: %d GPU(s) left over (%s)", len(given), strings.Join(given, ","))
	}
	return nil
}

func roleEntry(p *profiles.Profile, group string) int {
	if p == nil {
		return -1
	}
	for i := range p.Roles {
		if p.Roles[i].Name == group {
			return i
		}
	}
	return -1
}

// startJob runs j unless another apply runs.
func (s *Supervisor) startJob(j *applyJob) error {
	s.jobMu.Lock()
	defer s.jobMu.Unlock()
	if prev := s.job.Load(); prev != nil {
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
	j.status = snapshot.ApplyStatus{Revision: j.plan.To, State: snapshot.ApplyRunning, Steps: total, Started: s.now()}
	s.job.Store(j)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.teardown:
			cancel()
		case <-j.done:
		}
	}()
	go func() {
		defer cancel()
		s.runJob(ctx, j)
	}()
	return nil
}

// runJob carries out j's steps, batch by batch.
func (s *Supervisor) runJob(ctx context.Context, j *applyJob) {
	pp := &planPatch{s: s, plan: s.Plan()}
	j.say(s, "%s → %s: %s", orDash(j.plan.From), j.plan.To, j.plan.Summary)
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
				errs[i] = s.runStep(ctx, j, pp, st)
			}()
		}
		wg.Wait()
		done += len(batch)
		if err := errors.Join(errs...); err != nil {
			s.failJob(j, bi, err)
			return
		}
		j.setStep(step, done)
		if batch[0].Kind == stepStart {
			s.order(j.target)
		}
	}
	s.order(j.target)
	s.setPlan(j.target)
	s.applied.Store(j.next)
	j.say(s, "done: the deployment runs revision %s", j.plan.To)
	j.finish(s, nil)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// failJob ends j at batch bi: what stopped it, what runs now, what is
// left to do.
func (s *Supervisor) failJob(j *applyJob, bi int, err error) {
	j.say(s, "stopped at step %d/%d (%s): %v", bi+1, len(j.batches), j.plan.Steps[bi], err)
	var now []string
	for _, r := range s.Snapshot().Roles {
		st := r.Name + " " + r.State
		if r.Reason != "" && r.State != snapshot.StateReady {
			st += " (" + r.Reason + ")"
		}
		now = append(now, st)
	}
	j.say(s, "running now: %s", strings.Join(now, ", "))
	if rest := j.plan.Steps[bi+1:]; len(rest) > 0 {
		j.say(s, "not done: %s", strings.Join(rest, ", "))
	}
	j.say(s, "tsd plan --running prints what runs; tsd apply again completes the change")
	j.finish(s, fmt.Errorf("stopped at %s: %w", j.plan.Steps[bi], err))
}

// order puts the roster in the target plan's order.
func (s *Supervisor) order(target *profiles.Plan) {
	names := make([]string, len(target.Roles))
	for i, r := range target.Roles {
		names[i] = r.Name
	}
	_, _ = s.changeRoster(rosterCmd{op: opOrder, order: names})
}

// setPlan makes plan the running one and tells OnPlan.
func (s *Supervisor) setPlan(plan *profiles.Plan) {
	s.planv.Store(plan)
	if s.opts.OnPlan != nil {
		s.opts.OnPlan(plan)
	}
}

// planPatch is the running plan as an apply's steps change it: each
// change makes a new plan value (readers hold the old ones).
type planPatch struct {
	s    *Supervisor
	mu   sync.Mutex
	plan *profiles.Plan
}

func (pp *planPatch) patch(change func(p *profiles.Plan)) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	p := *pp.plan
	p.Roles = append([]profiles.RolePlan(nil), pp.plan.Roles...)
	p.Gateway.Workers = append([]profiles.WorkerPlan(nil), pp.plan.Gateway.Workers...)
	change(&p)
	pp.plan = &p
	pp.s.setPlan(&p)
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
func (s *Supervisor) runStep(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	switch st.Kind {
	case stepStop:
		return s.applyStop(ctx, j, pp, st)
	case stepRename:
		return s.applyRename(ctx, j, pp, st)
	case stepUpdate:
		return s.applyUpdate(j, pp, st)
	case stepGateway:
		return s.applyGateway(j, pp)
	case stepStart:
		return s.applyStart(ctx, j, pp, st)
	case stepRestart:
		return s.applyRestart(ctx, j, pp, st)
	}
	return fmt.Errorf("unknown step %v", st.Kind)
}

func (s *Supervisor) live() LiveGateway {
	lg, _ := s.gw.(LiveGateway)
	return lg
}

// processGone: a stopped instance has no process left.
func processGone(r snapshot.RoleStatus) (bool, error) {
	switch r.State {
	case snapshot.StateStopped:
		return true, nil
	case snapshot.StateFailed:
		return r.PID == 0, nil
	}
	return false, nil
}

// stopAndWait drains and stops name and waits until its process is gone.
func (s *Supervisor) stopAndWait(ctx context.Context, name string) error {
	if err := s.Stop(name); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	_, err := s.awaitRole(ctx, name, processGone)
	return err
}

func (s *Supervisor) applyStop(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	m, ok := s.roster().member(st.Name)
	if !ok {
		return nil // gone already
	}
	j.say(s, "stop %s: drain its requests, stop it, unbind its sockets", st.Name)
	if err := s.stopAndWait(ctx, st.Name); err != nil {
		return err
	}
	m.a.send(event{Kind: evQuit, Why: "removed by tsd apply"})
	select {
	case <-m.a.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if lg := s.live(); lg != nil {
		if _, has := pp.plan.Gateway.Worker(st.Name); has {
			if err := lg.RemoveWorker(st.Name); err != nil {
				return fmt.Errorf("unbind %s's sockets: %w", st.Name, err)
			}
		}
	}
	if _, err := s.changeRoster(rosterCmd{op: opRemove, name: st.Name}); err != nil {
		return fmt.Errorf("remove %s: %w", st.Name, err)
	}
	pp.patch(func(p *profiles.Plan) { removeRole(p, st.Name) })
	j.say(s, "%s stopped and removed", st.Name)
	return nil
}

func (s *Supervisor) applyRename(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	if _, err := s.changeRoster(rosterCmd{op: opRenameBegin, name: st.Was, to: st.Name}); err != nil {
		return fmt.Errorf("rename %s: %w", st.Was, err)
	}
	if err := s.command(st.Was, event{Kind: evRename, Name: st.Name}); err != nil {
		return fmt.Errorf("rename %s: %w", st.Was, err)
	}
	r, err := s.awaitRole(ctx, st.Name, func(snapshot.RoleStatus) (bool, error) { return true, nil })
	if err != nil {
		return err
	}
	if _, err := s.changeRoster(rosterCmd{op: opRenameEnd, name: st.Was, to: st.Name}); err != nil {
		return fmt.Errorf("rename %s: %w", st.Was, err)
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
	if r.PID > 0 {
		pid = fmt.Sprintf("pid %d", r.PID)
	}
	j.say(s, "renamed %s to %s: the same process (%s), socket, ports and log", st.Was, st.Name, pid)
	return nil
}

func (s *Supervisor) applyUpdate(j *applyJob, pp *planPatch, st applyStep) error {
	rp := *st.Role
	facts := factsFor(rp, ranksExpected(rp, s.Plan().Gateway.Mode), s.gw != nil)
	if err := s.command(st.Name, event{Kind: evUpdate, Plan: &rp, Facts: facts}); err != nil {
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
	j.say(s, "%s takes %s without a restart", st.Name, st.Why)
	return nil
}

func (s *Supervisor) applyGateway(j *applyJob, pp *planPatch) error {
	if lg := s.live(); lg != nil {
		if err := lg.Reconfigure(j.target.Gateway, j.apiKey, j.apiKeys); err != nil {
			return fmt.Errorf("gateway settings: %w", err)
		}
	}
	key, keys := j.apiKey, j.apiKeys
	s.apiKey.Store(&key)
	s.apiKeys.Store(&keys)
	pp.patch(func(p *profiles.Plan) {
		workers := p.Gateway.Workers
		p.Gateway = j.target.Gateway
		p.Gateway.Workers = workers
	})
	j.say(s, "the gateway takes %s in place", fieldsText(j.plan.Diff.Gateway))
	return nil
}

func (s *Supervisor) applyStart(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	lg := s.live()
	if st.Worker != nil && lg != nil {
		if err := lg.AddWorker(*st.Worker); err != nil {
			return fmt.Errorf("bind %s's sockets: %w", st.Name, err)
		}
	}
	if _, err := s.changeRoster(rosterCmd{op: opAdd, rp: *st.Role}); err != nil {
		if st.Worker != nil && lg != nil {
			_ = lg.RemoveWorker(st.Name)
		}
		return fmt.Errorf("add %s: %w", st.Name, err)
	}
	pp.patch(func(p *profiles.Plan) { setRole(p, st.Name, st.Role, st.Worker) })
	j.say(s, "start %s on GPU(s) %s: its sockets are bound", st.Name, gpuText(st.Role.GPUs))
	if err := s.Start(st.Name); err != nil {
		return fmt.Errorf("start %s: %w", st.Name, err)
	}
	return s.awaitReady(ctx, j, st.Name, -1)
}

func gpuText(g []string) string {
	if len(g) == 0 {
		return "none"
	}
	return strings.Join(g, ",")
}

func (s *Supervisor) applyRestart(ctx context.Context, j *applyJob, pp *planPatch, st applyStep) error {
	before, _ := roleIn(s.Snapshot(), st.Name)
	if st.Rebind {
		j.say(s, "restart %s (%s): its worker moves, so it stops first", st.Name, st.Why)
		if err := s.stopAndWait(ctx, st.Name); err != nil {
			return err
		}
		if lg := s.live(); lg != nil {
			if _, has := pp.plan.Gateway.Worker(st.Name); has {
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
		j.say(s, "restart %s (%s)", st.Name, st.Why)
	}
	rp := *st.Role
	facts := factsFor(rp, ranksExpected(rp, s.Plan().Gateway.Mode), s.gw != nil)
	if err := s.command(st.Name, event{Kind: evRestart, Why: "tsd apply: " + st.Why, Plan: &rp, Facts: facts}); err != nil {
		return fmt.Errorf("restart %s: %w", st.Name, err)
	}
	pp.patch(func(p *profiles.Plan) { setRole(p, st.Name, st.Role, st.Worker) })
	_, _ = s.changeRoster(rosterCmd{op: opRefresh, name: st.Name, rp: rp})
	return s.awaitReady(ctx, j, st.Name, before.Restarts)
}

// awaitReady waits until name is ready (after more than restarts
// restarts, when restarts ≥ 0); failed or stopped is an error, a crash
// the restart policy answers is waited out.
func (s *Supervisor) awaitReady(ctx context.Context, j *applyJob, name string, restarts int) error {
	start := s.now()
	r, err := s.awaitRole(ctx, name, func(r snapshot.RoleStatus) (bool, error) {
		if restarts >= 0 && r.Restarts <= restarts {
			return false, nil
		}
		switch r.State {
		case snapshot.StateReady:
			return true, nil
		case snapshot.StateFailed, snapshot.StateStopped:
			return false, fmt.Errorf("%s %s: %s", name, r.State, r.Reason)
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	j.say(s, "%s ready after %s (pid %d)", name, HumanDuration(s.now().Sub(start)), r.PID)
	return nil
}

// awaitRole waits until cond says name's status is done (or fails). The
// states it passes through on the way are the role's own events.
func (s *Supervisor) awaitRole(ctx context.Context, name string, cond func(snapshot.RoleStatus) (bool, error)) (snapshot.RoleStatus, error) {
	cur, ch, cancel := s.Subscribe()
	defer cancel()
	check := func(snap snapshot.Snapshot) (snapshot.RoleStatus, bool, error) {
		r, ok := roleIn(snap, name)
		if !ok {
			return r, false, nil
		}
		done, err := cond(r)
		return r, done, err
	}
	if r, done, err := check(cur); done || err != nil {
		return r, err
	}
	for {
		select {
		case <-ctx.Done():
			return snapshot.RoleStatus{}, fmt.Errorf("waiting for %s: %w", name, ctx.Err())
		case snap, ok := <-ch:
			if !ok {
				return snapshot.RoleStatus{}, ErrNotRunning
			}
			if r, done, err := check(snap); done || err != nil {
				return r, err
			}
		}
	}
}

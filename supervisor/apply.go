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
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Changing a running deployment (tsd apply, tsd scale; docs/architecture.md
// §4.3). An apply plans the edited profile against the running plan (the
// stable planner), diffs the two (profiles.Diff), orders the diff into
// steps (applySteps) and carries them out (applyrun.go) with the
// machinery roles already have: a new instance is a new actor whose
// worker the gateway binds first; one that goes drains and stops, then
// its worker is unbound and its actor dropped; a changed one restarts
// into its new plan; a renamed one keeps its process. Each command to an
// actor carries its outcome back (answer.go). Refusals (a profile that
// does not validate, GPUs two engines would share without memory
// fractions, settings that cannot change live) come before any step, so
// they change nothing. One apply runs at a time, in its own goroutine:
// the caller may follow it or leave, and it is shown in the snapshot
// (Snapshot.Apply) and the events. This file is the planning half.

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

// applier carries out tsd apply and tsd scale for one deployment: it
// plans (this file) and runs one apply at a time (applyrun.go). It keeps
// what the applies change beside the plan: the profile the deployment
// runs, the API keys its gateway checks, the last apply.
type applier struct {
	gw       Gateway
	roster   *rosterOwner
	pub      *publisher
	plan     *runningPlan
	now      func() time.Time
	facts    func() (profiles.HostFacts, error) // Options.ApplyFacts; nil: profiles.LocalHostFacts
	running  <-chan struct{}                    // closed once the deployment runs
	teardown <-chan struct{}                    // closed when it tears down: the apply in progress stops

	applied atomic.Pointer[applied]
	apiKey  atomic.Pointer[string]
	apiKeys atomic.Pointer[map[string]string] // gateway.api_keys' values by key_env
	job     atomic.Pointer[applyJob]
	jobMu   sync.Mutex // one apply at a time
}

func newApplier(s *Supervisor, opts Options) *applier {
	ap := &applier{gw: s.gw, roster: s.roster, pub: s.pub, plan: s.plan, now: s.now, facts: opts.ApplyFacts,
		running: s.running, teardown: s.teardown}
	ap.applied.Store(newApplied(opts.Profile, opts.Profile, opts.ProfileSource, nil))
	key := ""
	if env := opts.Plan.Gateway.APIKeyEnv; env != "" {
		key = os.Getenv(env) // what the gateway read when it was built
	}
	ap.apiKey.Store(&key)
	keys := map[string]string{}
	for _, k := range opts.Plan.Gateway.APIKeys {
		keys[k.KeyEnv] = os.Getenv(k.KeyEnv) // what the gateway read when it was built
	}
	ap.apiKeys.Store(&keys)
	return ap
}

// APIKey is the key the gateway checks now: the daemon's $api_key_env at
// start, then what each apply gave it ("" when none).
func (s *Supervisor) APIKey() string { return *s.apply.apiKey.Load() }

// PlanApply plans req against the running deployment and says what an
// apply would do, changing nothing (tsd apply --dry-run); an error is a
// refusal.
func (s *Supervisor) PlanApply(req ApplyRequest) (ApplyPlan, error) {
	j, err := s.apply.prepare(req)
	if err != nil {
		return ApplyPlan{}, err
	}
	return j.plan, nil
}

// Apply starts req's apply and returns its plan at once; follow, if set,
// hears every progress line until it ends, and Apply then returns how it
// ended. The apply goes on if follow's ctx ends first.
func (s *Supervisor) Apply(ctx context.Context, req ApplyRequest, follow func(ApplyPlan, string)) (ApplyPlan, error) {
	j, err := s.apply.prepare(req)
	if err != nil {
		return ApplyPlan{}, err
	}
	if err := j.expected(req); err != nil {
		return j.plan, err
	}
	if req.DryRun {
		return j.plan, nil
	}
	if err := s.apply.startJob(j); err != nil {
		return j.plan, err
	}
	if follow == nil {
		return j.plan, nil
	}
	follow(j.plan, "")
	return j.plan, j.follow(ctx, func(l string) { follow(j.plan, l) })
}

// begin plans req and starts it, unless it is a dry run or changes
// nothing (the control socket's POST /v1/apply).
func (ap *applier) begin(req ApplyRequest) (*applyJob, error) {
	j, err := ap.prepare(req)
	if err == nil {
		err = j.expected(req)
	}
	if err == nil && !req.DryRun && j.plan.Diff.Changes() {
		err = ap.startJob(j)
	}
	return j, err
}

// prepare plans req: the profile (or the running one, scaled), the target
// plan against the running one, the diff and the steps, or the refusal.
func (ap *applier) prepare(req ApplyRequest) (*applyJob, error) {
	select {
	case <-ap.running:
	default:
		return nil, ErrNotRunning
	}
	running := ap.plan.load()
	if running.Launcher == profiles.LauncherSlurm {
		return nil, errors.New("tsd apply does not change a deployment run as Slurm job steps yet: stop it and start the changed profile")
	}
	cur := ap.applied.Load()
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
	if ap.facts != nil {
		f, err := ap.facts()
		if err != nil {
			return nil, fmt.Errorf("host facts: %w", err)
		}
		facts = f
	}
	if len(req.Scale) > 0 {
		if err := scale(&next, req, running, facts.GPUs); err != nil {
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
	key, err := ap.applyKey(target, req.APIKey)
	if err != nil {
		return nil, err
	}
	if key != *ap.apiKey.Load() && target.Gateway.APIKeyEnv != "" && target.Gateway.APIKeyEnv == running.Gateway.APIKeyEnv {
		d.Gateway = append(d.Gateway, profiles.FieldChange{Field: "gateway.api_key", From: "***", To: "*** (changed)"})
	}
	keys, err := ap.applyKeys(target, req.Keys)
	if err != nil {
		return nil, err
	}
	for _, k := range target.Gateway.APIKeys {
		if old, ok := (*ap.apiKeys.Load())[k.KeyEnv]; ok && old != keys[k.KeyEnv] {
			d.Gateway = append(d.Gateway, profiles.FieldChange{Field: "gateway.api_keys." + k.Name, From: "***", To: "*** (changed)"})
		}
	}
	restartIdle(&d, ap.pub.current())
	if _, live := ap.gw.(LiveGateway); !live && ap.gw != nil && needsLive(d) {
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
func (ap *applier) applyKey(target *profiles.Plan, given string) (string, error) {
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
	if env == ap.plan.load().Gateway.APIKeyEnv {
		return *ap.apiKey.Load(), nil
	}
	return "", fmt.Errorf("gateway.api_key_env: %s is empty or unset in tsd apply's environment and the daemon's", env)
}

// applyKeys are the values of the target's gateway.api_keys variables:
// the caller's, else the daemon's environment, else what the gateway
// checks now for a variable it already reads.
func (ap *applier) applyKeys(target *profiles.Plan, given map[string]string) (map[string]string, error) {
	cur := *ap.apiKeys.Load()
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
func scale(next *applied, req ApplyRequest, running *profiles.Plan, host []profiles.GPU) error {
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

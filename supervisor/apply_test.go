package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// liveGW is the stub gateway with the calls an apply makes.
type liveGW struct {
	*stubGW
	mu       sync.Mutex
	settings profiles.GatewayPlan
	key      string
}

func (g *liveGW) AddWorker(w profiles.WorkerPlan) error { g.record("add " + w.Role); return nil }
func (g *liveGW) RemoveWorker(role string) error        { g.record("remove " + role); return nil }
func (g *liveGW) RenameWorker(from, to string) error {
	g.record("rename " + from + " " + to)
	g.mu.Lock()
	g.stubGW.mu.Lock()
	if v, ok := g.views[from]; ok {
		g.views[to] = v
		delete(g.views, from)
	}
	g.stubGW.mu.Unlock()
	g.mu.Unlock()
	return nil
}
func (g *liveGW) Reconfigure(s profiles.GatewayPlan, key string, _ map[string]string) error {
	g.record("reconfigure prefill=" + s.Policy.Prefill)
	g.mu.Lock()
	g.settings, g.key = s, key
	g.mu.Unlock()
	return nil
}

// The apply tests' engine: logs the launcher's ready line, then sleeps;
// --fail (in its args) makes it exit at once.
const applyProfile = `name: ap
model: org/m # a hub id: the sh engine reads no model
engine:
  command: [sh, -c, 'case "$*" in *--fail*) echo failing >&2; exit 3;; esac; echo "headless scheduler(s) ready"; exec sleep 1000', eng]
  env: {TSD_TEST_GUARD: "1"}
restart:
  backoff: 20ms
  max_backoff: 100ms
  budget: 1 in 1h
  stop_grace: 2s
  drain_timeout: 2s
roles:
  - name: prefill
    kind: prefill
    gpus: [0]
  - name: decode
    kind: decode
    gpus: [1]
`

type applyFixture struct {
	*fixture
	profile string
	gw      *liveGW
}

// newApplyFixture runs src's plan (written to profile.yaml) with a live
// stub gateway, or none.
func newApplyFixture(t *testing.T, live bool, src string) *applyFixture {
	t.Helper()
	return newApplyFixtureWith(t, live, src, nil)
}

// newApplyFixtureWith is newApplyFixture whose live stub gateway wrap
// may dress (the planner's tests add Observe).
func newApplyFixtureWith(t *testing.T, live bool, src string, wrap func(*liveGW) Gateway) *applyFixture {
	t.Helper()
	dir, err := os.MkdirTemp("", "ap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "profile.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	facts := profiles.HostFacts{UID: os.Getuid()}
	p, plan, errs := profiles.LoadPlan(path, facts)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	af := &applyFixture{profile: path}
	var gw Gateway
	if live {
		af.gw = &liveGW{stubGW: newStubGW()}
		gw = af.gw
		if wrap != nil {
			gw = wrap(af.gw)
		}
	}
	opts := Options{Plan: plan, Gateway: gw, GuardExe: exe, GuardArgs: []string{}, Rand: func() float64 { return 0.5 },
		Profile: p, ProfileSource: []byte(src), ApplyFacts: func() (profiles.HostFacts, error) { return facts, nil }}
	sup, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &fixture{t: t, sup: sup, dir: dir, runErr: make(chan error, 1), cancel: cancel}
	go func() { f.runErr <- sup.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-f.runErr:
		case <-time.After(waitLimit):
			t.Errorf("Run did not return after cancel")
		}
	})
	af.fixture = f
	<-sup.Started()
	return af
}

// apply writes src as the profile and applies it (or only req's scale
// when src is ""), returning the progress lines.
func (f *applyFixture) apply(src string, req ApplyRequest) ([]string, error) {
	f.t.Helper()
	if src != "" {
		if err := os.WriteFile(f.profile, []byte(src), 0o600); err != nil {
			f.t.Fatal(err)
		}
		req.Profile = f.profile
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var lines []string
	_, err := f.sup.Apply(ctx, req, func(_ ApplyPlan, l string) {
		if l != "" {
			lines = append(lines, l)
		}
	})
	return lines, err
}

func (f *applyFixture) pids() map[string]int {
	out := map[string]int{}
	for _, r := range f.sup.Snapshot().Roles {
		out[r.Name] = r.PID
	}
	return out
}

func (f *applyFixture) names() []string {
	var out []string
	for _, r := range f.sup.Snapshot().Roles {
		out = append(out, r.Name)
	}
	return out
}

func (f *applyFixture) allReady(names ...string) {
	f.t.Helper()
	for _, n := range names {
		f.wait(n, "ready", state(snapshot.StateReady))
	}
}

// TestApplyScaleUpAndDown: a second decode replica renames the first
// (same process) and starts beside it, its worker bound first; going
// back stops and unbinds it and renames the first back; prefill is never
// touched.
func TestApplyScaleUpAndDown(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t, true, applyProfile)
	f.allReady("prefill", "decode")
	before := f.pids()
	rev0 := f.sup.Snapshot().ProfileRevision

	lines, err := f.apply("", ApplyRequest{Scale: map[string]int{"decode": 2}, GPUs: []string{"2"}})
	if err != nil {
		t.Fatalf("scale up: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if got := f.names(); !reflect.DeepEqual(got, []string{"prefill", "decode-0", "decode-1"}) {
		t.Fatalf("roles after scale up: %v", got)
	}
	after := f.pids()
	if after["prefill"] != before["prefill"] || after["decode-0"] != before["decode"] || after["decode-1"] == 0 {
		t.Fatalf("pids %v → %v: prefill and decode(-0) must keep theirs", before, after)
	}
	calls := f.gw.Calls()
	add, alive := indexOf(calls, "add decode-1"), indexOf(calls, "alive decode-1 true")
	if indexOf(calls, "rename decode decode-0") < 0 || add < 0 || alive < add {
		t.Fatalf("gateway calls %v: want the rename, and decode-1 bound before it runs", calls)
	}
	plan := f.sup.Plan()
	if d0, _ := plan.Role("decode-0"); d0 == nil || d0.PlannedAs != "decode" || !strings.HasSuffix(d0.Worker, "/decode") {
		t.Fatalf("running plan's decode-0: %+v", d0)
	}
	snap := f.sup.Snapshot()
	if snap.ProfileRevision == rev0 || snap.Apply == nil || snap.Apply.State != snapshot.ApplyDone {
		t.Fatalf("revision %s → %s, apply %+v", rev0, snap.ProfileRevision, snap.Apply)
	}

	lines, err = f.apply("", ApplyRequest{Scale: map[string]int{"decode": 1}})
	if err != nil {
		t.Fatalf("scale down: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if got := f.names(); !reflect.DeepEqual(got, []string{"prefill", "decode"}) {
		t.Fatalf("roles after scale down: %v", got)
	}
	if now := f.pids(); now["prefill"] != before["prefill"] || now["decode"] != before["decode"] {
		t.Fatalf("pids %v → %v", before, now)
	}
	calls = f.gw.Calls()
	if indexOf(calls, "remove decode-1") < 0 || indexOf(calls, "rename decode-0 decode") < 0 {
		t.Fatalf("gateway calls %v", calls)
	}
	assertGroupGone(t, after["decode-1"])
	if d, _ := f.sup.Plan().Role("decode"); d == nil || d.PlannedAs != "" {
		t.Fatalf("running plan's decode: %+v", d)
	}
	if f.sup.Snapshot().ProfileRevision != rev0 {
		t.Errorf("back to one replica: revision %s, want the first one %s", f.sup.Snapshot().ProfileRevision, rev0)
	}
}

// TestApplyRollingRestart: new args restart each decode replica, one at
// a time (each ready before the next goes down), and nothing else.
func TestApplyRollingRestart(t *testing.T) {
	t.Parallel()
	two := strings.Replace(applyProfile, "    gpus: [1]\n", "    replicas: 2\n    gpus: [[1], [2]]\n", 1)
	f := newApplyFixture(t, true, two)
	f.allReady("prefill", "decode-0", "decode-1")
	before := f.pids()
	mark := len(f.gw.Calls())
	changed := strings.Replace(two, "gpus: [[1], [2]]\n", "gpus: [[1], [2]]\n    args: [--x]\n", 1)
	lines, err := f.apply(changed, ApplyRequest{})
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, strings.Join(lines, "\n"))
	}
	after := f.pids()
	if after["prefill"] != before["prefill"] || after["decode-0"] == before["decode-0"] || after["decode-1"] == before["decode-1"] {
		t.Fatalf("pids %v → %v: the decodes restart, prefill does not", before, after)
	}
	seq := []string{}
	for _, c := range f.gw.Calls()[mark:] {
		if strings.HasPrefix(c, "routed ") {
			seq = append(seq, c)
		}
	}
	want := []string{"routed decode-0 false", "routed decode-0 true", "routed decode-1 false", "routed decode-1 true"}
	if !reflect.DeepEqual(seq, want) {
		t.Fatalf("routing of the decodes %v, want one at a time %v", seq, want)
	}
	for _, r := range f.sup.Plan().Roles {
		if strings.HasPrefix(r.Name, "decode") && !strings.Contains(strings.Join(r.Argv, " "), "--x") {
			t.Errorf("running plan's %s lacks the new args: %v", r.Name, r.Argv)
		}
	}
}

// TestApplyGatewaySettingsLive: a policy change goes to the gateway in
// place; no engine restarts.
func TestApplyGatewaySettingsLive(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t, true, applyProfile)
	f.allReady("prefill", "decode")
	before := f.pids()
	src := strings.Replace(applyProfile, "roles:\n", "gateway:\n  policy: {prefill: random}\nroles:\n", 1)
	if lines, err := f.apply(src, ApplyRequest{}); err != nil {
		t.Fatalf("apply: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if now := f.pids(); !reflect.DeepEqual(now, before) {
		t.Fatalf("pids %v → %v", before, now)
	}
	if indexOf(f.gw.Calls(), "reconfigure prefill=random") < 0 {
		t.Fatalf("calls %v", f.gw.Calls())
	}
	if f.sup.Plan().Gateway.Policy.Prefill != "random" {
		t.Fatalf("running plan's policy %+v", f.sup.Plan().Gateway.Policy)
	}
}

// TestApplyFailsHalfWayThenCompletes: a new role that crashes through
// its restart budget stops the apply; the rest keeps serving, the answer
// says what runs; a second apply with it fixed completes the change.
func TestApplyFailsHalfWayThenCompletes(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t, true, applyProfile)
	f.allReady("prefill", "decode")
	before := f.pids()
	f.gw.stubGW.mu.Lock()
	f.gw.silent["extra"] = true // it must print its way to ready, or fail
	f.gw.stubGW.mu.Unlock()
	bad := applyProfile + "  - name: extra\n    kind: decode\n    gpus: [2]\n    args: [--fail]\n"
	lines, err := f.apply(bad, ApplyRequest{})
	if err == nil || !strings.Contains(err.Error(), "extra failed") {
		t.Fatalf("apply of a failing role: %v\n%s", err, strings.Join(lines, "\n"))
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{"stopped at step", "running now: prefill ready, decode ready, extra failed", "tsd apply again"} {
		if !strings.Contains(text, want) {
			t.Errorf("progress lacks %q:\n%s", want, text)
		}
	}
	if now := f.pids(); now["prefill"] != before["prefill"] || now["decode"] != before["decode"] {
		t.Fatalf("pids %v → %v", before, now)
	}
	if st := f.sup.Snapshot().Apply; st == nil || st.State != snapshot.ApplyFailed {
		t.Fatalf("apply status %+v", st)
	}
	f.gw.stubGW.mu.Lock()
	delete(f.gw.silent, "extra")
	f.gw.stubGW.mu.Unlock()
	good := strings.Replace(bad, "    args: [--fail]\n", "", 1)
	if lines, err := f.apply(good, ApplyRequest{}); err != nil {
		t.Fatalf("second apply: %v\n%s", err, strings.Join(lines, "\n"))
	}
	f.allReady("extra")
	if now := f.pids(); now["prefill"] != before["prefill"] || now["decode"] != before["decode"] {
		t.Fatalf("pids %v → %v", before, now)
	}
	// And once more with nothing to change: nothing happens.
	plan, err := f.sup.PlanApply(ApplyRequest{Profile: f.profile})
	if err != nil || plan.Diff.Changes() {
		t.Fatalf("a third apply: %v %+v", err, plan.Diff)
	}
}

// TestApplyRefusalsChangeNothing: a profile with errors, two engines on
// one GPU, or a fixed setting changed: refused before any step.
func TestApplyRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	f := newApplyFixture(t, true, applyProfile)
	f.allReady("prefill", "decode")
	before := f.pids()
	calls := len(f.gw.Calls())
	for _, c := range []struct {
		name, src, want string
	}{
		{"a bad key", strings.Replace(applyProfile, "    kind: decode\n", "    kind: decode\n    tpp: 2\n", 1), "profile.yaml:"},
		{"two engines on one GPU", strings.Replace(applyProfile, "    gpus: [1]\n", "    gpus: [0]\n", 1), "GPU 0"},
		{"the gateway port", strings.Replace(applyProfile, "roles:\n", "gateway:\n  port: 8123\nroles:\n", 1), "cannot change on a running deployment"},
	} {
		_, err := f.apply(c.src, ApplyRequest{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := f.apply("", ApplyRequest{Scale: map[string]int{"decode": 2}, GPUs: []string{"0"}}); err == nil || !strings.Contains(err.Error(), "GPU 0") {
		t.Errorf("scale onto a used GPU: %v", err)
	}
	if now := f.pids(); !reflect.DeepEqual(now, before) || len(f.gw.Calls()) != calls {
		t.Fatalf("a refusal changed something: pids %v → %v, calls %v", before, now, f.gw.Calls()[calls:])
	}
}

// TestApplyOneAtATime: a second apply while one runs is refused.
func TestApplyOneAtATime(t *testing.T) {
	t.Parallel()
	slow := strings.Replace(applyProfile, `exec sleep 1000`, `case "$*" in *--slow*) sleep 1000;; esac; exec sleep 1000`, 1)
	slow = strings.Replace(slow, `echo "headless scheduler(s) ready"; `, `case "$*" in *--slow*) ;; *) echo "headless scheduler(s) ready";; esac; `, 1)
	f := newApplyFixture(t, false, slow)
	f.allReady("prefill", "decode")
	if err := os.WriteFile(f.profile, []byte(slow+"  - name: extra\n    kind: decode\n    gpus: [2]\n    args: [--slow]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Apply(context.Background(), ApplyRequest{Profile: f.profile}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := f.sup.Apply(context.Background(), ApplyRequest{Profile: f.profile}, nil)
	if err == nil || !strings.Contains(err.Error(), "an apply is in progress") {
		t.Fatalf("second apply: %v", err)
	}
}

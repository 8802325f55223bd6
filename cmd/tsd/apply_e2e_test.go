package main

// tsd apply and tsd scale end to end (docs/architecture.md §4.3): `tsd up
// --headless` on ts-fake engines, then the profile edited and applied
// under 32 streams that run throughout, none of which may fail.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// applyProfile is a 1P1D (or 1P2D) of ts-fake engines; decode is the
// decode entry's YAML, extra more top-level keys.
func applyProfile(port int, decode, extra string) string {
	return fmt.Sprintf(`name: fake-apply
model: ./model
engine:
  command: [%s, serve]
  env: {TS_FAKE_TOKENS_PER_S: "200", TS_FAKE_STARTUP: 200ms}
gateway:
  port: %d
%sroles:
  - name: prefill
    kind: prefill
    gpus: [0]
%s
restart:
  backoff: 200ms
  max_backoff: 2s
  budget: 100 in 10m
  stop_grace: 5s
`, fakeBin, port, extra, decode)
}

const (
	decodeOne = "  - name: decode\n    kind: decode\n    gpus: [1]\n"
	decodeTwo = "  - name: decode\n    kind: decode\n    replicas: 2\n    gpus: [[1], [2]]\n"
)

// startApplyProfile writes the profile and runs it; it returns the
// deployment, the gateway URL, and a function that rewrites the profile.
func startApplyProfile(t *testing.T, decode, extra string) (*deployment, string, func(decode, extra string)) {
	t.Helper()
	dir := fakeProfileDir(t, "e2eap")
	port := freePort(t)
	write := func(decode, extra string) {
		if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(applyProfile(port, decode, extra)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(decode, extra)
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	return d, fmt.Sprintf("http://127.0.0.1:%d", port), write
}

// apply runs `tsd apply ARGS... p.yaml` in the deployment's directory and
// returns its output and exit code.
func (d *deployment) apply(args ...string) (string, int) {
	d.t.Helper()
	out, err := d.ctl(append(append([]string{"apply"}, args...), "p.yaml")...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &ee):
		return out, ee.ExitCode()
	}
	d.t.Fatalf("tsd apply: %v\n%s", err, out)
	return "", 0
}

func pidsOf(s snapshot.Snapshot) map[string]int {
	out := map[string]int{}
	for _, r := range s.Roles {
		out[r.Name] = r.PID
	}
	return out
}

func roleNames(s snapshot.Snapshot) []string {
	var out []string
	for _, r := range s.Roles {
		out = append(out, r.Name)
	}
	return out
}

// TestE2EApplyUnderLoad: with 32 streams in flight throughout, a decode
// replica is added (prefill and the first decode keep their processes,
// the new one serves within 30 s), decode's args change (the replicas
// restart one at a time), the prefill policy changes (no engine
// restarts, the gateway routes by the new one), and the replica goes
// again (drained): no stream fails.
func TestE2EApplyUnderLoad(t *testing.T) {
	d, base, write := startApplyProfile(t, decodeOne, "")
	load := startLoad(base, 32, 24, 60*time.Second)
	select {
	case <-load.firstDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("no stream finished; %s", tallyOf(load.stop()))
	}
	before := d.status()

	// A second decode replica: decode is renamed decode-0 and keeps its
	// process; decode-1 starts beside it.
	write(decodeTwo, "")
	if out, code := d.apply("--dry-run"); code != 0 || !strings.Contains(out, "decode-0") || !strings.Contains(out, "rename") ||
		!strings.Contains(out, "decode-1") || !strings.Contains(out, "start") {
		t.Fatalf("dry run (exit %d):\n%s", code, out)
	}
	if got := roleNames(d.status()); len(got) != 2 {
		t.Fatalf("the dry run changed the roles: %v", got)
	}
	start := time.Now()
	out, code := d.apply("--yes")
	if code != 0 {
		t.Fatalf("apply of a second replica: exit %d\n%s\n%s", code, out, tallyOf(load.snapshot()))
	}
	s := d.waitStatus(func(s snapshot.Snapshot) bool {
		r, ok := gatewayRole(s, "decode-1")
		return ok && r.ReqPerS > 0
	})
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("decode-1 served after %s, want within 30 s", took)
	}
	now := pidsOf(s)
	if got := roleNames(s); strings.Join(got, ",") != "prefill,decode-0,decode-1" {
		t.Fatalf("roles after the apply: %v", got)
	}
	if now["prefill"] != pidsOf(before)["prefill"] || now["decode-0"] != pidsOf(before)["decode"] || now["decode-1"] == 0 {
		t.Fatalf("pids %v → %v: prefill and decode(-0) must keep theirs", pidsOf(before), now)
	}
	if plan, err := d.ctl("plan", "--running"); err != nil || !strings.Contains(plan, "planned as: decode") {
		t.Fatalf("tsd plan --running: %v\n%s", err, plan)
	}

	// New args for decode: both replicas restart, one at a time.
	write(decodeTwo+"    args: [--fake-tokens-per-s, \"250\"]\n", "")
	out, code = d.apply("--yes")
	if code != 0 {
		t.Fatalf("apply of new args: exit %d\n%s\n%s", code, out, tallyOf(load.snapshot()))
	}
	// The apply's own step lines (the plan's list above them is indented).
	r0, r1 := strings.Index(out, "\nrestart decode-0 ("), strings.Index(out, "\nrestart decode-1 (")
	ready0 := strings.Index(out, "\ndecode-0 ready after")
	if r0 < 0 || r1 < 0 || ready0 < 0 || !(r0 < ready0 && ready0 < r1) {
		t.Fatalf("the replicas did not restart one at a time:\n%s", out)
	}
	s = d.status()
	restarted := pidsOf(s)
	if restarted["prefill"] != now["prefill"] || restarted["decode-0"] == now["decode-0"] || restarted["decode-1"] == now["decode-1"] {
		t.Fatalf("pids %v → %v: the decodes restart, prefill does not", now, restarted)
	}

	// The prefill policy: no engine restarts.
	write(decodeTwo+"    args: [--fake-tokens-per-s, \"250\"]\n", "  policy: {prefill: random}\n")
	out, code = d.apply("--yes")
	if code != 0 || !strings.Contains(out, "gateway.policy.prefill") {
		t.Fatalf("apply of a policy: exit %d\n%s", code, out)
	}
	s = d.status()
	if got := pidsOf(s); fmt.Sprint(got) != fmt.Sprint(restarted) {
		t.Fatalf("a policy change restarted something: %v → %v", restarted, got)
	}
	if s.Gateway.Policy == nil || s.Gateway.Policy.Prefill != "random" {
		t.Fatalf("the gateway's policy now: %+v", s.Gateway.Policy)
	}
	// The next requests are routed by it: their access lines say so.
	generate(t, base)
	if logs, err := d.ctl("logs", "-n", "40", "gateway"); err != nil || !strings.Contains(logs, "route=random") {
		t.Fatalf("no access line routed by the new policy: %v\n%s", err, logs)
	}

	// Back to one replica: decode-1 drains and stops, decode-0 is decode again.
	write(decodeOne+"    args: [--fake-tokens-per-s, \"250\"]\n", "  policy: {prefill: random}\n")
	out, code = d.apply("--yes")
	if code != 0 {
		t.Fatalf("apply of one replica: exit %d\n%s\n%s", code, out, tallyOf(load.snapshot()))
	}
	s = d.status()
	if got := roleNames(s); strings.Join(got, ",") != "prefill,decode" {
		t.Fatalf("roles after scaling back: %v", got)
	}
	if pidsOf(s)["decode"] != restarted["decode-0"] {
		t.Fatalf("decode is not decode-0's process: %v → %v", restarted, pidsOf(s))
	}
	assertGone(t, restarted["decode-1"])
	if s.ProfileRevision == "" || s.Apply == nil || s.Apply.State != snapshot.ApplyDone {
		t.Fatalf("revision %q, apply %+v", s.ProfileRevision, s.Apply)
	}

	tl := tallyOf(load.stop())
	if tl.n[outOK] != tl.sent || tl.sent < 32 {
		t.Fatalf("streams through the applies: %s", tl)
	}
	d.ctl("stop")
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

// TestE2EApplyFailsHalfWay: a new role that crashes through its restart
// budget stops the apply (exit 1) and says what runs now, the rest keeps
// serving; a second apply, the role fixed, completes it. Without a
// terminal, an apply must be told --yes.
func TestE2EApplyFailsHalfWay(t *testing.T) {
	d, base, write := startApplyProfile(t, decodeOne, "")
	before := pidsOf(d.status())
	bad := decodeOne + "  - name: decode2\n    kind: decode\n    gpus: [2]\n    args: [--fake-exit-after, 50ms]\n    restart: {budget: 1 in 10m, backoff: 100ms}\n"
	write(bad, "")
	if out, code := d.apply(); code != 2 || !strings.Contains(out, "--yes") {
		t.Fatalf("an apply off a terminal without --yes: exit %d\n%s", code, out)
	}
	out, code := d.apply("--yes")
	if code != 1 {
		t.Fatalf("apply of a crashing role: exit %d\n%s", code, out)
	}
	for _, want := range []string{"stopped at step", "running now:", "prefill ready", "decode ready", "decode2 failed", "tsd apply again"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failed apply does not say %q:\n%s", want, out)
		}
	}
	s := d.status()
	if got := pidsOf(s); got["prefill"] != before["prefill"] || got["decode"] != before["decode"] {
		t.Fatalf("pids %v → %v", before, got)
	}
	if s.Apply == nil || s.Apply.State != snapshot.ApplyFailed {
		t.Fatalf("apply status %+v", s.Apply)
	}
	generate(t, base) // the rest serves

	write(strings.Replace(bad, "    args: [--fake-exit-after, 50ms]\n", "", 1), "")
	if out, code := d.apply("--yes"); code != 0 {
		t.Fatalf("the second apply: exit %d\n%s", code, out)
	}
	s = d.status()
	if roleStatus(t, s, "decode2").State != snapshot.StateReady || s.Apply.State != snapshot.ApplyDone {
		t.Fatalf("after the second apply: %+v, apply %+v", roleStatus(t, s, "decode2"), s.Apply)
	}
	if got := pidsOf(s); got["prefill"] != before["prefill"] || got["decode"] != before["decode"] {
		t.Fatalf("pids %v → %v", before, got)
	}
	generate(t, base)
	d.ctl("stop")
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

// TestE2EScale: tsd scale adds a replica on the GPU given and removes it
// again, touching nothing else; the profile file is not rewritten, and
// tsd plan --running shows what runs.
func TestE2EScale(t *testing.T) {
	d, base, _ := startApplyProfile(t, decodeOne, "")
	file, err := os.ReadFile(filepath.Join(d.dir, "p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	before := d.status()
	if out, err := d.ctl("scale", "decode=2"); err == nil || !strings.Contains(out, "--gpus") {
		t.Fatalf("scale onto unknown GPUs: %v\n%s", err, out)
	}
	out, err := d.ctl("scale", "--yes", "--gpus", "2", "decode=2")
	if err != nil {
		t.Fatalf("tsd scale decode=2: %v\n%s", err, out)
	}
	s := d.status()
	if got := strings.Join(roleNames(s), ","); got != "prefill,decode-0,decode-1" {
		t.Fatalf("roles %s", got)
	}
	if pidsOf(s)["decode-0"] != pidsOf(before)["decode"] || pidsOf(s)["prefill"] != pidsOf(before)["prefill"] {
		t.Fatalf("pids %v → %v", pidsOf(before), pidsOf(s))
	}
	if s.ProfileRevision == before.ProfileRevision {
		t.Fatal("the revision did not change with the scale")
	}
	plan, err := d.ctl("plan", "--running", "--json")
	if err != nil || !strings.Contains(plan, `"name": "decode-1"`) || !strings.Contains(plan, `"CUDA_VISIBLE_DEVICES": "2"`) {
		t.Fatalf("tsd plan --running --json: %v\n%s", err, plan)
	}
	if now, _ := os.ReadFile(filepath.Join(d.dir, "p.yaml")); string(now) != string(file) {
		t.Fatal("tsd scale rewrote the profile file")
	}
	generate(t, base)
	if out, err := d.ctl("scale", "--yes", "decode=1"); err != nil {
		t.Fatalf("tsd scale decode=1: %v\n%s", err, out)
	}
	s = d.status()
	if got := strings.Join(roleNames(s), ","); got != "prefill,decode" || pidsOf(s)["decode"] != pidsOf(before)["decode"] {
		t.Fatalf("after scaling back: %s %v", got, pidsOf(s))
	}
	if s.ProfileRevision != before.ProfileRevision {
		t.Fatalf("revision %s, want the file's %s again", s.ProfileRevision, before.ProfileRevision)
	}
	d.ctl("stop")
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

package main

// End-to-end tests of the real tsd binary: `tsd up --headless` on a plan of
// shell-script engines, driven through `tsd status|restart|stop|logs`.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/testkit/testbin"
	"github.com/tsd-project/tsd/testkit/testports"
)

var (
	binDir  string
	tsdBin  string
	fakeBin string // empty when ts-fake does not build
)

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) (err error) {
		binDir = dir
		if tsdBin, err = testbin.Build(dir, "cmd/tsd"); err != nil {
			return err
		}
		if fakeBin, err = testbin.Build(dir, "cmd/ts-fake"); err != nil {
			fakeBin = ""
			fmt.Fprintf(os.Stderr, "ts-fake does not build; its tests are skipped: %v\n", err)
		}
		// Where the binaries are (prebuilt ones live elsewhere): scripts
		// run by the tests take both from here.
		binDir = filepath.Dir(tsdBin)
		return nil
	})
}

const readyLine = `echo "[2026-08-22 10:00:00] headless scheduler(s) ready; SMG handshake endpoint=tcp://127.0.0.1:1"`

// engineScript behaves like a launcher with two rank processes.
const engineScript = `printf '\033[38;20m[2026-08-22 10:00:00,001] - INFO - Load weight begin. avail mem=78.00 GB (w.py:1)\033[0m\n' >&2; ` +
	readyLine + `; sleep 1000 & sleep 1000 & wait`

func role(name, kind, script string, grace time.Duration) profiles.RolePlan {
	return profiles.RolePlan{
		Name: name, Group: name, Kind: kind, Host: "local", Local: true, TP: 1, DP: 1,
		Argv: []string{"sh", "-c", script},
		Env:  map[string]string{"CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
		Restart: profiles.RestartPlan{
			Policy: "on-failure", Backoff: profiles.Duration(200 * time.Millisecond), MaxBackoff: profiles.Duration(2 * time.Second),
			ResetAfter: profiles.Duration(10 * time.Minute), BudgetCount: 3, BudgetWindow: profiles.Duration(10 * time.Minute),
			StopGrace: profiles.Duration(grace),
		},
	}
}

// deployment is one `tsd up --headless` process and its directory.
type deployment struct {
	t    *testing.T
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu    sync.Mutex
	lines []string
	grew  chan struct{} // closed and replaced whenever a line arrives
}

func startDeployment(t *testing.T, roles ...profiles.RolePlan) *deployment {
	t.Helper()
	return startDeploymentEnv(t, nil, roles...)
}

// startDeploymentEnv is startDeployment with extra environment for tsd.
func startDeploymentEnv(t *testing.T, env []string, roles ...profiles.RolePlan) *deployment {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	run := filepath.Join(dir, ".tsd", "run")
	logs := filepath.Join(dir, ".tsd", "logs")
	for i := range roles {
		roles[i].LogFile = filepath.Join(logs, roles[i].Name+".log")
		roles[i].Worker = "ipc://" + filepath.Join(run, roles[i].Name)
	}
	plan := profiles.Plan{Name: "e2e", RunDir: run, LogDir: logs, ControlSocket: filepath.Join(run, "tsd.sock"), Roles: roles}
	b, _ := json.Marshal(plan)
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return runTSDEnv(t, dir, env, "up", "--headless", "--no-gateway", "--plan-json", planPath)
}

// testDeploymentName is a registry name unique to this test and process.
func testDeploymentName(t *testing.T) string {
	n := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '-'
		}
		return r
	}, t.Name())
	return fmt.Sprintf("%s-%d", n, os.Getpid())
}

// stateDir is the state folder of the deployment runTSD started from a
// profile in dir (its --name is the test's: profiles.StateDir).
func stateDir(t *testing.T, dir string) string { return profiles.StateDir(dir, testDeploymentName(t)) }

// runTSD starts `tsd ARGS...` in dir and collects its output lines.
func runTSD(t *testing.T, dir string, args ...string) *deployment {
	t.Helper()
	return runTSDEnv(t, dir, nil, args...)
}

// runTSDEnv is runTSD with extra environment variables.
func runTSDEnv(t *testing.T, dir string, env []string, args ...string) *deployment {
	t.Helper()
	d := &deployment{t: t, dir: dir, done: make(chan struct{}), grew: make(chan struct{})}
	if len(args) > 0 && args[0] == "up" {
		// Deployment names are unique per user (the registry refuses a
		// second "e2e"); parallel tests each get their own.
		args = append(args, "--name", testDeploymentName(t))
	}
	d.cmd = exec.Command(tsdBin, args...)
	d.cmd.Dir = dir
	if env != nil {
		d.cmd.Env = append(os.Environ(), env...)
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = d.cmd.Stdout
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			close(d.grew)
			d.grew = make(chan struct{})
			d.mu.Unlock()
		}
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// waitLine waits for an output line containing every part, searching from
// line index from; it returns the index after the match.
func (d *deployment) waitLine(from int, parts ...string) int {
	d.t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	exited := false
	for {
		d.mu.Lock()
		for i := from; i < len(d.lines); i++ {
			ok := true
			for _, p := range parts {
				if !strings.Contains(d.lines[i], p) {
					ok = false
					break
				}
			}
			if ok {
				d.mu.Unlock()
				return i + 1
			}
		}
		grew := d.grew
		d.mu.Unlock()
		if exited {
			d.t.Fatalf("tsd exited (%v) before printing %q; output:\n%s", d.err, parts, d.output())
		}
		select {
		case <-grew:
		case <-d.done:
			exited = true // every line is in; look once more
		case <-deadline.C:
			d.t.Fatalf("no line with %q; output:\n%s", parts, d.output())
		}
	}
}

func (d *deployment) linesCopy() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.lines...)
}

func (d *deployment) output() string { return strings.Join(d.linesCopy(), "\n") }

// ctl runs a control verb in the deployment's directory (so the default
// .tsd/run/tsd.sock lookup is what finds it).
func (d *deployment) ctl(args ...string) (string, error) {
	cmd := exec.Command(tsdBin, args...)
	cmd.Dir = d.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (d *deployment) status() snapshot.Snapshot {
	d.t.Helper()
	out, err := d.ctl("status", "--json")
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) { // 1: a role failed, JSON still printed
		d.t.Fatalf("tsd status --json: %v\n%s", err, out)
	}
	var s snapshot.Snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		d.t.Fatalf("decode status: %v\n%s", err, out)
	}
	return s
}

// waitStatus asks `tsd status --json` until cond holds, for up to 30 s.
func (d *deployment) waitStatus(cond func(snapshot.Snapshot) bool) snapshot.Snapshot {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s := d.status()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("status never matched; last: %+v\noutput:\n%s", s, d.output())
		}
		select {
		case <-tick.C:
		case <-d.done:
			d.t.Fatalf("tsd exited (%v) before its status matched; output:\n%s", d.err, d.output())
		}
	}
}

func (d *deployment) wait() error {
	d.t.Helper()
	select {
	case <-d.done:
		return d.err
	case <-time.After(60 * time.Second):
		d.t.Fatalf("tsd did not exit; output:\n%s", d.output())
		return nil
	}
}

func roleStatus(t *testing.T, s snapshot.Snapshot, name string) snapshot.RoleStatus {
	t.Helper()
	for _, r := range s.Roles {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no role %s in %+v", name, s)
	return snapshot.RoleStatus{}
}

// groupProcs lists live (non-zombie) members of a process group.
func groupProcs(pgid int) []int {
	want := strconv.Itoa(pgid)
	return liveProcs(func(f []string) bool { return len(f) > 2 && f[2] == want })
}

// liveProcs lists the live (not zombie or dead) processes whose
// /proc/PID/stat fields after the command name (state, ppid, pgrp, …)
// pass keep.
func liveProcs(keep func(fields []string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 > len(s) {
			continue
		}
		f := strings.Fields(s[i+2:])
		if len(f) > 0 && f[0] != "Z" && f[0] != "X" && keep(f) {
			out = append(out, pid)
		}
	}
	return out
}

// waitExited waits, by pidfd events, until every pid has exited.
func waitExited(t *testing.T, pids []int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var fds []unix.PollFd
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue // already gone
		}
		defer unix.Close(fd)
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	for len(fds) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%d process(es) still alive after %s", len(fds), limit)
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
		if n <= 0 {
			continue
		}
		var rest []unix.PollFd
		for _, f := range fds {
			if f.Revents == 0 {
				f.Revents = 0
				rest = append(rest, f)
			}
		}
		fds = rest
	}
}

func assertGone(t *testing.T, pgid int) {
	t.Helper()
	if pgid <= 0 {
		t.Fatalf("no process group recorded")
	}
	if left := groupProcs(pgid); len(left) > 0 {
		t.Fatalf("process group %d still has %v", pgid, left)
	}
}

// TestE2ELifecycle: up → ready → restart decode → re-admitted → stop →
// every process gone and every socket file removed.
func TestE2ELifecycle(t *testing.T) {
	t.Parallel()
	d := startDeployment(t, role("prefill", "prefill", engineScript, 5*time.Second), role("decode", "decode", engineScript, 5*time.Second))
	d.waitLine(0, "prefill", "→ ready")
	n := d.waitLine(0, "decode", "→ ready")
	s := d.status()
	pre, dec := roleStatus(t, s, "prefill"), roleStatus(t, s, "decode")
	if pre.State != snapshot.StateReady || dec.State != snapshot.StateReady || dec.Phase != "ready" || dec.PID == 0 {
		t.Fatalf("not ready: %+v %+v", pre, dec)
	}
	sock := filepath.Join(d.dir, ".tsd", "run", "tsd.sock")
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket: %v %v", err, fi)
	}
	// TODO(gateway): once the embedded gateway is wired into `tsd up`
	// (newGateway), send one chat completion through it here and again
	// after the restart, with ts-fake engines instead of scripts.

	// A second tsd on the same run dir refuses to start.
	second := exec.Command(tsdBin, "up", "--headless", "--no-gateway", "--plan-json", filepath.Join(d.dir, "plan.json"))
	if out, err := second.CombinedOutput(); err == nil || !strings.Contains(string(out), "another tsd is running") {
		t.Fatalf("second tsd up: %v\n%s", err, out)
	}
	// `tsd logs -f` follows across the restart until tsd stops.
	follow := runTSD(t, d.dir, "logs", "-f", "decode")
	follow.waitLine(0, "headless scheduler(s) ready")

	out, err := d.ctl("restart", "decode")
	if err != nil {
		t.Fatalf("tsd restart decode: %v\n%s", err, out)
	}
	follow.waitLine(0, "restart requested: SIGTERM to process group")
	d.waitLine(n, "decode", "ready → stopping: restart requested")
	d.waitLine(n, "decode", "process group "+strconv.Itoa(dec.PID)+" verified empty")
	d.waitLine(n, "decode", "starting → ready")
	assertGone(t, dec.PID)
	dec2 := roleStatus(t, d.status(), "decode")
	if dec2.State != snapshot.StateReady || dec2.PID == dec.PID || dec2.Restarts != 1 {
		t.Fatalf("after restart: %+v", dec2)
	}
	if out, err := d.ctl("logs", "decode"); err != nil || !strings.Contains(out, "headless scheduler(s) ready") {
		t.Fatalf("tsd logs decode: %v\n%s", err, out)
	}
	if out, err := d.ctl("status"); err != nil || !strings.Contains(out, "decode") || !strings.Contains(out, "ready") {
		t.Fatalf("tsd status: %v\n%s", err, out)
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up exited with %v; output:\n%s", err, d.output())
	}
	if err := follow.wait(); err != nil {
		t.Fatalf("tsd logs -f: %v", err)
	}
	for _, pid := range []int{pre.PID, dec2.PID} {
		assertGone(t, pid)
	}
	ents, _ := os.ReadDir(filepath.Join(d.dir, ".tsd", "run"))
	if len(ents) != 0 {
		t.Fatalf("run dir not clean: %v", ents)
	}
}

// TestE2ECrashLoopFails: an engine exiting after 1 s is restarted with
// growing delays, ends failed, and `tsd status --json` says why; tsd then
// exits non-zero.
func TestE2ECrashLoopFails(t *testing.T) {
	t.Parallel()
	d := startDeployment(t, role("decode", "decode", `echo "ValueError: model not found" >&2; sleep 1; exit 1`, 2*time.Second))
	d.waitLine(0, "decode", "→ failed")
	r := roleStatus(t, d.status(), "decode")
	if r.State != snapshot.StateFailed || !strings.Contains(r.Reason, "exit 1 after ") || !strings.Contains(r.Reason, "restart budget spent (3 in 10m)") {
		t.Fatalf("failed status %+v", r)
	}
	var delays []string
	for _, l := range d.linesCopy() {
		if i := strings.Index(l, "next try in "); i >= 0 && strings.Contains(l, "→ backoff") {
			delays = append(delays, l[i+len("next try in "):])
		}
	}
	if len(delays) != 3 {
		t.Fatalf("backoff lines %v; output:\n%s", delays, d.output())
	}
	var prev time.Duration
	for _, s := range delays {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("delay %q: %v", s, err)
		}
		if v <= prev {
			t.Fatalf("delays do not grow: %v", delays)
		}
		prev = v
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	err := d.wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("tsd up should exit 1 when a role failed, got %v", err)
	}
	if !strings.Contains(d.output(), "decode failed: exit 1") {
		t.Fatalf("no failure summary:\n%s", d.output())
	}
}

// TestE2EKill9LeavesNoOrphans: kill -9 of tsd leaves no engine process
// (launchers and their "ranks") alive within 2 s.
func TestE2EKill9LeavesNoOrphans(t *testing.T) {
	t.Parallel()
	d := startDeployment(t, role("prefill", "prefill", engineScript, 5*time.Second), role("decode", "decode", engineScript, 5*time.Second))
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	s := d.status()
	var pids, pgids []int
	for _, r := range s.Roles {
		if r.PID <= 0 {
			t.Fatalf("role %s has no pid: %+v", r.Name, r)
		}
		pgids = append(pgids, r.PID)
		pids = append(pids, groupProcs(r.PID)...)
	}
	if len(pids) < 6 { // sh + 2 sleeps per role
		t.Fatalf("expected ≥ 6 engine processes, found %v", pids)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, pids, 2*time.Second)
	for _, g := range pgids {
		assertGone(t, g)
	}
}

// TestE2EIgnoredSIGTERM: `tsd stop decode` on an engine that ignores
// SIGTERM ends with SIGKILL after stop_grace and a verified-empty group.
func TestE2EIgnoredSIGTERM(t *testing.T) {
	t.Parallel()
	d := startDeployment(t, role("decode", "decode", `trap '' TERM; `+readyLine+`; sleep 1000 & sleep 1000 & wait`, 500*time.Millisecond))
	n := d.waitLine(0, "decode", "→ ready")
	r := roleStatus(t, d.status(), "decode")
	if out, err := d.ctl("stop", "decode"); err != nil {
		t.Fatalf("tsd stop decode: %v\n%s", err, out)
	}
	d.waitLine(n, "decode", "ignored SIGTERM")
	d.waitLine(n, "decode", "verified empty")
	d.waitLine(n, "decode", "→ stopped")
	assertGone(t, r.PID)
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v", err)
	}
}

// handedOut is every port a test of this binary was given: parallel tests
// asking the kernel for a free port can be given the same one (it is free
// again once the asker closes it), and two deployments planned on one port
// fail their preflight.
// freePort is reserved against every other test, in this binary and the
// others running beside it (testkit/testports).
func freePort(t *testing.T) int {
	t.Helper()
	return testports.Port(t)
}

// metricsText is the gateway's /metrics page at base.
func metricsText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// fakeProfileDir skips the test when ts-fake did not build, and returns
// a fresh folder holding the empty model folder the ts-fake profiles
// name (./model), removed when the test ends. It is os.MkdirTemp's short
// path, not t.TempDir's: the deployment's ipc sockets live below it.
func fakeProfileDir(t *testing.T, prefix string) string {
	t.Helper()
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "model"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startFakeProfile writes a PD profile of ts-fake engines and runs
// `tsd up --headless` on it with the embedded gateway.
func startFakeProfile(t *testing.T, decodeEnv string) (*deployment, string) {
	t.Helper()
	dir := fakeProfileDir(t, "e2ef")
	port := freePort(t)
	prof := fmt.Sprintf(`name: fake-pd
model: ./model
engine:
  command: [%s, serve]
gateway:
  port: %d
roles:
  - name: prefill
    kind: prefill
    gpus: [0]
  - name: decode
    kind: decode
    gpus: [1]
%s
restart:
  backoff: 200ms
  budget: 3 in 10m
  stop_grace: 5s
`, fakeBin, port, decodeEnv)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	return runTSD(t, dir, "up", "--headless", "p.yaml"), fmt.Sprintf("http://127.0.0.1:%d", port)
}

// generate sends one token-level request through the gateway.
func generate(t *testing.T, base string) {
	t.Helper()
	body := `{"input_ids":[1,2,3,4],"sampling_params":{"max_new_tokens":4,"ignore_eos":true,"seed":7}}`
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post(base+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST /generate: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		OutputIDs []int `json:"output_ids"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || len(out.OutputIDs) != 4 {
		t.Fatalf("POST /generate: %d %s", resp.StatusCode, b)
	}
}

// TestE2EFakeEnginesThroughGateway: ts-fake engines behind the embedded
// gateway: up → ready (ranks registered) → request → `tsd restart decode`
// → re-admitted → request → `tsd stop` → every process gone, run dir clean.
func TestE2EFakeEnginesThroughGateway(t *testing.T) {
	d, base := startFakeProfile(t, "")
	d.waitLine(0, "prefill", "→ ready")
	n := d.waitLine(0, "decode", "→ ready")
	s := d.status()
	dec := roleStatus(t, s, "decode")
	pre := roleStatus(t, s, "prefill")
	if dec.RanksRegistered != 1 || !dec.Routed || !s.Gateway.Ready {
		t.Fatalf("decode not admitted: %+v gateway %+v", dec, s.Gateway)
	}
	// The profile's model folder is empty: the OpenAI API is off, and
	// status and the output say so, not only the gateway log.
	if !strings.Contains(s.Gateway.Problem, "OpenAI API off: tokenizer") {
		t.Fatalf("gateway problem %q", s.Gateway.Problem)
	}
	d.waitLine(0, "tsd: OpenAI API off: tokenizer")
	if out, _ := d.ctl("status"); !strings.Contains(out, "problem: OpenAI API off") {
		t.Fatalf("tsd status does not show the problem:\n%s", out)
	}
	prePIDs := groupProcs(pre.PID)
	generate(t, base)

	if out, err := d.ctl("restart", "decode"); err != nil {
		t.Fatalf("tsd restart decode: %v\n%s", err, out)
	}
	d.waitLine(n, "decode", "process group "+strconv.Itoa(dec.PID)+" verified empty")
	d.waitLine(n, "decode", "handshaking → ready")
	assertGone(t, dec.PID)
	dec2 := roleStatus(t, d.status(), "decode")
	if dec2.PID == dec.PID || !dec2.Routed || dec2.Restarts != 1 {
		t.Fatalf("decode after restart: %+v", dec2)
	}
	generate(t, base)

	// The gateway is a log source (`tsd logs gateway`, its 0600
	// file) with one access line per request, and the status counts the
	// requests on the roles that served them.
	if out, err := d.ctl("logs", "gateway"); err != nil || strings.Count(out, "msg=access") != 2 || !strings.Contains(out, "roles=prefill,decode") {
		t.Fatalf("tsd logs gateway: %v\n%s", err, out)
	}
	gwLog := filepath.Join(stateDir(t, d.dir), "logs", "gateway.log")
	if fi, err := os.Stat(gwLog); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("gateway log: %v %v", err, fi)
	}
	// The snapshot is published at its own cadence, after the request.
	gs := d.waitStatus(func(s snapshot.Snapshot) bool { return s.Gateway.Requests == 2 && s.Gateway.InFlight == 0 }).Gateway
	var decTraffic *snapshot.RoleTraffic
	for i := range gs.Roles {
		if gs.Roles[i].Role == "decode" {
			decTraffic = &gs.Roles[i]
		}
	}
	if gs.Requests != 2 || gs.Errors != 0 || decTraffic == nil || decTraffic.TTFTp50 <= 0 {
		t.Fatalf("gateway traffic after 2 requests: %+v", gs)
	}

	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
	waitExited(t, prePIDs, 2*time.Second)
	assertGone(t, pre.PID)
	assertGone(t, dec2.PID)
	ents, _ := os.ReadDir(filepath.Join(stateDir(t, d.dir), "run"))
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("run dir not clean: %v", names)
	}
}

// TestE2EFakeEnginesKill9: kill -9 of tsd running ts-fake engines (a
// launcher plus one scheduler process per rank, no parent-death signal)
// leaves no engine process within 2 s.
func TestE2EFakeEnginesKill9(t *testing.T) {
	d, _ := startFakeProfile(t, "")
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	var pids []int
	for _, r := range d.status().Roles {
		if r.PID <= 0 {
			t.Fatalf("no pid for %s", r.Name)
		}
		pids = append(pids, groupProcs(r.PID)...)
	}
	if len(pids) < 4 {
		t.Fatalf("expected launcher + rank per role, found %v", pids)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, pids, 2*time.Second)
}

// TestE2EFakeEngineCrashLoop: a decode engine exiting 1 s after start backs
// off with growing delays and ends failed; the reason is in the status.
func TestE2EFakeEngineCrashLoop(t *testing.T) {
	d, _ := startFakeProfile(t, "    env: {TS_FAKE_EXIT_AFTER: 1s}")
	d.waitLine(0, "decode", "→ failed")
	r := roleStatus(t, d.status(), "decode")
	if !strings.Contains(r.Reason, "exit 1 after ") || !strings.Contains(r.Reason, "restart budget spent (3 in 10m)") {
		t.Fatalf("reason %q", r.Reason)
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	var ee *exec.ExitError
	if err := d.wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("tsd up should exit 1, got %v", err)
	}
}

// TestE2ESecondInterruptKills: the first SIGINT starts an orderly stop (an
// engine ignoring SIGTERM would hold it for its whole grace); the second
// SIGKILLs every group and tsd exits.
func TestE2ESecondInterruptKills(t *testing.T) {
	t.Parallel()
	d := startDeployment(t, role("decode", "decode", `trap '' TERM; `+readyLine+`; sleep 1000 & sleep 1000 & wait`, time.Hour))
	n := d.waitLine(0, "decode", "→ ready")
	r := roleStatus(t, d.status(), "decode")
	pids := groupProcs(r.PID)
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	d.waitLine(n, "Ctrl-C again")
	d.waitLine(n, "decode", "→ stopping")
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
	waitExited(t, pids, 2*time.Second)
	assertGone(t, r.PID)
}

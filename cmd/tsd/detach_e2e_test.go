package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// detachedPlan writes a plan of shell engines named name into a fresh dir.
func detachedPlan(t *testing.T, name string) (dir, planPath string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2ed")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	run, logs := filepath.Join(dir, ".tsd", "run"), filepath.Join(dir, ".tsd", "logs")
	roles := []profiles.RolePlan{role("prefill", "prefill", engineScript, 5*time.Second), role("decode", "decode", engineScript, 5*time.Second)}
	for i := range roles {
		roles[i].LogFile = filepath.Join(logs, roles[i].Name+".log")
		roles[i].Worker = "ipc://" + filepath.Join(run, roles[i].Name)
	}
	plan := profiles.Plan{Name: name, RunDir: run, LogDir: logs, ControlSocket: filepath.Join(run, "tsd.sock"), Roles: roles}
	b, _ := json.Marshal(plan)
	planPath = filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, planPath
}

// registered is name's registry entry (the real per-user registry: the
// daemon under test registers there so its ports are claimed against
// every other tsd; names are unique per test).
func registered(t *testing.T, name string) daemons.Entry {
	t.Helper()
	reg, err := daemons.Open("")
	if err != nil {
		t.Fatal(err)
	}
	live, err := reg.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range live {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("%s not in the registry (%+v)", name, live)
	return daemons.Entry{}
}

// TestE2EDetachedKill9: `tsd up -d` returns once every role is ready, with
// the daemon in its own session and registered; `tsd ls` and `tsd status
// NAME` find it from another directory; a second `up` of the name is
// refused; kill -9 of the daemon leaves no engine alive (the guardians'
// lifelines) and the stale entry disappears.
func TestE2EDetachedKill9(t *testing.T) {
	t.Parallel()
	name := testDeploymentName(t)
	dir, planPath := detachedPlan(t, name)
	up := exec.Command(tsdBin, "up", "-d", "--no-gateway", "--plan-json", planPath, "--wait", "60s")
	up.Dir = dir
	out, err := up.CombinedOutput()
	if err != nil {
		t.Fatalf("tsd up -d: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), name+" is up") || !strings.Contains(string(out), "tsd attach "+name) {
		t.Fatalf("tsd up -d said:\n%s", out)
	}
	e := registered(t, name)
	t.Cleanup(func() { _ = syscall.Kill(e.PID, syscall.SIGKILL) }) // if the test fails midway
	if sid, err := unix.Getsid(e.PID); err != nil || sid != e.PID {
		t.Fatalf("daemon %d is not its own session leader (sid %d, %v)", e.PID, sid, err)
	}

	other := t.TempDir()
	ctl := func(args ...string) (string, error) {
		c := exec.Command(tsdBin, args...)
		c.Dir = other
		b, err := c.CombinedOutput()
		return string(b), err
	}
	if ls, err := ctl("ls"); err != nil || !strings.Contains(ls, name) || !strings.Contains(ls, "2/2") {
		t.Fatalf("tsd ls: %v\n%s", err, ls)
	}
	js, err := ctl("status", name, "--json")
	if err != nil {
		t.Fatalf("tsd status %s: %v\n%s", name, err, js)
	}
	var s snapshot.Snapshot
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Roles {
		if r.State != snapshot.StateReady || r.PID <= 0 {
			t.Fatalf("after up -d: %+v", r)
		}
	}
	if out, err := ctl("up", "-d", "--no-gateway", "--plan-json", planPath); err == nil || !strings.Contains(out, "already running") {
		t.Fatalf("second up of %s: %v\n%s", name, err, out)
	}

	// The verbs by name from elsewhere: logs with --tail and --timestamps
	// (no ANSI off a terminal), stop + start of one role, restart --wait.
	if out, err := ctl("logs", "decode", name, "--tail", "1", "-t"); err != nil || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "20") || strings.Contains(out, "\x1b[") {
		t.Fatalf("tsd logs --tail 1 -t: %v\n%q", err, out)
	}
	if out, err := ctl("stop", "decode", name); err != nil || !strings.Contains(out, "stopping decode") {
		t.Fatalf("tsd stop decode: %v\n%s", err, out)
	}
	// Right after the stop the role may still be stopping: then it starts
	// once stopped.
	if out, err := ctl("start", "decode", name); err != nil || !strings.Contains(out, "starting decode") && !strings.Contains(out, "decode is stopping; it starts again once stopped") && !strings.Contains(out, "decode is draining; it starts again once stopped") {
		t.Fatalf("tsd start decode: %v\n%s", err, out)
	}
	if out, err := ctl("restart", "--wait", "decode", name); err != nil || !strings.Contains(out, "decode is ready again") {
		t.Fatalf("tsd restart --wait decode: %v\n%s", err, out)
	}
	if out, err := ctl("restart", "nope", name); err == nil || !strings.Contains(out, "unknown role") {
		t.Fatalf("restart of an unknown role: %v\n%s", err, out)
	}
	// status --watch without a terminal: plain blocks, one a second.
	w := exec.Command(tsdBin, "status", name, "--watch")
	stdout, _ := w.StdoutPipe()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	blocks := 0
	for blocks < 2 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "ROLE ") {
			blocks++
		}
		if strings.Contains(sc.Text(), "\x1b[") {
			t.Fatalf("status --watch wrote ANSI off a terminal: %q", sc.Text())
		}
	}
	_ = w.Process.Signal(syscall.SIGINT)
	if err := w.Wait(); err != nil || blocks < 2 {
		t.Fatalf("status --watch: %v after %d block(s)", err, blocks)
	}
	js, err = ctl("status", name, "--json")
	if err != nil {
		t.Fatal(err)
	}
	s = snapshot.Snapshot{}
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	var pids, pgids []int
	for _, r := range s.Roles {
		pgids = append(pgids, r.PID)
		pids = append(pids, groupProcs(r.PID)...)
	}

	if err := syscall.Kill(e.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, pids, 2*time.Second+5*time.Second) // SIGTERM, then SIGKILL after stop_grace at worst
	for _, g := range pgids {
		assertGone(t, g)
	}
	if out, err := ctl("status", name); err == nil {
		t.Fatalf("status after kill -9 succeeded:\n%s", out)
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitNotRunning || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("status after kill -9: %v (want exit %d, one line)\n%s", err, exitNotRunning, out)
	}
}

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// ctlIn runs tsd ARGS in dir and returns its output and exit code.
func ctlIn(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(tsdBin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("tsd %v: %v", args, err)
	return "", -1
}

// A bare `tsd stop` (restart, start) from a directory with no deployment
// of its own once stopped someone else's: it refuses with exit 2 and
// lists the deployment with the command to type, and the deployment
// keeps running; from the deployment's own directory it acts.
func TestE2EBareControlVerbElsewhereRefuses(t *testing.T) {
	t.Parallel()
	d := startDeployment(t, role("decode", "decode", engineScript, 5*time.Second))
	d.waitLine(0, "decode", "→ ready")
	name := testDeploymentName(t)
	other := t.TempDir()
	for _, args := range [][]string{{"stop"}, {"restart", "decode"}, {"start", "decode"}} {
		out, code := ctlIn(t, other, args...)
		want := "tsd " + strings.Join(args, " ") + " " + name
		if code != 2 || !strings.Contains(out, "acts only on the deployment of this directory") || !strings.Contains(out, want) {
			t.Fatalf("bare tsd %v from elsewhere: exit %d, want 2 with %q:\n%s", args, code, want, out)
		}
	}
	// The name of a deployment that is gone is said to be gone, not read
	// as a role with the running deployments listed.
	if out, code := ctlIn(t, other, "stop", name+"-gone"); code != exitNotRunning || !strings.Contains(out, `no deployment named "`+name+`-gone" is running`) || strings.Contains(out, "tsd stop "+name) {
		t.Fatalf("tsd stop of a deployment already gone: exit %d\n%s", code, out)
	}
	if s := d.status(); roleStatus(t, s, "decode").State != "ready" || roleStatus(t, s, "decode").Restarts != 0 {
		t.Fatalf("a refused bare verb touched the deployment: %+v", s.Roles)
	}
	// -n 0 prints nothing; a read-only verb names what it picked when
	// it was not this directory's (stderr), here it needs no note.
	if out, code := ctlIn(t, d.dir, "logs", "decode", "-n", "0"); code != 0 || out != "" {
		t.Fatalf("tsd logs -n 0: exit %d %q", code, out)
	}
	if out, err := d.ctl("stop"); err != nil || !strings.Contains(out, "stopping "+name) || !strings.Contains(out, "stopped "+name) {
		t.Fatalf("bare tsd stop in its directory: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

// kill -9 of tsd and every guardian at once (as an OOM kill of the whole
// cgroup, or pkill -9 tsd) leaves the engines running under PID 1. `tsd
// ls` shows the deployment dead with the count of what it left (verified
// by pid and start time); `tsd status NAME` says so (exit 3); `tsd stop
// NAME` (or a bare `tsd stop` in its directory) reaps every one of them
// within 5 s and removes the entry.
func TestE2EKilledDaemonLeftovers(t *testing.T) {
	for _, how := range []string{"by-name", "bare-in-its-directory"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			// Records only: a writable cgroup would not change what is left.
			d := startDeploymentEnv(t, []string{"TSD_NO_CGROUP=1"},
				role("prefill", "prefill", engineScript, 5*time.Second), role("decode", "decode", engineScript, 5*time.Second))
			d.waitLine(0, "prefill", "→ ready")
			d.waitLine(0, "decode", "→ ready")
			name := testDeploymentName(t)
			var pids []int
			for _, r := range d.status().Roles {
				pids = append(pids, groupProcs(r.PID)...)
			}
			guards := childrenOf(d.cmd.Process.Pid)
			if len(guards) != 2 {
				t.Fatalf("guardians %v", guards)
			}
			// tsd is stopped first: between two kills a running tsd would
			// see its guardians die and kill the engines itself, which is
			// not the case under test (everything gone at once).
			_ = d.cmd.Process.Signal(syscall.SIGSTOP)
			for _, g := range guards {
				_ = syscall.Kill(g, syscall.SIGKILL)
			}
			_ = d.cmd.Process.Signal(syscall.SIGKILL)
			<-d.done
			t.Cleanup(func() {
				for _, p := range pids {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			})
			left := 0
			for _, p := range pids {
				if alive(p) {
					left++
				}
			}
			if left != len(pids) {
				t.Fatalf("%d of the engines' %d processes died with tsd; the test needs them left", len(pids)-left, len(pids))
			}

			other := t.TempDir()
			out, code := ctlIn(t, other, "ls")
			row := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, name+" ") {
					row = l
				}
			}
			if code != 0 || !strings.Contains(row, "dead, "+processes(left)+" left") || !strings.Contains(out, "tsd stop "+name) {
				t.Fatalf("tsd ls after the kill: exit %d, want %s dead with %d left:\n%s", code, name, left, out)
			}
			js, _ := ctlIn(t, other, "ls", "--json")
			var rows []lsRow
			if err := json.Unmarshal([]byte(js), &rows); err != nil {
				t.Fatalf("ls --json: %v\n%s", err, js)
			}
			found := false
			for _, r := range rows {
				found = found || r.Name == name && r.Dead && len(r.Leftovers) == left
			}
			if !found {
				t.Fatalf("ls --json lacks %s dead with %d leftovers:\n%s", name, left, js)
			}
			if out, code := ctlIn(t, other, "status", name); code != exitNotRunning || !strings.Contains(out, "died and left "+processes(left)) {
				t.Fatalf("tsd status of a dead deployment: exit %d\n%s", code, out)
			}

			dir, args := other, []string{"stop", name}
			if how == "bare-in-its-directory" {
				dir, args = d.dir, []string{"stop"}
			}
			start := time.Now()
			out, code = ctlIn(t, dir, args...)
			if code != 0 || !strings.Contains(out, "stopped the "+processes(left)+" it left") {
				t.Fatalf("tsd %v: exit %d\n%s", args, code, out)
			}
			waitExited(t, pids, 5*time.Second-time.Since(start))
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("reaping took %s", took)
			}
			if out, _ := ctlIn(t, other, "ls"); strings.Contains(out, name+" ") {
				t.Fatalf("%s still listed after the reap:\n%s", name, out)
			}
		})
	}
}

// With replicas (decode-0, decode-1 of the profile entry "decode") the
// group's name acts on the group: restart is rolling, stop and start act
// on every instance, logs interleaves them with an instance prefix; a
// start of a running role says so and does nothing, a stop of a stopped
// one too; a typo gets the closest name.
func TestE2EReplicaGroupVerbs(t *testing.T) {
	t.Parallel()
	replica := func(name string) profiles.RolePlan {
		r := role(name, "decode", engineScript, 5*time.Second)
		r.Group = "decode"
		return r
	}
	d := startDeployment(t, role("prefill", "prefill", engineScript, 5*time.Second), replica("decode-0"), replica("decode-1"))
	for _, r := range []string{"prefill", "decode-0", "decode-1"} {
		d.waitLine(0, r, "→ ready")
	}
	before := d.status()

	out, err := d.ctl("restart", "decode")
	if err != nil || !strings.Contains(out, "decode is a replica group (decode-0, decode-1): restarting one instance at a time") ||
		!strings.Contains(out, "decode-0 ready again") || !strings.Contains(out, "rolling restart of decode done") {
		t.Fatalf("tsd restart decode: %v\n%s", err, out)
	}
	after := d.status()
	for _, n := range []string{"decode-0", "decode-1"} {
		if a := roleStatus(t, after, n); a.PID == roleStatus(t, before, n).PID || a.Restarts != 1 {
			t.Fatalf("%s after restarting the group: %+v", n, a)
		}
	}

	out, err = d.ctl("start", "prefill")
	if err != nil || strings.TrimSpace(out) != "prefill is already running (ready)" {
		t.Fatalf("tsd start of a running role: %v\n%s", err, out)
	}
	if p := roleStatus(t, d.status(), "prefill"); p.PID != roleStatus(t, before, "prefill").PID || p.Restarts != 0 {
		t.Fatalf("a start of a running role touched it: %+v", p)
	}

	out, err = d.ctl("logs", "decode", "-n", "50")
	if err != nil || !strings.Contains(out, "decode-0 | ") || !strings.Contains(out, "decode-1 | ") || strings.Contains(out, "prefill | ") {
		t.Fatalf("tsd logs decode: %v\n%s", err, out)
	}

	out, err = d.ctl("stop", "decode")
	if err != nil || !strings.Contains(out, "stopping decode-0\nstopping decode-1") {
		t.Fatalf("tsd stop decode: %v\n%s", err, out)
	}
	d.waitStatus(func(s snapshot.Snapshot) bool {
		return roleStatus(t, s, "decode-0").State == snapshot.StateStopped && roleStatus(t, s, "decode-1").State == snapshot.StateStopped
	})
	out, err = d.ctl("stop", "decode-1")
	if err != nil || strings.TrimSpace(out) != "decode-1 is already stopped" {
		t.Fatalf("tsd stop of a stopped role: %v\n%s", err, out)
	}
	out, err = d.ctl("start", "decode")
	if err != nil || !strings.Contains(out, "starting decode-0\nstarting decode-1") {
		t.Fatalf("tsd start decode: %v\n%s", err, out)
	}
	d.waitStatus(func(s snapshot.Snapshot) bool {
		return roleStatus(t, s, "decode-0").State == snapshot.StateReady && roleStatus(t, s, "decode-1").State == snapshot.StateReady
	})

	out, code := ctlIn(t, d.dir, "restart", "decdoe")
	if code != 2 || !strings.Contains(out, `unknown role "decdoe" (did you mean "decode"?)`) || !strings.Contains(out, "prefill, decode (decode-0, decode-1)") {
		t.Fatalf("a typo: exit %d\n%s", code, out)
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

// The bash completion script, run as bash runs it: a ROLE position offers
// the running deployment's roles (and its replica group), not deployment
// names; a NAME position offers deployment names, not roles; `export`
// offers slurm.
func TestE2EBashCompletion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	t.Parallel()
	replica := func(name string) profiles.RolePlan {
		r := role(name, "decode", engineScript, 5*time.Second)
		r.Group = "decode"
		return r
	}
	d := startDeployment(t, role("prefill", "prefill", engineScript, 5*time.Second), replica("decode-0"), replica("decode-1"))
	for _, r := range []string{"prefill", "decode-0", "decode-1"} {
		d.waitLine(0, r, "→ ready")
	}
	name := testDeploymentName(t)
	script, err := exec.Command(tsdBin, "completion", "bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		cmd := exec.Command("bash", "-c", string(script)+"\nCOMP_WORDS=(tsd "+strings.Join(quoted, " ")+"); COMP_CWORD="+fmt.Sprint(len(words))+
			"; _tsd; printf '%s\\n' \"${COMPREPLY[@]}\"")
		cmd.Dir = d.dir
		cmd.Env = append(cmd.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("completing %v: %v\n%s", words, err, out)
		}
		return strings.Fields(string(out))
	}
	has := func(got []string, w string) bool {
		for _, g := range got {
			if g == w {
				return true
			}
		}
		return false
	}
	got := complete("restart", "")
	for _, w := range []string{"prefill", "decode-0", "decode-1", "decode"} {
		if !has(got, w) {
			t.Errorf("tsd restart <Tab> lacks the role %s: %v", w, got)
		}
	}
	if has(got, name) {
		t.Errorf("tsd restart <Tab> offers the deployment name %s where a ROLE goes: %v", name, got)
	}
	if got := complete("restart", "dec"); strings.Join(got, " ") != "decode-0 decode-1 decode" {
		t.Errorf("tsd restart dec<Tab>: %v", got)
	}
	got = complete("status", "")
	if !has(got, name) || has(got, "prefill") {
		t.Errorf("tsd status <Tab>: %v, want deployment names and no roles", got)
	}
	if got := complete("logs", "gat"); strings.Join(got, " ") != "gateway" {
		t.Errorf("tsd logs gat<Tab>: %v", got)
	}
	if got := complete("export", ""); strings.Join(got, " ") != "slurm" {
		t.Errorf("tsd export <Tab>: %v", got)
	}
	if got := complete("restart", "--"); !has(got, "--rolling") || !has(got, "--wait") {
		t.Errorf("tsd restart --<Tab>: %v", got)
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

// One id joins the logs: the access line lists the rid the engines got
// (engine_rids), and ts-fake, as the engine does, logs that rid, so one
// grep finds a request's gateway, prefill and decode lines. A request the
// client abandoned is logged 499, not 200 with no tokens; a 503 says why
// (reason=); the planned restart's ENGINE_CORE_DEAD is INFO.
func TestE2EAccessLineJoinsEngineLogs(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "model"), 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	prof := fmt.Sprintf(`name: fake-pd
model: ./model
engine:
  command: [%s, serve]
gateway:
  port: %d
  queue_timeout: 300ms
roles:
  - name: prefill
    kind: prefill
    gpus: [0]
  - name: decode
    kind: decode
    gpus: [1]
restart:
  backoff: 200ms
  stop_grace: 5s
`, fakeBin, port)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	logs := filepath.Join(stateDir(t, dir), "logs")
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(logs, name+".log"))
		return string(b)
	}
	// waitFile waits until the log file has a line with every part, and
	// returns that line (files are written as lines arrive: poll them).
	waitFile := func(name string, parts ...string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			for _, l := range strings.Split(read(name), "\n") {
				ok := true
				for _, p := range parts {
					ok = ok && strings.Contains(l, p)
				}
				if ok {
					return l
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s.log has no line with %q:\n%s", name, parts, read(name))
			}
			time.Sleep(20 * time.Millisecond) // the log is a file: no event to wait on
		}
	}

	generate(t, base)
	access := waitFile("gateway", "msg=access", "path=/generate", "status=200")
	_, rest, ok := strings.Cut(access, "engine_rids=")
	if !ok {
		t.Fatalf("no engine_rids on the access line: %q", access)
	}
	rid, _, _ := strings.Cut(rest, " ")
	if !strings.HasPrefix(rid, "gen-") || strings.Contains(rid, ",") {
		t.Fatalf("engine rid %q from %q", rid, access)
	}
	waitFile("prefill", "Req: "+rid+" Finish!")
	waitFile("decode", "Req: "+rid+" Finish!")

	// A stream abandoned after its first token.
	body := `{"rid":"walk-away","input_ids":[1,2,3],"stream":true,"sampling_params":{"max_new_tokens":2000,"ignore_eos":true}}`
	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the client goes away mid-stream
	if l := waitFile("gateway", "msg=access", "engine_rids=walk-away-"); !strings.Contains(l, "status=499") {
		t.Fatalf("an abandoned request's access line: %q", l)
	}

	// A planned restart's sentinel is expected; a 503 while no decode is
	// routable names its reason.
	if out, err := d.ctl("stop", "decode"); err != nil {
		t.Fatalf("tsd stop decode: %v\n%s", err, out)
	}
	d.waitStatus(func(s snapshot.Snapshot) bool { return roleStatus(t, s, "decode").State == snapshot.StateStopped })
	resp, err = http.Post(base+"/generate", "application/json", strings.NewReader(`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("no decode: HTTP %d", resp.StatusCode)
	}
	if l := waitFile("gateway", "msg=access", "status=503"); !strings.Contains(l, "reason=") || strings.Contains(l, "reason= ") {
		t.Fatalf("a 503's access line names no reason: %q", l)
	}
	dead := waitFile("gateway", "ENGINE_CORE_DEAD", "worker=decode")
	if !strings.Contains(dead, "level=INFO") {
		t.Fatalf("a planned stop's sentinel: %q", dead)
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

// writeFakeProfile writes a PD profile of ts-fake engines (startup spread
// over the milestone phases, so there is progress to show) into a fresh
// directory and returns its path.
func writeFakeProfile(t *testing.T, startup string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "model"), 0o755); err != nil {
		t.Fatal(err)
	}
	prof := fmt.Sprintf(`name: fake-pd
model: ./model
engine:
  command: [%s, serve]
  args: [--fake-startup, %s]
gateway:
  port: %d
roles:
  - name: prefill
    kind: prefill
    gpus: [0]
  - name: decode
    kind: decode
    gpus: [1]
restart:
  backoff: 200ms
  stop_grace: 5s
`, fakeBin, startup, freePort(t))
	p := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(p, []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// inOrder reports whether every part occurs in s, each after the one
// before it.
func inOrder(s string, parts ...string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// While `tsd up -d`, `tsd restart --wait` and `--rolling` wait, off a
// terminal they print one plain line per role per phase change (no
// redraw, no ANSI) until done.
func TestE2EWaitProgressPlain(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	t.Parallel()
	prof := writeFakeProfile(t, "1500ms")
	dir := filepath.Dir(prof)
	name := testDeploymentName(t)
	out, code := ctlIn(t, dir, "up", "-d", "--name", name, "--wait", "60s", "p.yaml")
	t.Cleanup(func() { ctlIn(t, dir, "stop", name) })
	if code != 0 || !inOrder(out, "prefill: starting", "prefill: ready", name+" is up") || !inOrder(out, "decode: starting", "decode: ready", name+" is up") {
		t.Fatalf("tsd up -d: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "\x1b[") || strings.Count(out, "prefill: ready") != 1 {
		t.Fatalf("tsd up -d off a terminal redrew or repeated:\n%q", out)
	}
	out, code = ctlIn(t, dir, "restart", "--wait", "decode")
	if code != 0 || !inOrder(out, "restarting decode", "decode: starting", "decode: ready", "decode is ready again") || strings.Contains(out, "prefill:") {
		t.Fatalf("tsd restart --wait decode: exit %d\n%s", code, out)
	}
	out, code = ctlIn(t, dir, "restart", "--rolling", "prefill")
	if code != 0 || !inOrder(out, "restarting prefill (1/1)", "prefill: starting", "prefill: ready", "prefill ready again", "rolling restart of prefill done") {
		t.Fatalf("tsd restart --rolling prefill: exit %d\n%s", code, out)
	}
	// tsd start --wait shows the start as up -d does and returns once
	// the role is ready.
	if out, code := ctlIn(t, dir, "stop", "decode"); code != 0 {
		t.Fatalf("tsd stop decode: exit %d\n%s", code, out)
	}
	// (Right after the stop it may still be stopping: it starts once stopped.)
	out, code = ctlIn(t, dir, "start", "--wait", "decode")
	if code != 0 || !inOrder(out, "decode: starting", "decode: ready", "decode ready") || strings.Contains(out, "prefill:") {
		t.Fatalf("tsd start --wait decode: exit %d\n%s", code, out)
	}
	if out, code := ctlIn(t, dir, "stop", name); code != 0 {
		t.Fatalf("tsd stop: exit %d\n%s", code, out)
	}
}

package telemetry

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// startTree starts `sh -c script` in its own process group and kills the
// group when the test ends.
func startTree(t testing.TB, script string) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return pid
}

// pollUntil polls until cond holds for a role's tree or the deadline passes.
func pollUntil(t *testing.T, p *ProcPoller, roles []RoleInfo, cond func(map[string]snapshot.ProcStatus) bool) (map[string]snapshot.ProcStatus, map[int]string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs, pidRole, err := p.Poll(roles)
		if err != nil {
			t.Fatal(err)
		}
		if cond(procs) {
			return procs, pidRole
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met; last %+v", procs)
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not synchronisation
	}
}

func TestProcPollerFindsWholeTrees(t *testing.T) {
	t.Parallel()
	// guardian -> engine -> two ranks, like a real role's tree.
	a := startTree(t, `sh -c 'sleep 60 & sleep 60 & wait' & wait`)
	b := startTree(t, `sleep 60 & wait`)
	roles := []RoleInfo{{Name: "prefill", RootPID: a}, {Name: "decode", RootPID: b}, {Name: "stopped", RootPID: 0}, {Name: "gone", RootPID: 1 << 30}}
	p := NewProcPoller("")
	procs, pidRole := pollUntil(t, p, roles, func(m map[string]snapshot.ProcStatus) bool {
		// A forked child is still "sh" until it execs sleep.
		return len(m["prefill"].PIDs) == 4 && len(m["decode"].PIDs) == 2 &&
			comm(m["prefill"].PIDs[2]) == "sleep" && comm(m["prefill"].PIDs[3]) == "sleep"
	})
	for role, root := range map[string]int{"prefill": a, "decode": b} {
		st := procs[role]
		if st.PIDs[0] != root {
			t.Errorf("%s: root %d not first in %v", role, root, st.PIDs)
		}
		if st.RSSBytes == 0 || st.Threads < len(st.PIDs) {
			t.Errorf("%s: rss %d threads %d for %d processes", role, st.RSSBytes, st.Threads, len(st.PIDs))
		}
		for _, pid := range st.PIDs {
			if pidRole[pid] != role {
				t.Errorf("pid %d maps to %q, want %s", pid, pidRole[pid], role)
			}
		}
	}
	// The leaves really are sleeps, children of the inner shell.
	if c := comm(procs["prefill"].PIDs[1]); c != "sh" {
		t.Errorf("engine level is %q, want the inner sh", c)
	}
	if _, ok := procs["stopped"]; ok {
		t.Error("role with no PID reported")
	}
	if _, ok := procs["gone"]; ok {
		t.Error("role whose root is not running reported")
	}
}

func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// CPU percent comes from handles kept across ticks; a fresh handle every
// tick would always read 0.
func TestProcPollerCPUPercentAcrossTicks(t *testing.T) {
	t.Parallel()
	spin := startTree(t, `i=0; while [ $i -lt 100000000 ]; do i=$((i+1)); done`)
	roles := []RoleInfo{{Name: "busy", RootPID: spin}}
	p := NewProcPoller("")
	first, _, err := p.Poll(roles)
	if err != nil {
		t.Fatal(err)
	}
	if first["busy"].CPUPercent != 0 {
		t.Logf("first tick already has CPU %.1f%%", first["busy"].CPUPercent)
	}
	pollUntil(t, p, roles, func(m map[string]snapshot.ProcStatus) bool { return m["busy"].CPUPercent > 1 })
}

// Between full passes the poller re-reads only the trees it knows: a
// forked process joins at the next full pass, an exited one (or a pid
// reused by another process) leaves at once.
func TestProcPollerFullPassEvery(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	proc := func(pid, ppid int, start int) {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%d (p) S %d %d 1 0 -1 0 0 0 0 0 10 10 0 0 20 0 2 0 %d 0 3 0\n", pid, ppid, pid, start)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc(10, 1, 100)
	proc(11, 10, 101)
	p := NewProcPoller(root)
	p.fullEvery = 3
	roles := []RoleInfo{{Name: "decode", RootPID: 10}}
	pids := func() []int {
		t.Helper()
		m, _, err := p.Poll(roles)
		if err != nil {
			t.Fatal(err)
		}
		return m["decode"].PIDs
	}
	if got := pids(); !reflect.DeepEqual(got, []int{10, 11}) { // poll 0: full
		t.Fatalf("poll 0: %v", got)
	}
	proc(12, 10, 102)
	if err := os.RemoveAll(filepath.Join(root, "11")); err != nil {
		t.Fatal(err)
	}
	if got := pids(); !reflect.DeepEqual(got, []int{10}) { // poll 1: known pids only
		t.Fatalf("poll 1: %v, want 11 gone and 12 not yet seen", got)
	}
	if got := pids(); !reflect.DeepEqual(got, []int{10}) {
		t.Fatalf("poll 2: %v", got)
	}
	if got := pids(); !reflect.DeepEqual(got, []int{10, 12}) { // poll 3: full
		t.Fatalf("poll 3: %v, want 12 found", got)
	}
	proc(12, 10, 555) // pid 12 reused by another process
	if got := pids(); !reflect.DeepEqual(got, []int{10}) {
		t.Fatalf("poll 4: %v, want the reused pid dropped", got)
	}
	roles = append(roles, RoleInfo{Name: "prefill", RootPID: 20})
	proc(20, 1, 200)
	m, _, err := p.Poll(roles) // a root not seen before: a full pass at once
	if err != nil || !reflect.DeepEqual(m["prefill"].PIDs, []int{20}) {
		t.Fatalf("new root: %v %v", m, err)
	}
}

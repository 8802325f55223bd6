package telemetry

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
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

// The scan parses stat lines whose command names hold spaces and ')'.
func TestProcScannerParsesHostileNames(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	stat := func(pid int, comm string, ppid int) {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := strconv.Itoa(pid) + " (" + comm + ") S " + strconv.Itoa(ppid) + " 1 1 0 -1 4194560 1 0 0 0 3 4 0 0 20 0 7 0 " + strconv.Itoa(1000+pid) + " 1000 100 0\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stat(1, "init", 0)
	stat(10, "ts serve) S 1 (x", 1)
	stat(11, "python3", 10)
	stat(12, ") )", 11)
	stat(20, "other", 1)
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cpuinfo"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newProcScanner(root)
	if err := s.scan(); err != nil {
		t.Fatal(err)
	}
	if got := s.tree(10); !reflect.DeepEqual(got, []int{10, 11, 12}) {
		t.Errorf("tree(10) = %v", got)
	}
	kids := append([]int(nil), s.kids[1]...)
	sort.Ints(kids)
	if !reflect.DeepEqual(kids, []int{10, 20}) {
		t.Errorf("children of 1 = %v", kids)
	}
	if s.procs[12].start != 1012 || s.procs[12].ppid != 11 || s.procs[12].threads != 7 {
		t.Errorf("entry 12 = %+v", s.procs[12])
	}
	// A cycle (possible when PIDs are reused during a scan) must end.
	stat(30, "a", 31)
	stat(31, "b", 30)
	if err := s.scan(); err != nil {
		t.Fatal(err)
	}
	if got := s.tree(30); !reflect.DeepEqual(got, []int{30, 31}) {
		t.Errorf("tree(30) with a cycle = %v", got)
	}
	if s.tree(99) != nil {
		t.Error("tree of a missing root")
	}
}

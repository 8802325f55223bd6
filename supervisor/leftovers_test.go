package supervisor

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/internal/procfs"
)

// startGroup starts script in a new process group and waits until the
// group has want live members (the shell forks after Start returns). The
// returned channel closes once the shell is reaped.
func startGroup(t *testing.T, script string, want int) (pgid int, reaped <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	pgid = cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	deadline := time.Now().Add(waitLimit)
	for len(groupMembers(pgid)) < want {
		if time.Now().After(deadline) {
			t.Fatalf("group %d has %v, want %d members", pgid, groupMembers(pgid), want)
		}
		time.Sleep(10 * time.Millisecond) // the shell forks its children after Start returns
	}
	return pgid, done
}

// goneDaemon is a pid that no longer runs: the daemon of the records.
func goneDaemon(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

func writeRecord(t *testing.T, dir string, r groupRecord) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if st, ok := procfs.ReadStat("", r.PGID); ok && r.Start == 0 {
		r.Start = st.Start
	}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(filepath.Join(dir, r.Role+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReapLeftovers pins what `tsd ls` counts and `tsd stop NAME` reaps
// of a daemon killed with its guardians: every live process of the
// recorded groups and the recorded guardian (by pid and start time), none
// of a live daemon's records; SIGTERM first, SIGKILL after the grace for
// one that ignores it, all gone within the limit, and the dead daemon's
// records removed.
func TestReapLeftovers(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "groups")
	dead := goneDaemon(t)
	// decode: a launcher and two ranks; one rank ignores SIGTERM.
	// (An ignored signal stays ignored across exec.)
	decode, decodeDone := startGroup(t, `sleep 1000 & sh -c 'trap "" TERM; exec sleep 1000' & wait`, 3)
	writeRecord(t, dir, groupRecord{Role: "decode", PGID: decode, TSDPID: dead, TSDStart: 1})
	// prefill's guardian outlived the kill (its own group, recorded).
	guard, guardDone := startGroup(t, `exec sleep 1000`, 1)
	st, _ := procfs.ReadStat("", guard)
	writeRecord(t, dir, groupRecord{Role: "prefill", PGID: 999999, Start: 1, GuardPID: guard, GuardStart: st.Start, TSDPID: dead, TSDStart: 1})
	// A live daemon's record (this test process) is not a leftover.
	live, liveDone := startGroup(t, `exec sleep 1000`, 1)
	self, _ := procfs.ReadStat("", os.Getpid())
	writeRecord(t, dir, groupRecord{Role: "encode", PGID: live, TSDPID: os.Getpid(), TSDStart: self.Start})

	ls := Leftovers(dir)
	var roles []string
	for _, l := range ls {
		roles = append(roles, l.Role)
		if l.PID == live {
			t.Fatalf("a live daemon's group counted as left over: %+v", ls)
		}
	}
	if len(ls) != 4 || strings.Count(strings.Join(roles, ","), "decode") != 3 || !strings.Contains(strings.Join(roles, ","), "prefill guardian") {
		t.Fatalf("leftovers %+v, want the decode group's 3 processes and prefill's guardian", ls)
	}

	start := time.Now()
	reaped, err := ReapLeftovers(dir, 300*time.Millisecond, ReapLimit)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > ReapLimit {
		t.Fatalf("reaping took %s", took)
	}
	if len(reaped) != 4 {
		t.Fatalf("reaped %+v", reaped)
	}
	for _, ch := range []<-chan struct{}{decodeDone, guardDone} {
		select {
		case <-ch:
		case <-time.After(waitLimit):
			t.Fatal("a reaped process still runs")
		}
	}
	if left := groupMembers(decode); len(left) > 0 {
		t.Fatalf("decode group still has %v", left)
	}
	if len(Leftovers(dir)) != 0 {
		t.Fatalf("leftovers after the reap: %+v", Leftovers(dir))
	}
	// The live daemon's record and group are untouched.
	if _, err := os.Stat(filepath.Join(dir, "encode.json")); err != nil {
		t.Fatalf("the live daemon's record was removed: %v", err)
	}
	for _, r := range []string{"decode.json", "prefill.json"} {
		if _, err := os.Stat(filepath.Join(dir, r)); err == nil {
			t.Fatalf("%s kept after the reap", r)
		}
	}
	select {
	case <-liveDone:
		t.Fatal("the live daemon's engine was killed")
	default:
	}
}

// TestDropStaleRecords: a dead daemon's record naming no live process (its
// guardian cleaned up) is removed; one naming a live process is kept.
func TestDropStaleRecords(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "groups")
	dead := goneDaemon(t)
	writeRecord(t, dir, groupRecord{Role: "prefill", PGID: goneDaemon(t), Start: 1, TSDPID: dead, TSDStart: 1})
	pg, _ := startGroup(t, `exec sleep 1000`, 1)
	writeRecord(t, dir, groupRecord{Role: "decode", PGID: pg, TSDPID: dead, TSDStart: 1})
	DropStaleRecords(dir)
	if _, err := os.Stat(filepath.Join(dir, "prefill.json")); err == nil {
		t.Fatal("a record of nothing was kept")
	}
	if _, err := os.Stat(filepath.Join(dir, "decode.json")); err != nil {
		t.Fatalf("a record of a live leftover was removed: %v", err)
	}
	if n := len(Leftovers(dir)); n != 1 {
		t.Fatalf("%d leftovers, want 1", n)
	}
}

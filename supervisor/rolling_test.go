package supervisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/internal/procfs"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

func replica(name, group, kind, script string) profiles.RolePlan {
	r := shRole(name, kind, script)
	r.Group = name
	if group != "" {
		r.Group = group
	}
	return r
}

// A rolling restart of a replica group restarts one instance at a time:
// never more than one is out of ready, each comes back with a new
// process, and the call returns once the last is ready again.
func TestRollingRestartOneAtATime(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	f := newFixture(t, gw, nil,
		replica("prefill", "", profiles.KindPrefill, twoRanks),
		replica("decode-0", "decode", profiles.KindDecode, twoRanks),
		replica("decode-1", "decode", profiles.KindDecode, twoRanks))
	var pids []int
	for _, n := range []string{"decode-0", "decode-1"} {
		pids = append(pids, f.wait(n, "ready", state(snapshot.StateReady)).PID)
	}
	f.wait("prefill", "ready", state(snapshot.StateReady))
	got, err := f.sup.RollingTargets("decode")
	if err != nil || strings.Join(got, ",") != "decode-0,decode-1" {
		t.Fatalf("targets %v %v", got, err)
	}
	if got, _ := f.sup.RollingTargets(profiles.KindDecode); len(got) != 2 {
		t.Fatalf("kind targets %v", got)
	}
	if _, err := f.sup.RollingTargets("nope"); !errors.Is(err, ErrUnknownRole) {
		t.Fatalf("unknown target: %v", err)
	}

	cur, ch, cancel := f.sup.Subscribe()
	defer cancel()
	var mu sync.Mutex
	worst := 0
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for s := range ch {
			down := 0
			for _, r := range s.Roles {
				if strings.HasPrefix(r.Name, "decode-") && r.State != snapshot.StateReady {
					down++
				}
			}
			mu.Lock()
			worst = max(worst, down)
			mu.Unlock()
		}
	}()
	_ = cur
	var lines []string
	if err := f.sup.RollingRestart(context.Background(), "decode", false, func(l string) { lines = append(lines, l) }); err != nil {
		t.Fatal(err)
	}
	snap := f.sup.Snapshot()
	for i, n := range []string{"decode-0", "decode-1"} {
		r, _ := roleIn(snap, n)
		if r.State != snapshot.StateReady || r.PID == pids[i] || r.Restarts != 1 {
			t.Fatalf("%s after the rolling restart %+v", n, r)
		}
		assertGroupGone(t, pids[i])
	}
	if p, _ := roleIn(snap, "prefill"); p.Restarts != 0 {
		t.Fatalf("prefill restarted too: %+v", p)
	}
	cancel()
	<-watchDone
	mu.Lock()
	defer mu.Unlock()
	if worst > 1 {
		t.Fatalf("%d decodes were out at once", worst)
	}
	if len(lines) != 4 || !strings.Contains(lines[1], "decode-0 ready again") {
		t.Fatalf("progress %q", lines)
	}
}

// An instance that does not come back stops the rollout with an error
// naming it and the instances left alone.
func TestRollingRestartStopsOnFailure(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	marker := filepath.Join(t.TempDir(), "started")
	bad := `if [ -f ` + marker + ` ]; then echo "ValueError: cannot start twice" >&2; exit 3; fi; touch ` + marker + `; echo marker set; ` + twoRanks
	f := newFixture(t, gw, nil,
		replica("decode-0", "decode", profiles.KindDecode, bad),
		replica("decode-1", "decode", profiles.KindDecode, twoRanks))
	f.wait("decode-0", "ready", state(snapshot.StateReady))
	r1 := f.wait("decode-1", "ready", state(snapshot.StateReady))
	// The stub's ranks register once the process is spawned, which can be
	// before its shell ran touch: restarted then, the next run would find
	// no marker, start cleanly and, never registering, wait for good.
	f.waitLine("decode-0", "marker set")
	gw.mu.Lock()
	gw.silent["decode-0"] = true // its next run never registers: it crashes first
	gw.mu.Unlock()
	err := f.sup.RollingRestart(context.Background(), "decode", false, nil)
	if err == nil || !strings.Contains(err.Error(), "stopped at decode-0") || !strings.Contains(err.Error(), "decode-1 not restarted") {
		t.Fatalf("err = %v", err)
	}
	if r, _ := roleIn(f.sup.Snapshot(), "decode-1"); r.PID != r1.PID || r.Restarts != 0 {
		t.Fatalf("decode-1 was touched: %+v", r)
	}
}

// Pins the "tsd and its guardian died together" cleanup: a group
// recorded in the run folder is killed by the next supervisor before it
// starts anything, and reported; a record whose pgid now names another
// process (pid reuse) is left alone.
func TestLeftoverGroupsAreKilledOnStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", `sleep 1000 & sleep 1000 & wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	pg := cmd.Process.Pid
	other := exec.Command("sleep", "1000")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	deadline := time.Now().Add(waitLimit)
	for len(groupMembers(pg)) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the shell forks its children after Start returns
	}
	s := newGroupRecords(RecordDir(&profiles.Plan{RunDir: dir}))
	s.recordGroup(1, "decode", &process{pid: pg}, "")
	// A record for a pgid whose leader has another start time now.
	s.recordGroup(2, "prefill", &process{pid: other.Process.Pid}, "")
	recs := filepath.Join(dir, "groups")
	b, _ := os.ReadFile(filepath.Join(recs, "prefill.json"))
	b = []byte(strings.Replace(string(b), `"start":`, `"start":1`, 1))
	if err := os.WriteFile(filepath.Join(recs, "prefill.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	msg := s.cleanOrphans()
	if !strings.HasPrefix(msg, "killed 3 process(es) left by a previous tsd: decode pid ") || strings.Contains(msg, "prefill") {
		t.Fatalf("report %q", msg)
	}
	select {
	case <-waited:
	case <-time.After(waitLimit):
		t.Fatal("leftover group survived")
	}
	if left := groupMembers(pg); len(left) > 0 {
		t.Fatalf("group %d still has %v", pg, left)
	}
	if st, ok := procfs.ReadStat("", other.Process.Pid); !ok || st.State == 'Z' {
		t.Fatal("a process that only shares a recorded number was killed")
	}
	if ents, _ := os.ReadDir(recs); len(ents) != 0 {
		t.Fatalf("records left: %v", ents)
	}
	if again := s.cleanOrphans(); again != "" {
		t.Fatalf("second clean %q", again)
	}
}

// The control socket's rolling restart streams progress and ends in the
// verdict; now=1 on stop reaches the actor (the in-flight requests are
// aborted at once instead of drained).
func TestControlSocketRollingAndNow(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	f := newFixture(t, gw, nil,
		replica("decode-0", "decode", profiles.KindDecode, twoRanks),
		replica("decode-1", "decode", profiles.KindDecode, twoRanks))
	f.wait("decode-0", "ready", state(snapshot.StateReady))
	f.wait("decode-1", "ready", state(snapshot.StateReady))
	c := NewControlClient(f.sup.Plan().ControlSocket)
	ctx := context.Background()
	var lines []string
	if err := c.RollingRestart(ctx, "decode", false, func(l string) { lines = append(lines, l) }); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 4 || !strings.HasPrefix(lines[3], "decode-1 ready again after ") {
		t.Fatalf("progress %q", lines)
	}
	if err := c.RollingRestart(ctx, "nope", false, nil); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("rolling restart of an unknown target: %v", err)
	}
	gw.setDrain("decode-0", 5)
	if err := c.StopNow(ctx, "decode-0", true); err != nil {
		t.Fatal(err)
	}
	f.wait("decode-0", "stopped", state(snapshot.StateStopped))
	if indexOf(gw.Calls(), "abort decode-0 5") < 0 {
		t.Fatalf("stop --now did not abort: %v", gw.Calls())
	}
}

// Event lines from outside (the gateway's verdicts) reach the Snapshot.
func TestEventFromOutside(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil, shRole("decode", profiles.KindDecode, readyScript))
	f.wait("decode", "ready", state(snapshot.StateReady))
	f.sup.Event("decode", "rank 0 stalled: no output for 30s with 3 requests in flight")
	cur, ch, cancel := f.sup.Subscribe()
	defer cancel()
	deadline := time.After(waitLimit)
	for {
		for _, e := range cur.Events {
			if e.Role == "decode" && strings.HasPrefix(e.Message, "rank 0 stalled") {
				return
			}
		}
		select {
		case cur = <-ch:
		case <-deadline:
			t.Fatalf("event not published: %+v", cur.Events)
		}
	}
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/internal/procfs"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The test binary doubles as the guardian: the supervisor re-executes it
// with TSD_TEST_GUARD=1, as tsd re-executes itself as `tsd _guard`.
func TestMain(m *testing.M) {
	if os.Getenv("TSD_TEST_GUARD") == "1" {
		grace, argv, err := parseGuardArgs(os.Args[1:])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(GuardMain(grace, argv))
	}
	os.Exit(m.Run())
}

func parseGuardArgs(args []string) (time.Duration, []string, error) {
	var grace time.Duration
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--grace":
			d, err := time.ParseDuration(args[i+1])
			if err != nil {
				return 0, nil, err
			}
			grace = d
			i++
		case "--":
			return grace, args[i+1:], nil
		}
	}
	return 0, nil, errors.New("guard: missing -- argv")
}

const waitLimit = 30 * time.Second

func shRole(name, kind, script string) profiles.RolePlan {
	return profiles.RolePlan{
		Name: name, Group: name, Kind: kind, Host: "local", Local: true, TP: 1, DP: 1,
		Argv: []string{"sh", "-c", script},
		Env:  map[string]string{"TSD_TEST_GUARD": "1"},
		Restart: profiles.RestartPlan{
			Policy: PolicyOnFailure, Backoff: profiles.Duration(20 * time.Millisecond), MaxBackoff: profiles.Duration(200 * time.Millisecond),
			ResetAfter: profiles.Duration(time.Hour), BudgetCount: 3, BudgetWindow: profiles.Duration(time.Hour),
			StopGrace: profiles.Duration(2 * time.Second),
		},
	}
}

const readyLine = `echo "[2026-08-22 10:00:00] headless scheduler(s) ready; SMG handshake endpoint=tcp://127.0.0.1:1"`

// A ready engine with two "ranks" in its group, like ts serve's schedulers.
const readyScript = `printf '\033[38;20m[2026-08-22 10:00:00,001] - INFO - Load weight begin. avail mem=78.00 GB (w.py:1)\033[0m\n' >&2; ` +
	readyLine + `; sleep 1000 & sleep 1000 & wait`

type fixture struct {
	t      *testing.T
	sup    *Supervisor
	dir    string
	runErr chan error
	cancel context.CancelFunc
}

func newFixture(t *testing.T, gw Gateway, mod func(*Options), roles ...profiles.RolePlan) *fixture {
	t.Helper()
	dir, err := os.MkdirTemp("", "sv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for i := range roles {
		roles[i].LogFile = filepath.Join(dir, "logs", roles[i].Name+".log")
	}
	plan := &profiles.Plan{Name: "test", RunDir: dir, LogDir: filepath.Join(dir, "logs"),
		ControlSocket: filepath.Join(dir, "tsd.sock"), Roles: roles}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Plan: plan, Gateway: gw, GuardExe: exe, GuardArgs: []string{}, Rand: func() float64 { return 0.5 }}
	if mod != nil {
		mod(&opts)
	}
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
	return f
}

// wait blocks until pred holds for the role, or fails after waitLimit.
func (f *fixture) wait(role, what string, pred func(snapshot.RoleStatus) bool) snapshot.RoleStatus {
	f.t.Helper()
	cur, ch, cancel := f.sup.Subscribe()
	defer cancel()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	last := snapshot.RoleStatus{}
	for {
		for _, r := range cur.Roles {
			if r.Name == role {
				last = r
				if pred(r) {
					return r
				}
			}
		}
		select {
		case s, ok := <-ch:
			if !ok {
				f.t.Fatalf("%s: snapshots ended before %s; last %+v", role, what, last)
			}
			cur = s
		case <-deadline.C:
			f.t.Fatalf("%s: timed out waiting for %s; last state %s (%s)", role, what, last.State, last.Reason)
		}
	}
}

// waitLine blocks until the role's engine printed text as a whole line
// (tsd's own notes, which quote the command line, do not count), or fails
// after waitLimit.
func (f *fixture) waitLine(role, text string) {
	f.t.Helper()
	backlog, batches, cancel, err := f.sup.SubscribeLogs(role)
	if err != nil {
		f.t.Fatal(err)
	}
	defer cancel()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for lines := backlog; ; {
		for _, l := range lines {
			if !l.Note && l.Text == text {
				return
			}
		}
		select {
		case b, ok := <-batches:
			if !ok {
				f.t.Fatalf("%s: logs ended before the line %q", role, text)
			}
			lines = b
		case <-deadline.C:
			f.t.Fatalf("%s: timed out waiting for the line %q", role, text)
		}
	}
}

func state(s string) func(snapshot.RoleStatus) bool {
	return func(r snapshot.RoleStatus) bool { return r.State == s }
}

// shutdown asks Run to finish and waits for it.
func (f *fixture) shutdown() error {
	f.t.Helper()
	f.sup.Shutdown()
	select {
	case err := <-f.runErr:
		f.runErr <- err // for Cleanup
		return err
	case <-time.After(waitLimit):
		f.t.Fatal("Run did not return after Shutdown")
		return nil
	}
}

func assertGroupGone(t *testing.T, pgid int) {
	t.Helper()
	if pgid <= 0 {
		t.Fatalf("no pgid recorded")
	}
	if left := groupMembers(pgid); len(left) > 0 {
		t.Fatalf("process group %d still has %v", pgid, left)
	}
}

func logText(t *testing.T, s *Supervisor, role string) string {
	t.Helper()
	l, err := s.Logs(role)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, x := range l {
		b.WriteString(x.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestReadyFromLogThenShutdown: without a gateway a role is ready when its
// launcher logs the ready line; shutdown leaves no process and no socket.
func TestReadyFromLogThenShutdown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil, shRole("decode", profiles.KindDecode, readyScript))
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	if r.Phase != PhaseReady || r.PID == 0 || !r.Routed {
		t.Fatalf("ready status %+v", r)
	}
	if _, err := os.Stat(f.sup.Plan().ControlSocket); err != nil {
		t.Fatalf("control socket: %v", err)
	}
	if fi, _ := os.Stat(f.sup.Plan().ControlSocket); fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket mode %v", fi.Mode().Perm())
	}
	if err := f.shutdown(); err != nil {
		t.Fatal(err)
	}
	assertGroupGone(t, r.PID)
	if _, err := os.Stat(f.sup.Plan().ControlSocket); !os.IsNotExist(err) {
		t.Fatalf("control socket left behind: %v", err)
	}
	final := f.sup.Snapshot()
	if final.Roles[0].State != snapshot.StateStopped {
		t.Fatalf("final state %s", final.Roles[0].State)
	}
	log, _ := os.ReadFile(f.sup.Plan().Roles[0].LogFile)
	if !strings.Contains(string(log), "Load weight begin") {
		t.Fatalf("log file lacks engine output: %q", log)
	}
}

// stubGW is a gateway whose ranks register as soon as a role's process is
// alive, recording every call in order.
type stubGW struct {
	mu     sync.Mutex
	calls  []string
	ch     chan snapshot.RankEvent
	dp     map[string]int
	silent map[string]bool // roles whose ranks never register
	drain  map[string]int  // in-flight requests per role, as the final gateway counts them for a drain
	views  map[string]snapshot.RoleView
	// drained is what Drain answers (a whole stop's drain).
	drained snapshot.DrainResult
}

func newStubGW() *stubGW {
	return &stubGW{ch: make(chan snapshot.RankEvent, 1024), dp: map[string]int{}, silent: map[string]bool{}, drain: map[string]int{}}
}

func (g *stubGW) record(s string) {
	g.mu.Lock()
	g.calls = append(g.calls, s)
	g.mu.Unlock()
}

func (g *stubGW) Calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.calls...)
}

func (g *stubGW) Bind(context.Context) error { g.record("bind"); return nil }
func (g *stubGW) Serve(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
func (g *stubGW) SubscribeRanks() ([]snapshot.RankEvent, <-chan snapshot.RankEvent, func()) {
	return nil, g.ch, func() {}
}

// setDrain sets how many requests are in flight on role.
func (g *stubGW) setDrain(role string, n int) {
	g.mu.Lock()
	g.drain[role] = n
	g.mu.Unlock()
}

// A view not routed leaves in-flight requests alone (the drain contract);
// AbortRole ends them and says how many.
func (g *stubGW) AbortRole(role, reason string) int {
	g.mu.Lock()
	n := g.drain[role]
	g.drain[role] = 0
	g.mu.Unlock()
	g.record(fmt.Sprintf("abort %s %d", role, n))
	return n
}
func (g *stubGW) DrainCount(role string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.drain[role]
}

// SetRole records each field of the view that changed, as the gateway
// acts on it: stalled, then alive, then routed.
func (g *stubGW) SetRole(role string, v snapshot.RoleView) {
	g.mu.Lock()
	if g.views == nil {
		g.views = map[string]snapshot.RoleView{}
	}
	prev := g.views[role]
	g.views[role] = v
	g.mu.Unlock()
	if v.Stalled != prev.Stalled {
		g.record(fmt.Sprintf("stalled %s %v", role, v.Stalled))
	}
	if v.Alive != prev.Alive {
		g.setAlive(role, v.Alive)
	}
	if v.Routed != prev.Routed {
		g.record(fmt.Sprintf("routed %s %v", role, v.Routed))
	}
}

// setAlive: ranks register as soon as a role's process is alive, and
// disconnect when it dies.
func (g *stubGW) setAlive(role string, alive bool) {
	g.record(fmt.Sprintf("alive %s %v", role, alive))
	g.mu.Lock()
	silent := g.silent[role]
	n := g.dp[role]
	g.mu.Unlock()
	if n == 0 {
		n = 1
	}
	if silent {
		return
	}
	for id := 0; id < n; id++ {
		if alive {
			g.ch <- snapshot.RankEvent{Role: role, Rank: snapshot.RankStatus{Identity: id, DPRank: id, State: snapshot.RankHello}}
			g.ch <- snapshot.RankEvent{Role: role, Rank: snapshot.RankStatus{Identity: id, DPRank: id, State: snapshot.RankRegistered}}
		} else {
			g.ch <- snapshot.RankEvent{Role: role, Rank: snapshot.RankStatus{Identity: id, DPRank: id, State: snapshot.RankDisconnected}}
		}
	}
}
func (g *stubGW) Status() snapshot.GatewayStatus {
	return snapshot.GatewayStatus{URL: "http://stub", Ready: true}
}
func (g *stubGW) InFlight(role string) (int, map[int]int) {
	if role == "decode" {
		return 3, map[int]int{0: 2, 1: 1}
	}
	return 0, nil
}
func (g *stubGW) Shutdown(context.Context) error { g.record("shutdown"); return nil }

// Drain records the drain's limit (its context's deadline, to the
// second) and answers the counts set in drained.
func (g *stubGW) Drain(ctx context.Context) snapshot.DrainResult {
	limit := "none"
	if dl, ok := ctx.Deadline(); ok {
		limit = max(time.Until(dl), 0).Round(time.Second).String()
	}
	g.record("drain " + limit)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.drained
}

func indexOf(calls []string, s string) int {
	for i, c := range calls {
		if c == s {
			return i
		}
	}
	return -1
}

// TestGatewayRanksRestartReadmit: ready comes from rank registrations; a
// restart takes the role out of routing, stops and verifies its group,
// starts it again and re-admits it when its ranks register again.
func TestGatewayRanksRestartReadmit(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	gw.dp["decode"] = 2
	waitForever := `sleep 1000 & sleep 1000 & wait`
	dec := shRole("decode", profiles.KindDecode, waitForever)
	dec.DP = 2
	f := newFixture(t, gw, nil, shRole("prefill", profiles.KindPrefill, waitForever), dec)
	r1 := f.wait("decode", "ready", state(snapshot.StateReady))
	f.wait("prefill", "ready", state(snapshot.StateReady))
	if r1.RanksExpected != 2 || r1.RanksRegistered != 2 || len(r1.Ranks) != 2 || !r1.Routed {
		t.Fatalf("decode ready status %+v", r1)
	}
	f.wait("decode", "in-flight counts per rank", func(r snapshot.RoleStatus) bool {
		return r.InFlight == 3 && len(r.Ranks) == 2 && r.Ranks[0].InFlight == 2 && r.Ranks[1].InFlight == 1
	})
	calls := gw.Calls()
	if indexOf(calls, "bind") != 0 {
		t.Fatalf("gateway not bound first: %v", calls)
	}
	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	r2 := f.wait("decode", "re-admitted with a new pid", func(r snapshot.RoleStatus) bool {
		return r.State == snapshot.StateReady && r.PID != 0 && r.PID != r1.PID
	})
	assertGroupGone(t, r1.PID)
	if r2.Restarts != 1 || !r2.Routed {
		t.Fatalf("after restart %+v", r2)
	}
	calls = gw.Calls()
	off := indexOf(calls, "routed decode false")
	dead := indexOf(calls, "alive decode false")
	var back int = -1
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i] == "routed decode true" {
			back = i
			break
		}
	}
	if off < 0 || dead < off || back < dead {
		t.Fatalf("restart call order wrong: %v", calls)
	}
	if err := f.shutdown(); err != nil {
		t.Fatal(err)
	}
	assertGroupGone(t, r2.PID)
	calls = gw.Calls()
	if sd := indexOf(calls, "shutdown"); sd < 0 || sd > indexOf(calls[back:], "alive decode false")+back {
		t.Fatalf("gateway shutdown should come before engines stop: %v", calls)
	}
}

// TestCrashLoopBacksOffThenFails: a crashing engine is restarted with
// doubling delays and ends failed when the budget is spent, with the reason
// in its status.
func TestCrashLoopBacksOffThenFails(t *testing.T) {
	t.Parallel()
	role := shRole("decode", profiles.KindDecode, `echo "ValueError: bad flag" >&2; exit 3`)
	f := newFixture(t, nil, nil, role)
	r := f.wait("decode", "failed", state(snapshot.StateFailed))
	if !strings.Contains(r.Reason, "exit 3 after") || !strings.Contains(r.Reason, "restart budget spent (3 in 1h)") {
		t.Fatalf("reason %q", r.Reason)
	}
	if r.Restarts != 3 || r.ExitCode == nil || *r.ExitCode != 3 {
		t.Fatalf("status %+v", r)
	}
	var delays []string
	for _, e := range f.sup.Snapshot().Events {
		if i := strings.Index(e.Message, "next try in "); i >= 0 {
			delays = append(delays, e.Message[i+len("next try in "):])
		}
	}
	if fmt.Sprint(delays) != "[20ms 40ms 80ms]" {
		t.Fatalf("backoff delays %v", delays)
	}
	quoted := false
	for _, e := range f.sup.Snapshot().Events {
		quoted = quoted || e.Message == "last error line: ValueError: bad flag"
	}
	if !quoted {
		t.Fatalf("crash events do not quote the error line: %+v", f.sup.Snapshot().Events)
	}
	// A manual restart revives a failed role despite the budget.
	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "restarted after manual restart", func(r snapshot.RoleStatus) bool { return r.Restarts >= 4 })
}

// TestIgnoredSIGTERMIsKilledAfterGrace: a group that ignores SIGTERM gets
// SIGKILL after stop_grace and is verified empty before "stopped".
func TestIgnoredSIGTERMIsKilledAfterGrace(t *testing.T) {
	t.Parallel()
	role := shRole("decode", profiles.KindDecode, `trap '' TERM; `+readyLine+`; sleep 1000 & sleep 1000 & wait`)
	role.Restart.StopGrace = profiles.Duration(300 * time.Millisecond)
	f := newFixture(t, nil, nil, role)
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	if err := f.sup.Stop("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "stopped", state(snapshot.StateStopped))
	assertGroupGone(t, r.PID)
	if log := logText(t, f.sup, "decode"); !strings.Contains(log, "ignored SIGTERM") || !strings.Contains(log, "verified empty") {
		t.Fatalf("log lacks the kill story:\n%s", log)
	}
}

// TestLifelineEOFStopsGroup: when the lifeline's write end goes away (tsd
// died) the guardian tears the group down on its own; when the guardian
// itself is SIGKILLed, tsd's own verification empties the group.
func TestLifelineEOFStopsGroup(t *testing.T) {
	t.Parallel()
	exe, _ := os.Executable()
	ring := newLogRing("x", 100, 1<<20)
	for _, how := range []string{"lifeline", "guardian-killed"} {
		spec := procSpec{Role: "x", Argv: []string{"sh", "-c", `sleep 1000 & sleep 1000 & wait`},
			Env: map[string]string{"TSD_TEST_GUARD": "1"}, Grace: time.Second, GuardExe: exe}
		p, err := startProcess(spec, func(out *os.File) error { return captureStream(out, ring, nil, nil) })
		if err != nil {
			t.Fatal(err)
		}
		if how == "lifeline" {
			p.lifeline.Close()
		} else {
			_ = p.guard.Process.Signal(syscall.SIGKILL)
		}
		select {
		case <-p.done:
		case <-time.After(waitLimit):
			t.Fatalf("%s: process never ended", how)
		}
		if !p.empty {
			t.Fatalf("%s: group not empty: %v", how, p.leftover)
		}
		assertGroupGone(t, p.pid)
	}
}

// TestNoProgressDeadline: a starting role that goes silent is stopped and
// its reason says why.
func TestNoProgressDeadline(t *testing.T) {
	t.Parallel()
	role := shRole("decode", profiles.KindDecode, `echo "Load weight begin. avail mem=1 GB"; exec sleep 1000`)
	role.Restart.Policy = PolicyNo
	f := newFixture(t, nil, func(o *Options) { o.NoProgress = time.Second }, role)
	r := f.wait("decode", "failed", state(snapshot.StateFailed))
	if !strings.Contains(r.Reason, "no progress for 1s (phase: loading weights)") || !strings.Contains(r.Reason, "SIGTERM") {
		t.Fatalf("reason %q", r.Reason)
	}
}

// TestRapidRestartsLeakNothing: 20 restarts in a row leave no process,
// goroutine or file descriptor behind.
func TestRapidRestartsLeakNothing(t *testing.T) {
	// Not parallel: it counts this process's goroutines and fds.
	fds0 := countFDs(t)
	g0 := runtime.NumGoroutine()
	var pids []int
	func() {
		f := newFixture(t, nil, nil, shRole("decode", profiles.KindDecode, readyScript))
		r := f.wait("decode", "ready", state(snapshot.StateReady))
		pids = append(pids, r.PID)
		for i := 1; i <= 20; i++ {
			if err := f.sup.Restart("decode"); err != nil {
				t.Fatal(err)
			}
			r = f.wait("decode", fmt.Sprintf("ready after restart %d", i), func(r snapshot.RoleStatus) bool {
				return r.State == snapshot.StateReady && r.Restarts == i
			})
			pids = append(pids, r.PID)
		}
		if err := f.shutdown(); err != nil {
			t.Fatal(err)
		}
		f.cancel()
	}()
	for _, pid := range pids {
		assertGroupGone(t, pid)
	}
	// Goroutines end asynchronously after Run returns (timers, the HTTP
	// server's conns); wait for the count to settle, with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > g0+2 && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // polling a count that has no event
	}
	if g := runtime.NumGoroutine(); g > g0+2 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("goroutines %d → %d\n%s", g0, g, buf[:n])
	}
	if fds := countFDs(t); fds > fds0 {
		t.Fatalf("file descriptors %d → %d", fds0, fds)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestPreflightListsEveryProblem: Run fails before starting anything and
// names all problems at once.
func TestPreflightListsEveryProblem(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	f := newFixture(t, gw, func(o *Options) {
		o.Preflight = func(*profiles.Plan) []error {
			return []error{errors.New("port 8000 is in use"), errors.New("GPU 3 does not exist")}
		}
	}, shRole("decode", profiles.KindDecode, readyScript))
	var err error
	select {
	case err = <-f.runErr:
		f.runErr <- err
	case <-time.After(waitLimit):
		t.Fatal("Run did not fail")
	}
	var pe *PreflightError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "port 8000 is in use") || !strings.Contains(err.Error(), "GPU 3 does not exist") {
		t.Fatalf("err = %v", err)
	}
	if len(gw.Calls()) != 0 {
		t.Fatalf("gateway touched despite preflight failure: %v", gw.Calls())
	}
}

// TestControlSocket drives status, logs, restart and stop through the
// client the CLI uses.
func TestControlSocket(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil, shRole("decode", profiles.KindDecode, readyScript))
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	c := NewControlClient(f.sup.Plan().ControlSocket)
	ctx := context.Background()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Roles) != 1 || st.Roles[0].Name != "decode" {
		t.Fatalf("status %+v", st)
	}
	var logs strings.Builder
	if err := c.Logs(ctx, "decode", false, &logs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "headless scheduler(s) ready") {
		t.Fatalf("logs: %q", logs.String())
	}
	if err := c.Restart(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("restart of unknown role: %v", err)
	}
	if err := c.Restart(ctx, "decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "ready again", func(s snapshot.RoleStatus) bool { return s.State == snapshot.StateReady && s.PID != r.PID })
	if err := c.Stop(ctx, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.runErr:
		f.runErr <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("tsd stop did not end Run")
	}
}

// TestLogSubscriptionMerged: a merged subscription sees the backlog and
// then batches from every role.
func TestLogSubscriptionMerged(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil,
		shRole("prefill", profiles.KindPrefill, readyScript),
		shRole("decode", profiles.KindDecode, readyScript))
	f.wait("decode", "ready", state(snapshot.StateReady))
	f.wait("prefill", "ready", state(snapshot.StateReady))
	backlog, batches, cancel, err := f.sup.SubscribeLogs("")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	seen := map[string]bool{}
	for _, l := range backlog {
		seen[l.Role] = true
	}
	if !seen["prefill"] || !seen["decode"] {
		t.Fatalf("backlog roles %v", seen)
	}
	saved, err := f.sup.SaveLog("", filepath.Join(f.dir, "saved", "all.log"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(saved)
	if !strings.Contains(string(b), "prefill | ") || !strings.Contains(string(b), "decode | ") || strings.Contains(string(b), "\x1b[") {
		t.Fatalf("merged saved log:\n%s", b)
	}
	if _, err := f.sup.SaveLog("nope", filepath.Join(f.dir, "x.log")); !errors.Is(err, ErrUnknownRole) {
		t.Fatalf("SaveLog of unknown role: %v", err)
	}
	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(waitLimit)
	for {
		select {
		case b := <-batches:
			for _, l := range b {
				if l.Role == "decode" && strings.Contains(l.Text, "headless scheduler(s) ready") {
					return
				}
			}
		case <-deadline:
			t.Fatal("no new decode lines")
		}
	}
}

// TestKillSkipsGrace: Kill (a second Ctrl-C) SIGKILLs every group at once
// instead of waiting out a long stop_grace on an engine ignoring SIGTERM.
func TestKillSkipsGrace(t *testing.T) {
	t.Parallel()
	role := shRole("decode", profiles.KindDecode, `trap '' TERM; `+readyLine+`; sleep 1000 & sleep 1000 & wait`)
	role.Restart.StopGrace = profiles.Duration(time.Hour)
	f := newFixture(t, nil, nil, role)
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	f.sup.Shutdown()
	f.wait("decode", "stopping", state(snapshot.StateStopping))
	f.sup.Kill()
	select {
	case err := <-f.runErr:
		f.runErr <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return after Kill")
	}
	assertGroupGone(t, r.PID)
}

// TestStartErrorFails: an engine command that does not exist is reported
// as a start failure with the reason, and policy no leaves it failed.
func TestStartErrorFails(t *testing.T) {
	t.Parallel()
	role := shRole("decode", profiles.KindDecode, "")
	role.Argv = []string{"/nonexistent/ts", "serve"}
	role.Restart.Policy = PolicyNo
	f := newFixture(t, nil, nil, role)
	r := f.wait("decode", "failed", state(snapshot.StateFailed))
	if !strings.HasPrefix(r.Reason, "start failed: ") || !strings.Contains(r.Reason, "/nonexistent/ts") {
		t.Fatalf("reason %q", r.Reason)
	}
}

// TestLastingStartErrorFailsAtOnce: a command that is not found, or is
// not executable, cannot start however often it is tried, so even policy
// always fails the role at once with the reason instead of spending the
// restart budget (Exit.Lasting, Decide).
func TestLastingStartErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "ts")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, cmd, want string }{
		{"not found", "/nonexistent/ts", "/nonexistent/ts"},
		{"not on PATH", "ts-not-installed-here", "executable file not found"},
		{"not executable", notExec, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			role := shRole("decode", profiles.KindDecode, "")
			role.Argv = []string{tc.cmd, "serve"}
			role.Restart.Policy = PolicyAlways
			f := newFixture(t, nil, nil, role)
			r := f.wait("decode", "failed", state(snapshot.StateFailed))
			if !strings.Contains(r.Reason, tc.want) || !strings.Contains(r.Reason, "trying again cannot fix it") {
				t.Fatalf("reason %q", r.Reason)
			}
			if r.Restarts != 0 {
				t.Fatalf("a lasting start error was restarted %d times", r.Restarts)
			}
		})
	}
}

// TestMissingModelFolderFailsAtOnce: a local engine whose model is a
// folder path that does not exist is not started at all: the role fails
// at once saying which folder is missing.
func TestMissingModelFolderFailsAtOnce(t *testing.T) {
	t.Parallel()
	role := shRole("decode", profiles.KindDecode, readyLine+"; exec sleep 1000")
	role.Restart.Policy = PolicyAlways
	missing := filepath.Join(t.TempDir(), "no-such-model")
	f := newFixture(t, nil, func(o *Options) { o.Plan.Model = missing }, role)
	r := f.wait("decode", "failed", state(snapshot.StateFailed))
	if !strings.Contains(r.Reason, "model folder "+missing+" does not exist") || r.Restarts != 0 {
		t.Fatalf("reason %q, restarts %d", r.Reason, r.Restarts)
	}
}

// TestRemoteRoleFollowsRanks: a role on another host is never spawned; it
// is ready while its ranks are registered and waits again when they drop.
func TestRemoteRoleFollowsRanks(t *testing.T) {
	t.Parallel()
	gw := newStubGW()
	role := shRole("decode", profiles.KindDecode, "exit 99")
	role.Local, role.Host = false, "gpu-box-2"
	f := newFixture(t, gw, nil, role)
	f.wait("decode", "remote", state(snapshot.StateRemote))
	gw.ch <- snapshot.RankEvent{Role: "decode", Rank: snapshot.RankStatus{Identity: 0, State: snapshot.RankRegistered}}
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	if r.PID != 0 || !r.Remote {
		t.Fatalf("remote role %+v", r)
	}
	gw.ch <- snapshot.RankEvent{Role: "decode", Rank: snapshot.RankStatus{Identity: 0, State: snapshot.RankDisconnected}}
	f.wait("decode", "remote again", state(snapshot.StateRemote))
	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	if err := f.shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, c := range gw.Calls() {
		if strings.HasPrefix(c, "alive decode") {
			t.Fatalf("remote role was spawned: %v", gw.Calls())
		}
	}
}

// TestEscapedDescendantsAreKilled: a process the engine moved to its own
// session (out of the process group) is still killed when the role stops,
// because the guardian is the subreaper of everything the engine started.
func TestEscapedDescendantsAreKilled(t *testing.T) {
	t.Parallel()
	role := shRole("decode", profiles.KindDecode, `setsid sh -c 'echo "stray=$$"; exec sleep 1000' & `+readyLine+`; sleep 1000 & wait`)
	f := newFixture(t, nil, nil, role)
	backlog, batches, cancel, err := f.sup.SubscribeLogs("decode")
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	stray := 0
	find := func(ls []LogLine) {
		for _, l := range ls {
			if v, ok := strings.CutPrefix(l.Text, "stray="); ok {
				fmt.Sscan(v, &stray)
			}
		}
	}
	find(backlog)
	deadline := time.After(waitLimit)
	for stray == 0 {
		select {
		case b := <-batches:
			find(b)
		case <-deadline:
			t.Fatal("no stray pid logged")
		}
	}
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	// It printed after setsid, so it has left the engine's group.
	if st, ok := procfs.ReadStat("", stray); !ok || st.PGRP != stray {
		t.Fatalf("stray %d did not leave the group: %+v %v", stray, st, ok)
	}
	if err := f.sup.Stop("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "stopped", state(snapshot.StateStopped))
	if st, ok := procfs.ReadStat("", stray); ok && st.State != 'Z' {
		t.Fatalf("escaped process %d survived the stop (state %c)", stray, st.State)
	}
	if log := logText(t, f.sup, "decode"); !strings.Contains(log, fmt.Sprintf("killed processes that had left process group %d: %d", r.PID, stray)) {
		t.Fatalf("stray kill not logged:\n%s", log)
	}
}

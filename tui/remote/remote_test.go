package remote

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

// The test binary doubles as the guardian, as tsd re-executes itself as
// `tsd _guard --grace D -- argv`.
func TestMain(m *testing.M) {
	if os.Getenv("TSD_TEST_GUARD") == "1" {
		args := os.Args[1:]
		grace := 2 * time.Second
		for i, a := range args {
			if a == "--" {
				os.Exit(supervisor.GuardMain(grace, args[i+1:]))
			}
		}
		os.Exit(2)
	}
	os.Exit(m.Run())
}

const script = `echo "[2026-08-22 10:00:00] headless scheduler(s) ready; SMG handshake endpoint=tcp://127.0.0.1:1"; exec sleep 1000`

// startDaemon runs a supervisor of one shell "decode" role with its
// control socket, until the test ends.
func startDaemon(t *testing.T, name string) (*profiles.Plan, *supervisor.Supervisor, chan error) {
	t.Helper()
	dir := t.TempDir()
	role := profiles.RolePlan{
		Name: "decode", Group: "decode", Kind: profiles.KindDecode, Host: "local", Local: true, TP: 1, DP: 1,
		Argv: []string{"sh", "-c", script}, Env: map[string]string{"TSD_TEST_GUARD": "1"},
		LogFile: filepath.Join(dir, "logs", "decode.log"),
		Restart: profiles.RestartPlan{Policy: "on-failure", Backoff: profiles.Duration(20 * time.Millisecond),
			MaxBackoff: profiles.Duration(time.Second), ResetAfter: profiles.Duration(time.Hour), BudgetCount: 3,
			BudgetWindow: profiles.Duration(time.Hour), StopGrace: profiles.Duration(2 * time.Second)},
	}
	// A short socket path: t.TempDir() under a long TMPDIR may pass the
	// 107-byte unix socket limit.
	sockDir, err := os.MkdirTemp("", "rb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	plan := &profiles.Plan{Name: name, RunDir: dir, LogDir: filepath.Join(dir, "logs"),
		ControlSocket: filepath.Join(sockDir, "tsd.sock"), Roles: []profiles.RolePlan{role}}
	exe, _ := os.Executable()
	sup, err := supervisor.New(supervisor.Options{Plan: plan, GuardExe: exe, GuardArgs: []string{},
		TestRequest: func(context.Context) (string, time.Duration, error) { return "pong", time.Millisecond, nil }})
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- sup.Run(context.Background()) }()
	t.Cleanup(func() {
		sup.Shutdown()
		<-runErr
	})
	select {
	case <-sup.Started():
	case err := <-runErr:
		t.Fatal(err)
	}
	return plan, sup, runErr
}

// TestRemoteBackend drives a real supervisor only through the remote
// backend: the stream follows a restart, logs arrive with their notes,
// save-log writes the file, and StopDeployment ends the daemon's Run.
func TestRemoteBackend(t *testing.T) {
	t.Parallel()
	plan, _, runErr := startDaemon(t, "remote-test")
	dir := plan.RunDir
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Dial(ctx, plan.ControlSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	cur, snaps, unsub := b.Subscribe()
	defer unsub()
	// The first snapshot brings the daemon's trend rings; the backend
	// keeps none of it.
	if cur.History == nil || cur.History.PeriodMS != 1000 || b.Snapshot().History != nil {
		t.Fatalf("first snapshot's history %+v", cur.History)
	}
	waitRole := func(what string, pred func(snapshot.RoleStatus) bool) snapshot.RoleStatus {
		t.Helper()
		for {
			select {
			case s, ok := <-snaps:
				if !ok {
					t.Fatalf("stream ended waiting for %s", what)
				}
				if len(s.Roles) == 1 && pred(s.Roles[0]) {
					return s.Roles[0]
				}
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	ready := func(r snapshot.RoleStatus) bool { return r.State == snapshot.StateReady }
	// The first snapshot may already be ready; a restart makes a change
	// that must arrive either way.
	if r := b.Snapshot(); len(r.Roles) != 1 {
		t.Fatalf("first snapshot %+v", r)
	}
	first := waitRoleOrNow(t, b, snaps, ctx, ready)
	backlog, lines, unlog, err := b.SubscribeLogs("decode")
	if err != nil {
		t.Fatal(err)
	}
	defer unlog()
	if len(backlog) == 0 {
		t.Fatal("empty backlog")
	}
	if err := b.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	waitRole("ready after restart", func(r snapshot.RoleStatus) bool { return ready(r) && r.PID != first.PID })
	for note := false; !note; {
		select {
		case bt := <-lines:
			for _, l := range bt {
				note = note || (l.Note && strings.Contains(l.Text, "restart"))
			}
		case <-ctx.Done():
			t.Fatal("no restart note in the remote log stream")
		}
	}
	if err := b.Restart("nope"); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("restart nope: %v", err)
	}
	// --now through the socket: the role comes back without a drain.
	second := waitRoleOrNow(t, b, snaps, ctx, ready)
	if err := b.RestartNow("decode", true); err != nil {
		t.Fatal(err)
	}
	waitRole("ready after restart --now", func(r snapshot.RoleStatus) bool { return ready(r) && r.PID != second.PID })
	if spec, err := b.Describe("decode"); err != nil || spec.Kind != profiles.KindDecode || len(spec.Argv) != 3 {
		t.Fatalf("describe: %+v %v", spec, err)
	}
	// A read-only backend refuses every control call before the daemon.
	ro, err := Dial(ctx, plan.ControlSocket)
	if err != nil {
		t.Fatal(err)
	}
	ro.SetReadOnly()
	for what, call := range map[string]func() error{
		"restart":     func() error { return ro.Restart("decode") },
		"restart now": func() error { return ro.RestartNow("decode", true) },
		"stop":        func() error { return ro.StopNow("decode", false) },
		"start":       func() error { return ro.Start("decode") },
		"rolling":     func() error { return ro.RollingRestart(ctx, "decode", false, nil) },
		"stop all":    ro.StopDeployment,
	} {
		if err := call(); !errors.Is(err, ErrReadOnly) {
			t.Errorf("read-only %s: %v", what, err)
		}
	}
	if _, err := ro.Describe("decode"); err != nil {
		t.Errorf("read-only describe: %v", err)
	}
	ro.Close()
	saved, err := b.SaveLog("decode", filepath.Join(dir, "saved.log"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(saved); err != nil {
		t.Fatal(err)
	}
	if reply, _, err := b.TestRequest(ctx); err != nil || reply != "pong" {
		t.Fatalf("test request %q %v", reply, err)
	}
	if err := b.StopDeployment(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-runErr:
		runErr <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("StopDeployment did not end Run")
	}
	for range snaps { // the stream ends with the daemon
	}
	if _, err := Dial(ctx, plan.ControlSocket); err == nil {
		t.Fatal("Dial of a stopped daemon succeeded")
	}
}

// waitRoleOrNow returns the role once pred holds, looking at the newest
// snapshot first.
func waitRoleOrNow(t *testing.T, b *Backend, snaps <-chan snapshot.Snapshot, ctx context.Context, pred func(snapshot.RoleStatus) bool) snapshot.RoleStatus {
	t.Helper()
	if s := b.Snapshot(); len(s.Roles) == 1 && pred(s.Roles[0]) {
		return s.Roles[0]
	}
	for {
		select {
		case s, ok := <-snaps:
			if !ok {
				t.Fatal("stream ended")
			}
			if len(s.Roles) == 1 && pred(s.Roles[0]) {
				return s.Roles[0]
			}
		case <-ctx.Done():
			t.Fatal("timed out")
		}
	}
}

// :ctx through the remote backend lists the registry's deployments and
// switches to one (a backend of its own, read-only if this one is); K
// reaches the role's process group through the socket; a read-only
// backend refuses the signal and the apply.
func TestRemoteSwitchAndSignal(t *testing.T) {
	t.Parallel()
	plan, sup, _ := startDaemon(t, "remote-switch")
	other, _, _ := startDaemon(t, "remote-other")
	reg := t.TempDir()
	r, err := daemons.Open(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*profiles.Plan{plan, other} {
		if err := r.Add(daemons.Entry{Name: p.Name, Socket: p.ControlSocket, PID: os.Getpid()}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Dial(ctx, plan.ControlSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.UseRegistry(reg)
	names, err := b.Deployments()
	if err != nil || strings.Join(names, " ") != "remote-other remote-switch" {
		t.Fatalf("deployments %v, %v", names, err)
	}
	nb, err := b.Switch(ctx, "remote-other")
	if err != nil {
		t.Fatal(err)
	}
	defer nb.(*Backend).Close()
	if cur, _, unsub := nb.Subscribe(); cur.Name != "remote-other" {
		t.Fatalf("switched to %q", cur.Name)
	} else {
		unsub()
	}
	if _, err := b.Switch(ctx, "nope"); err == nil || !strings.Contains(err.Error(), `no running deployment named "nope"`) {
		t.Fatalf("switch to nope: %v", err)
	}
	cur, snaps, unsub := sup.Subscribe()
	defer unsub()
	for len(cur.Roles) != 1 || cur.Roles[0].State != snapshot.StateReady {
		select {
		case cur = <-snaps:
		case <-ctx.Done():
			t.Fatal("decode never ready")
		}
	}
	if err := b.Signal("decode", "CONT"); err != nil {
		t.Fatalf("signal: %v", err)
	}
	if _, err := b.PlanApply(ctx, ""); err == nil || !strings.Contains(err.Error(), "plan file") {
		t.Fatalf("apply of a plan-file deployment: %v", err)
	}
	b.SetReadOnly()
	if err := b.Signal("decode", "TERM"); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only signal: %v", err)
	}
	if err := b.Apply(ctx, "", "x", nil); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only apply: %v", err)
	}
	ro, err := b.Switch(ctx, "remote-other")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.(*Backend).Close()
	if err := ro.(*Backend).Signal("decode", "TERM"); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a switch from a read-only dashboard is not read-only: %v", err)
	}
}

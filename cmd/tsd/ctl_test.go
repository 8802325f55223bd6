package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// TestRenderStatus: the plain `tsd status` table shows every role with its
// state, phase, ranks, restarts and reason.
func TestRenderStatus(t *testing.T) {
	now := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	code := 137
	s := snapshot.Snapshot{
		Name:    "qwen-pd",
		Gateway: snapshot.GatewayStatus{URL: "http://127.0.0.1:8000", Mode: "pd", Ready: true},
		Roles: []snapshot.RoleStatus{
			{Name: "prefill", Kind: "prefill", State: "ready", Phase: "ready", PID: 4242, StartedAt: now.Add(-90 * time.Second), RanksExpected: 1, RanksRegistered: 1},
			{Name: "decode", Kind: "decode", State: "backoff", Restarts: 2, ExitCode: &code, RanksExpected: 2,
				Reason: "exit 137 (SIGKILL) after 12m; restart 2/5 in 10m; next try in 4s"},
		},
	}
	var b strings.Builder
	if err := renderStatus(&b, s, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"qwen-pd — gateway http://127.0.0.1:8000 (pd, ready)",
		"ROLE", "REASON",
		"prefill  prefill  ready    ready  1/1    4242  0         1m30s",
		"decode   decode   backoff  -      0/2    -     2         -      exit 137 (SIGKILL) after 12m; restart 2/5 in 10m; next try in 4s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
}

// TestControlTargetDefault: without PROFILE or --socket the verbs use
// .tsd/run/tsd.sock under the current directory, and say so when absent.
func TestControlTargetDefault(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if _, err := (ctlTarget{}).resolve(""); err == nil || !strings.Contains(err.Error(), ".tsd/run/tsd.sock does not exist") {
		t.Fatalf("missing socket: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".tsd", "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tsd", "run", "tsd.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := (ctlTarget{}).resolve("")
	if err != nil || !strings.HasSuffix(got, "/.tsd/run/tsd.sock") || !filepath.IsAbs(got) {
		t.Fatalf("resolve = %q, %v", got, err)
	}
	if got, _ := (ctlTarget{Socket: "/x/y.sock"}).resolve(""); got != "/x/y.sock" {
		t.Fatalf("--socket ignored: %q", got)
	}
	if !isProfileArg("p.yaml") || !isProfileArg("p.yml") || isProfileArg("decode") {
		t.Fatal("isProfileArg")
	}
}

// TestRenderStatusDrainAndStall: a draining role says how many requests
// are left and for how long; a stalled one says why.
func TestRenderStatusDrainAndStall(t *testing.T) {
	now := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	s := snapshot.Snapshot{
		Name: "qwen-pd",
		Roles: []snapshot.RoleStatus{
			{Name: "decode-0", Kind: "decode", State: snapshot.StateDraining, PID: 4242, Reason: "restart requested",
				DrainInFlight: 3, DrainDeadline: now.Add(12 * time.Second)},
			{Name: "decode-1", Kind: "decode", State: snapshot.StateStalled, PID: 4343,
				Reason: "process 4344 (ts-fake) stopped (state T: SIGSTOP or a debugger)"},
		},
	}
	var b strings.Builder
	if err := renderStatus(&b, s, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"draining", "3 in flight, 12s left; restart requested",
		"stalled", "process 4344 (ts-fake) stopped (state T: SIGSTOP or a debugger)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
}

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// TestRenderStatus: the plain `tsd status` table shows every role with its
// state, phase, ranks, restarts and reason.
func TestRenderStatus(t *testing.T) {
	now := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	code := 137
	s := snapshot.Snapshot{
		Name: "qwen-pd", ProfileRevision: "3f2a9c0d1e4b",
		Gateway: snapshot.GatewayStatus{URL: "http://127.0.0.1:8000", Mode: "pd", Ready: true, ReqPerSec: 12.5, TokPerSec: 1830, InFlight: 9,
			Requests: 4211, Errors: 3, ClientErrors: 5, TTFTp50: 84300 * time.Microsecond, TTFTp99: 412 * time.Millisecond,
			ITLp50: 11200 * time.Microsecond, ITLp99: 31 * time.Millisecond,
			Roles: []snapshot.RoleTraffic{{Role: "gateway", ClientErrors: 5}, {Role: "prefill", ReqPerS: 12.5, Errors: 1}}},
		Roles: []snapshot.RoleStatus{
			{Name: "prefill", Kind: "prefill", State: "ready", Phase: "ready", PID: 4242, StartedAt: now.Add(-90 * time.Second), RanksExpected: 1, RanksRegistered: 1, InFlight: 2},
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
		"  profile revision 3f2a9c0d1e4b",
		"  traffic: 12.5 req/s, 1830 tok/s, 9 in flight; since start 4211 requests, 3 errors, 5 refused (4xx); TTFT p50 84.3 ms p99 412 ms; ITL p50 11.2 ms p99 31.0 ms",
		"ROLE", "INFL  REQ/S  ERR", "REASON",
		"prefill  prefill  ready    ready  1/1    4242  0         1m30s  2     12.5   1    -     -        ",
		"decode   decode   backoff  -      0/2    -     2         -      -     -      -    -     -        exit 137 (SIGKILL) after 12m; restart 2/5 in 10m; next try in 4s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
}

// TestControlTargetDefault: without a target or --socket the verbs use
// .tsd/run/tsd.sock under the current directory, else the only registered
// deployment, and exit 3 with one line when nothing runs.
func TestControlTargetDefault(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	// Isolated: this test is about an empty registry, not the user's.
	t.Setenv(daemons.EnvDir, filepath.Join(dir, "reg"))
	_, err := (ctlTarget{}).resolve("")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitNotRunning || !strings.Contains(ee.msg, "no tsd deployment is running") || strings.Contains(ee.msg, "\n") {
		t.Fatalf("nothing running: %v", err)
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

// TestRenderStatusGPUs: the human status shows each role's GPUs and the
// GPU table its help promises.
func TestRenderStatusGPUs(t *testing.T) {
	now := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	s := snapshot.Snapshot{
		Name:    "demo",
		GPUInfo: snapshot.GPUPanelStatus{Provider: "fake", Simulated: true},
		Roles:   []snapshot.RoleStatus{{Name: "decode", Kind: "decode", State: "ready", GPUs: []string{"2", "3"}, GPUMemB: 3 << 30}},
		GPUs:    []snapshot.GPUStatus{{Index: 2, Name: "H200", UtilPct: 55, MemUsedB: 3 << 30, MemTotalB: 141 << 30, PowerW: 397, TempC: 54, Roles: []string{"decode"}}},
	}
	var b strings.Builder
	if err := renderStatus(&b, s, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2,3", "3.0 GiB", "GPUs (fake, simulated)", "2    H200  55%   3.0 GiB / 141.0 GiB  397 W  54°C  decode"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}

// TestParseSince pins --since: a duration back from now, or a time.
func TestParseSince(t *testing.T) {
	now := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	if got, err := parseSince("10m", now); err != nil || !got.Equal(now.Add(-10*time.Minute)) {
		t.Fatalf("10m: %v %v", got, err)
	}
	if got, err := parseSince("2026-08-22T09:00:00Z", now); err != nil || !got.Equal(now.Add(-time.Hour)) {
		t.Fatalf("rfc3339: %v %v", got, err)
	}
	for _, bad := range []string{"-1m", "yesterday"} {
		if _, err := parseSince(bad, now); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
}

// TestLogPrinter: no ANSI off a terminal, times and role prefixes on demand.
func TestLogPrinter(t *testing.T) {
	at := time.Date(2026, 8, 22, 10, 0, 0, 0, time.Local)
	var b strings.Builder
	p := logPrinter{w: &b, role: true, times: true}
	if err := p.print([]snapshot.LogLine{{Time: at, Role: "decode", Text: "\x1b[31mred\x1b[0m"}}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "2026-08-22T10:00:00.000 decode | red\n" {
		t.Fatalf("printed %q", got)
	}
}

// TestUsageHint: a bad command line is two lines naming the problem and
// where help is (not the whole usage).
func TestUsageHint(t *testing.T) {
	var c cli
	k, err := newParser(&c)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"frobnicate"}, {"status", "--bogus"}} {
		_, err := k.Parse(args)
		if err == nil {
			t.Fatalf("%v parsed", args)
		}
		h := usageHint(err)
		if strings.Count(h, "\n") != 1 || !strings.Contains(h, "--help") {
			t.Fatalf("%v: hint %q", args, h)
		}
	}
}

// TestCompletionScripts: each shell's script names every visible verb and
// no hidden one.
func TestCompletionScripts(t *testing.T) {
	var c cli
	k, err := newParser(&c)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		var b strings.Builder
		if err := writeCompletion(&b, sh, k.Model); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"up", "attach", "ls", "status", "restart", "start", "stop", "logs", "detach", "stop-on-quit"} {
			if !strings.Contains(b.String(), v) {
				t.Errorf("%s completion lacks %s", sh, v)
			}
		}
		if strings.Contains(b.String(), "_guard") || strings.Contains(b.String(), "status-fd") {
			t.Errorf("%s completion shows hidden verbs or flags", sh)
		}
	}
}

// TestPlanPorts: every TCP port of a plan is claimed in the registry:
// gateway, handshakes, bootstraps, tcp workers and dist-init clusters.
func TestPlanPorts(t *testing.T) {
	p := &profiles.Plan{
		Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:8000", Workers: []profiles.WorkerPlan{
			{URL: "ipc:///run/x", Handshake: "tcp://127.0.0.1:21000", Bootstrap: "127.0.0.1:8998"},
			{URL: "tcp://127.0.0.1:9100", Handshake: "tcp://127.0.0.1:21001"},
		}},
		Roles: []profiles.RolePlan{{PortCluster: []int{12000, 12001}, BootstrapPort: 8998,
			KVEvents: &profiles.KVEventsPlan{Port: 9200, ReplayPort: 9202, Publish: []string{"a", "b"}, Replay: []string{"c", "d"}}}},
	}
	got := map[int]bool{}
	for _, n := range planPorts(p) {
		got[n] = true
	}
	for _, want := range []int{8000, 21000, 8998, 9100, 21001, 12000, 12001, 9200, 9201, 9202, 9203} {
		if !got[want] {
			t.Errorf("port %d not claimed (%v)", want, got)
		}
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

// TestRenderStatusKVAbsent: a prefill whose KV events kv_aware cannot
// follow says so in `tsd status`, as its JSON does.
func TestRenderStatusKVAbsent(t *testing.T) {
	s := snapshot.Snapshot{Name: "kv", Gateway: snapshot.GatewayStatus{URL: "http://127.0.0.1:8000", Roles: []snapshot.RoleTraffic{
		{Role: "prefill", KVEvents: snapshot.KVEventsAbsent, KVNote: "kv events absent: routing by cache_aware (rank 0: publisher not connected)"},
		{Role: "prefill-1", KVEvents: snapshot.KVEventsLive},
	}}}
	var b strings.Builder
	if err := renderStatus(&b, s, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  prefill: kv events absent: routing by cache_aware (rank 0: publisher not connected)\n") || strings.Contains(b.String(), "prefill-1:") {
		t.Fatalf("status:\n%s", b.String())
	}
}

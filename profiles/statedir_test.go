package profiles

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each deployment keeps its state in a folder of its own by name, so two
// profiles of one folder plan different sockets and log files; a name
// that is not a safe path component is made one.
func TestStateDir(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"demo", "/p/.tsd/demo"},
		{"demo-ascend", "/p/.tsd/demo-ascend"},
		{"qwen3.8b_pd", "/p/.tsd/qwen3.8b_pd"},
		{"a/b", "/p/.tsd/a_b"},
		{"my demo", "/p/.tsd/my_demo"},
		{"..", "/p/.tsd/_.."},
		{".", "/p/.tsd/_."},
		{"", "/p/.tsd/_"},
	} {
		if got := StateDir("/p", tc.name); got != tc.want {
			t.Errorf("StateDir(/p, %q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

const stateSrc = `model: ./m
roles:
  - {name: prefill, kind: prefill, gpus: [0]}
  - {name: decode, kind: decode, gpus: [1]}
`

// Where a plan's state goes: the profile's own state folder by default,
// the name tsd up --name gives, the legacy shared folder while an earlier
// tsd's daemon runs there, a running deployment's folders for tsd apply,
// and what the profile writes above all of them.
func TestPlanStateDirs(t *testing.T) {
	for _, tc := range []struct {
		what, file, extra string
		facts             HostFacts
		run, log          string
	}{
		{what: "default: by the profile's name", file: "/srv/a.yaml", run: "/srv/.tsd/a/run", log: "/srv/.tsd/a/logs"},
		{what: "name: key", file: "/srv/a.yaml", extra: "name: alpha\n", run: "/srv/.tsd/alpha/run", log: "/srv/.tsd/alpha/logs"},
		{what: "tsd up --name", file: "/srv/a.yaml", facts: HostFacts{Name: "a2"}, run: "/srv/.tsd/a2/run", log: "/srv/.tsd/a2/logs"},
		{what: "an earlier tsd's daemon runs there", file: "/srv/a.yaml", facts: HostFacts{StateDir: LegacyState("/srv")}, run: "/srv/.tsd/run", log: "/srv/.tsd/logs"},
		{what: "set by hand", file: "/srv/a.yaml", extra: "run_dir: r\nlog_dir: /var/log/a\n", facts: HostFacts{Name: "x"}, run: "/srv/r", log: "/var/log/a"},
		{what: "apply keeps the running folders", file: "/srv/a.yaml", extra: "name: renamed\n",
			facts: HostFacts{Running: &Plan{RunDir: "/srv/.tsd/a/run", LogDir: "/srv/.tsd/a/logs", ControlSocket: "/srv/.tsd/a/run/tsd.sock"}},
			run:   "/srv/.tsd/a/run", log: "/srv/.tsd/a/logs"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			p, errs := Parse(tc.file, []byte(tc.extra+stateSrc))
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			plan, errs := MakePlan(p, tc.facts)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if plan.RunDir != tc.run || plan.LogDir != tc.log || plan.ControlSocket != tc.run+"/tsd.sock" || plan.Gateway.LogFile != tc.log+"/gateway.log" {
				t.Fatalf("run %q log %q socket %q gateway log %q; want %q and %q", plan.RunDir, plan.LogDir, plan.ControlSocket, plan.Gateway.LogFile, tc.run, tc.log)
			}
		})
	}
}

// tsd up --port serves the gateway on another port than gateway.port
// (make demo DEMO_PORT=…), reserved like the profile's.
func TestPlanGatewayPortFact(t *testing.T) {
	p, errs := Parse("/srv/a.yaml", []byte("gateway: {port: 8000}\n"+stateSrc))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	plan, errs := MakePlan(p, HostFacts{GatewayPort: 8123})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if plan.Gateway.Listen != "127.0.0.1:8123" || plan.Gateway.URL != "http://127.0.0.1:8123" {
		t.Fatalf("gateway %s %s, want port 8123", plan.Gateway.Listen, plan.Gateway.URL)
	}
	p2, _ := Parse("/srv/a.yaml", []byte("roles:\n  - {name: prefill, kind: prefill, gpus: [0], dist_init_port: 8120}\n  - {name: decode, kind: decode, gpus: [1]}\nmodel: ./m\n"))
	if _, errs := MakePlan(p2, HostFacts{GatewayPort: 8123}); len(errs) == 0 {
		t.Fatal("a dist-init cluster over the --port gateway port was not refused")
	}
}

// A YAML syntax error gets a hint after the parser's words: a tab in the
// indentation names its line, an error about structure points at the
// indentation; an unclosed quote needs no hint.
func TestYAMLSyntaxHints(t *testing.T) {
	for _, tc := range []struct{ src, want, not string }{
		{"model: x\nroles:\n\t- name: prefill\n", "line 3 is indented with a tab; YAML indents with spaces only", ""},
		{"model: x\nroles:\n  - name: prefill\n   gpus: [0]\n", "hint: check the indentation near line 4", ""},
		{"model: \"x\nroles: []\n", "double-quoted", "hint"},
	} {
		_, errs := Parse("/p/bad.yaml", []byte(tc.src))
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) || tc.not != "" && strings.Contains(errs[0].Error(), tc.not) {
			t.Errorf("%q: %v, want %q", tc.src, errs, tc.want)
		}
	}
}

// A port that only TIME_WAIT sockets hold (a connection that closed
// without SO_REUSEADDR leaves them, and they refuse a new bind) is said
// to be so, not just "in use".
func TestPortHolderTimeWait(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	const head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	row := func(port int, state string) string {
		return fmt.Sprintf("   0: 0100007F:%04X 0100007F:9C40 %s 00000000:00000000 00:00000000 00000000  1000        0 0 1 0000000000000000 20 4 30 10 -1\n", port, state)
	}
	table := head + row(12600, "06") + row(12600, "06") + row(12601, "06") + row(12601, "01")
	if err := os.WriteFile(filepath.Join(proc, "net", "tcp"), []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := portHolderText(proc, 12600); !strings.Contains(got, "only 2 socket(s) in TIME_WAIT") || !strings.Contains(got, "within 60 s") {
		t.Errorf("port 12600: %q", got)
	}
	if got := portHolderText(proc, 12601); got != "" {
		t.Errorf("port 12601 (an established socket too): %q, want nothing said", got)
	}
	if got := portHolderText(proc, 12602); got != "" {
		t.Errorf("port 12602 (no socket): %q", got)
	}
}

// Log rotation is a profile setting: 100 MiB × 3 unless log_max_mb and
// log_keep say otherwise, carried in the plan to every log file.
func TestPlanLogRotation(t *testing.T) {
	for _, tc := range []struct {
		extra     string
		max, keep int
	}{{"", 100, 3}, {"log_max_mb: 10\nlog_keep: 7\n", 10, 7}} {
		p, errs := Parse("/srv/a.yaml", []byte(tc.extra+stateSrc))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		plan, _ := MakePlan(p, HostFacts{})
		if plan.LogMaxMB != tc.max || plan.LogKeep != tc.keep {
			t.Errorf("%q: %d MiB × %d, want %d × %d", tc.extra, plan.LogMaxMB, plan.LogKeep, tc.max, tc.keep)
		}
	}
	if _, errs := Parse("/srv/a.yaml", []byte("log_keep: 0\n"+stateSrc)); len(errs) == 0 {
		t.Error("log_keep: 0 accepted")
	}
}

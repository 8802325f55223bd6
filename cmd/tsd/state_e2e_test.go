package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// writePDProfile writes a PD profile of ts-fake engines named file into
// dir, its gateway on its own port, and returns the gateway's URL.
func writePDProfile(t *testing.T, dir, file string) string {
	t.Helper()
	port := freePort(t)
	prof := fmt.Sprintf(`model: ./model
engine:
  command: [%s, serve]
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
  stop_grace: 5s
`, fakeBin, port)
	if err := os.WriteFile(filepath.Join(dir, file), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// Two profiles of one folder run side by side: each deployment keeps its
// control socket, ipc sockets and logs in a state folder of its own by
// name (.tsd/NAME), tsd plan of each shows its own log files, both
// serve, and a bare control verb in the folder names both rather than
// picking one.
func TestE2ETwoProfilesOneFolder(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "model"), 0o755); err != nil {
		t.Fatal(err)
	}
	name := testDeploymentName(t)
	names := map[string]string{"a.yaml": name + "-a", "b.yaml": name + "-b"}
	bases := map[string]string{}
	for _, f := range []string{"a.yaml", "b.yaml"} {
		bases[f] = writePDProfile(t, dir, f)
	}
	plans := map[string]profiles.Plan{}
	for f, n := range names {
		js, code := ctlIn(t, dir, "plan", "--json", "--name", n, f)
		var p profiles.Plan
		if code != 0 || json.Unmarshal([]byte(js), &p) != nil {
			t.Fatalf("tsd plan --json %s: exit %d\n%s", f, code, js)
		}
		state := filepath.Join(dir, ".tsd", n)
		if p.RunDir != filepath.Join(state, "run") || p.LogDir != filepath.Join(state, "logs") || p.Gateway.LogFile != filepath.Join(state, "logs", "gateway.log") {
			t.Fatalf("tsd plan %s: run %s, logs %s, gateway log %s; want them under %s", f, p.RunDir, p.LogDir, p.Gateway.LogFile, state)
		}
		plans[f] = p
	}
	for _, f := range []string{"a.yaml", "b.yaml"} {
		out, code := ctlIn(t, dir, "up", "-d", "--name", names[f], "--wait", "90s", f)
		n := names[f]
		t.Cleanup(func() { ctlIn(t, dir, "stop", "--now", n) })
		if code != 0 || !strings.Contains(out, n+" is up") {
			t.Fatalf("tsd up -d %s beside the other: exit %d\n%s", f, code, out)
		}
	}
	// tsd plan of a running profile says nothing of the ports its own
	// deployment holds, and plans what runs.
	for f, n := range names {
		out, code := ctlIn(t, dir, "plan", "--name", n, f)
		if code != 0 || strings.Contains(out, "in use") {
			t.Fatalf("tsd plan %s while it runs: exit %d\n%s", f, code, out)
		}
	}
	for f, base := range bases {
		generate(t, base)
		if _, err := os.Stat(plans[f].ControlSocket); err != nil {
			t.Fatalf("%s: its control socket: %v", f, err)
		}
		if _, err := os.Stat(filepath.Join(plans[f].LogDir, "decode.log")); err != nil {
			t.Fatalf("%s: its decode log: %v", f, err)
		}
	}
	if out, code := ctlIn(t, dir, "stop"); code != 2 || !strings.Contains(out, "tsd stop "+names["a.yaml"]) || !strings.Contains(out, "tsd stop "+names["b.yaml"]) {
		t.Fatalf("a bare tsd stop with two deployments here: exit %d\n%s", code, out)
	}
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if out, code := ctlIn(t, dir, "stop", names[f]); code != 0 || !strings.Contains(out, "stopped "+names[f]) {
			t.Fatalf("tsd stop %s: exit %d\n%s", names[f], code, out)
		}
	}
}

package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/testkit/testports"
)

// freeCluster8 is freeCluster for a dp-2 engine, whose cluster reaches D+7.
func freeCluster8(t *testing.T) int {
	t.Helper()
	return testports.Range(t, 8)
}

// TestE2EDemoAscend: `tsd up --headless --fake-npus 4` runs
// profiles/examples/demo-ascend.yaml to ready and serves a chat; each
// role is handed its NPUs in ASCEND_RT_VISIBLE_DEVICES, and the status
// shows the simulated npu-smi's NPUs joined to the roles by index.
func TestE2EDemoAscend(t *testing.T) {
	t.Parallel()
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	// Gateway and bootstrap: any free port; dist-init: whole clusters
	// below the ephemeral range (the prefill's dp 2 reaches D+7).
	ports := []int{freePort(t), freePort(t), freeCluster8(t), freeCluster(t)}
	prof := privateProfile(t, "demo-ascend.yaml",
		[2]string{"../../gateway/tokenizer/testdata/demo", absPath(t, "../../gateway/tokenizer/testdata/demo")},
		[2]string{"command: [ts-fake, serve]", fmt.Sprintf("command: [%s, serve]", fakeBin)},
		[2]string{"--fake-startup, 4s", "--fake-startup, 200ms"},
		[2]string{"port: 8000", fmt.Sprintf("port: %d", ports[0])},
		[2]string{"kind: prefill\n", fmt.Sprintf("kind: prefill\n    bootstrap_port: %d\n    dist_init_port: %d\n", ports[1], ports[2])},
		[2]string{"kind: decode\n", fmt.Sprintf("kind: decode\n    dist_init_port: %d\n", ports[3])},
	)
	dir := filepath.Dir(prof)

	// The wrong kind of simulated device is refused before anything starts.
	bad := runTSD(t, dir, "up", "--headless", "--fake-gpus", "4", prof)
	if err := bad.wait(); err == nil || !strings.Contains(bad.output(), "use --fake-npus") {
		t.Fatalf("--fake-gpus on an ascend profile: %v\n%s", err, bad.output())
	}

	d := runTSD(t, dir, "up", "--headless", "--fake-npus", "4", prof)
	s := waitAllReady(t, d, []string{"prefill", "decode"})
	// Telemetry joins the roles' PIDs a poll after they start: ask until
	// the status shows them (each status is a fresh snapshot), or give up.
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(s.GPUs) == 0 || len(s.Roles[0].GPUUUIDs) == 0 || len(s.Roles[1].GPUUUIDs) == 0 {
		select {
		case <-deadline:
			t.Fatalf("no NPU readings joined to roles: %+v / %+v", s.GPUInfo, s.Roles)
		case <-tick.C:
		}
		s = d.status()
	}
	if s.GPUInfo.Provider != "npu-fake" || !s.GPUInfo.Simulated || len(s.GPUs) != 4 || s.GPUs[0].Name != "910B3" {
		t.Fatalf("device panel %+v, %d devices", s.GPUInfo, len(s.GPUs))
	}
	want := map[string][]string{"prefill": {s.GPUs[0].UUID, s.GPUs[1].UUID}, "decode": {s.GPUs[2].UUID}}
	for _, r := range s.Roles {
		if !reflect.DeepEqual(r.GPUUUIDs, want[r.Name]) {
			t.Errorf("%s NPUs %v, want %v", r.Name, r.GPUUUIDs, want[r.Name])
		}
	}

	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post(s.Gateway.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"finish_reason"`) {
		t.Fatalf("chat: %d %s\n%s", resp.StatusCode, b, d.output())
	}

	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

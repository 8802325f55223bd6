package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/testkit/testports"
)

// TestE2EKVEventsFillTheIndex: `tsd up` on ts-fake with kv_events on a
// prefill of two DP ranks: the engines get --kv-events-config, the
// gateway follows both ranks, and after requests the cached blocks and
// the cached-token share show in `tsd status --json` and /metrics.
func TestE2EKVEventsFillTheIndex(t *testing.T) {
	dir := fakeProfileDir(t, "e2ekv")
	port, kvPort := freePort(t), testports.Range(t, 4)
	prof := fmt.Sprintf(`name: fake-kv
model: ./model
engine:
  command: [%s, serve]
  args: [--prefix-granularity, "16", --fake-startup, 0s]
gateway:
  port: %d
roles:
  - name: prefill
    kind: prefill
    dp: 2
    gpus: [0, 1]
    kv_events: true
    kv_events_port: %d
  - name: decode
    kind: decode
    gpus: [2]
restart:
  stop_grace: 5s
`, fakeBin, port, kvPort)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	prefillRow := func(s snapshot.Snapshot) *snapshot.RoleTraffic {
		for i := range s.Gateway.Roles {
			if s.Gateway.Roles[i].Role == "prefill" {
				return &s.Gateway.Roles[i]
			}
		}
		return nil
	}
	d.waitStatus(func(s snapshot.Snapshot) bool {
		r := prefillRow(s)
		return r != nil && r.KVEvents == snapshot.KVEventsLive
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprint(300 + i)
	}
	body := `{"input_ids":[` + strings.Join(ids, ",") + `],"sampling_params":{"max_new_tokens":2,"ignore_eos":true}}`
	c := &http.Client{Timeout: 30 * time.Second}
	// Three requests on two ranks: one rank sees the prompt twice.
	for range 3 {
		resp, err := c.Post(base+"/generate", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /generate: %d %s", resp.StatusCode, b)
		}
	}
	s := d.waitStatus(func(s snapshot.Snapshot) bool {
		r := prefillRow(s)
		if r == nil || r.CachedShare <= 0 || len(r.Cache) != 2 {
			return false
		}
		blocks := 0
		for _, c := range r.Cache {
			blocks += c.CachedBlocks
		}
		return blocks >= 2 && r.KVEvents == snapshot.KVEventsLive
	})
	r := prefillRow(s)
	for _, c := range r.Cache {
		if c.CachedBlocks != 0 && (c.CachedBlocks != 2 || c.BlockSize != 16 || !c.KVLive) {
			t.Fatalf("rank %d: %+v (40 tokens are two whole pages of 16)", c.DPRank, c)
		}
	}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tsd_gateway_kv_events_live{dp_rank="1",role="prefill"} 1`, `tsd_gateway_kv_cached_blocks{dp_rank="0",role="prefill"}`,
		`tsd_gateway_prefill_cached_tokens_total{dp_rank=`, `tsd_gateway_prefill_cached_share{dp_rank="0",role="prefill"}`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

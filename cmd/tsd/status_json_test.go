package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

var updateGolden = flag.Bool("update", false, "rewrite cmd/tsd/testdata/*.golden")

// TestStatusJSONGolden pins `tsd status --json`: snake_case keys
// everywhere (gateway.roles[] included) and latencies as float ms under
// *_ms keys, encoded as the daemon serves /v1/status and masked as the
// CLI prints it. README.md "The status JSON" documents these keys; go test
// -run TestStatusJSONGolden -update rewrites the file after a deliberate
// change (and the table with it).
func TestStatusJSONGolden(t *testing.T) {
	at := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	s := snapshot.Snapshot{
		Seq: 42, Time: at, Name: "qwen-pd", Profile: "/home/op/qwen-pd.yaml",
		Gateway: snapshot.GatewayStatus{
			URL: "http://127.0.0.1:8000", Mode: "pd", Ready: true, ReqPerSec: 12.5, TokPerSec: 1830,
			Requests: 4211, Errors: 3, ClientErrors: 5, InFlight: 9, Queued: 1,
			TTFTp50: 84300 * time.Microsecond, TTFTp99: 412 * time.Millisecond,
			ITLp50: 11200 * time.Microsecond, ITLp99: 31 * time.Millisecond,
			Roles: []snapshot.RoleTraffic{
				{Role: "gateway", Errors: 1, ClientErrors: 5},
				{Role: "prefill", ReqPerS: 12.5, InFlight: 2, TTFTp50: 84300 * time.Microsecond, TTFTp99: 412 * time.Millisecond},
				{Role: "decode", ReqPerS: 12.5, TokPerS: 1830, InFlight: 7, Errors: 2,
					TTFTp50: 84300 * time.Microsecond, TTFTp99: 412 * time.Millisecond, ITLp50: 11200 * time.Microsecond, ITLp99: 31 * time.Millisecond},
			},
			TokenizerCache: &snapshot.TokenizerCacheStatus{HitRate: 0.75, L0Hits: 1200, L1Hits: 1958, Misses: 1053, UsedBytes: 18 << 20, MaxBytes: 64 << 20},
		},
		Roles: []snapshot.RoleStatus{
			{Name: "prefill", Kind: "prefill", GPUs: []string{"0"}, State: snapshot.StateReady, Phase: "ready", PID: 4242,
				StartedAt: at.Add(-90 * time.Second), Worker: "ipc:///run/prefill", LogFile: "/logs/prefill.log",
				RanksExpected: 1, RanksRegistered: 1, Routed: true, GPUMemB: 70 << 30},
			{Name: "decode", Kind: "decode", GPUs: []string{"1"}, State: snapshot.StateStarting, Phase: "loading weights",
				PID: 4343, StartedAt: at.Add(-5 * time.Second), Worker: "ipc:///run/decode", LogFile: "/logs/decode.log",
				RanksExpected: 1, Progress: &snapshot.Progress{Phase: "loading weights", Frac: 0.45, Text: "5/11"},
				Reason: "started by tsd restart", Restarts: 1, Exits: map[string]int{snapshot.ExitRequested: 1}},
		},
		GPUInfo: snapshot.GPUPanelStatus{Provider: "fake", Simulated: true},
		GPUs: []snapshot.GPUStatus{{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200", UtilPct: 87, MemUsedB: 70 << 30, MemTotalB: 141 << 30,
			PowerW: 612, TempC: 61, SMClockMHz: 1980, Roles: []string{"prefill"}}},
		Events: []snapshot.Event{{Time: at, Role: "decode", Message: "restart requested: HF_TOKEN=secret ts serve"}},
		Planner: &snapshot.PlannerStatus{Mode: "advise", TTFT: time.Second, ITL: 50 * time.Millisecond, Interval: 30 * time.Second,
			Cooldown: 2 * time.Minute, GPUs: []string{"0", "1"}, Last: at.Add(-5 * time.Second), Next: at.Add(25 * time.Second), Code: "hold",
			Reason:    "within targets: prefill TTFT p90 412 ms, 41% of 1.0 s; decode ITL p90 31 ms, 62% of 50 ms",
			Decisions: map[string]uint64{"hold": 12},
			Groups: []snapshot.PlannerGroup{{Group: "prefill", Kind: "prefill", Replicas: 1, Proposed: 1, Min: 1, TTFT: 412 * time.Millisecond,
				TTFTN: 375, Pressure: 0.412, Predicted: 0.43, Judged: "ttft", ReqPerSec: 12.5, PromptPerReq: 812, CachedShare: 0.4,
				InFlight: 2.1, PressureSeries: []float64{0.39, 0.41, 0.412}}}},
	}
	// As the daemon serves it (supervisor/control.go: indented) and the
	// CLI prints it (maskJSON).
	var served bytes.Buffer
	enc := json.NewEncoder(&served)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	got, err := maskJSON(served.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "status.json.golden")
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/tsd -run TestStatusJSONGolden -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("tsd status --json changed (go test -run TestStatusJSONGolden -update after a deliberate change):\n%s", got)
	}
}

package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// The operator's series on a real deployment's /metrics: a decode killed
// by a signal tsd did not send reads as one restart and one exit by
// "signal", its state ready again with a fresh uptime; the daemon's
// uptime and every request's phases are there; a client's 400 counts as a
// client error, not the deployment's.
func TestE2ERoleMetricsAfterAKill(t *testing.T) {
	d, base := startFakeProfile(t, "")
	d.waitLine(0, "prefill", "→ ready")
	n := d.waitLine(0, "decode", "→ ready")
	generate(t, base)
	var pid int
	for _, r := range d.status().Roles {
		if r.Name == "decode" {
			pid = r.PID
		}
	}
	if pid <= 0 {
		t.Fatal("no decode pid in status")
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.waitLine(n, "decode", "→ ready")
	d.waitStatus(func(s snapshot.Snapshot) bool {
		for _, r := range s.Roles {
			if r.Name == "decode" {
				return r.State == snapshot.StateReady && r.Restarts == 1 && r.Exits[snapshot.ExitSignal] == 1
			}
		}
		return false
	})
	generate(t, base)
	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(`{"input_ids":[-1]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("bad input: %d", resp.StatusCode)
	}

	// The 400's record ends after its response was written.
	var metrics string
	d.waitStatus(func(s snapshot.Snapshot) bool {
		metrics = metricsText(t, base)
		return strings.Contains(metrics, "tsd_gateway_traffic_client_errors_total 1")
	})
	for _, want := range []string{
		`tsd_role_state{kind="decode",role="decode",state="ready"} 1`,
		`tsd_role_state{kind="decode",role="decode",state="crashed"} 0`,
		`tsd_role_restarts_total{role="decode"} 1`,
		`tsd_role_exits_total{reason="signal",role="decode"} 1`,
		`tsd_role_exits_total{reason="error",role="decode"} 0`,
		`tsd_role_restarts_total{role="prefill"} 0`,
		`tsd_gateway_traffic_errors_total 0`,
		`tsd_gateway_traffic_client_errors_total 1`,
		`smg_router_stage_duration_seconds_count{stage="prefill"} 2`,
		`smg_router_stage_duration_seconds_count{stage="route"} 2`,
		`smg_admission_queue_rejected_total{reason="timeout"} 0`,
		`tsd_deployment_info{deployment="`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, series := range []string{`tsd_role_uptime_seconds{role="decode"} `, "tsd_uptime_seconds "} {
		i := strings.Index(metrics, series)
		if i < 0 || strings.HasPrefix(metrics[i+len(series):], "0\n") {
			t.Errorf("/metrics: %s missing or 0", series)
		}
	}
}

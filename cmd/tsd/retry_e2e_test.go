package main

// Retries, migration and circuit breakers (docs/protocol.md §11.9) end to
// end: `tsd up --headless` on ts-fake engines with the profile's defaults.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

func gatewayRole(s snapshot.Snapshot, name string) (snapshot.RoleTraffic, bool) {
	for _, r := range s.Gateway.Roles {
		if r.Role == name {
			return r, true
		}
	}
	return snapshot.RoleTraffic{}, false
}

// SIGKILL of one decode replica's whole process group under concurrent
// streams: no client sees a failure, and every stream ends with its
// finish reason and the token count it asked for. Streams that had no
// token yet were retried on the other decode; streams that had some were
// migrated there (the access lines say retries= and migrated=1).
func TestE2EDecodeKilledUnderLoadLosesNoStream(t *testing.T) {
	d, base := fake1P2D(t, "", "")
	l := startLoad(base, 16, 40, 60*time.Second)
	waitFirstOK(t, l)
	s := d.waitStatus(func(s snapshot.Snapshot) bool {
		r, ok := gatewayRole(s, "decode-0")
		return ok && r.InFlight >= 4
	})
	dec := roleStatus(t, s, "decode-0")
	from := len(d.linesCopy())
	if err := syscall.Kill(-dec.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.waitLine(from, "decode-0", "→ ready")
	res := tallyOf(l.stop())
	t.Log(res)
	if res.n[outOK] != res.sent || res.sent == 0 {
		t.Fatalf("client-visible failures after killing decode-0: %s", res)
	}
	// The streams that moved off decode-0 left its in-flight count: once
	// the load is done every role's is 0 again.
	d.waitStatus(func(s snapshot.Snapshot) bool {
		for _, r := range s.Gateway.Roles {
			if r.InFlight != 0 {
				return false
			}
		}
		return s.Gateway.InFlight == 0
	})
	out, err := d.ctl("logs", "gateway")
	if err != nil {
		t.Fatalf("tsd logs gateway: %v\n%s", err, out)
	}
	var retried, migrated int
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "msg=access") {
			continue
		}
		if !strings.Contains(line, "retries=0") {
			retried++
		}
		if strings.Contains(line, "migrated=1") {
			migrated++
		}
	}
	if retried == 0 || migrated == 0 {
		t.Fatalf("access lines with retries > 0: %d, with migrated=1: %d; want both\n%s", retried, migrated, out)
	}
}

// fakeFlapping starts 1P2D (one prefill, decodes decode-0 and decode-1 as
// their own roles) where decode-0 aborts its first `aborts` requests, with
// a breaker that opens after 3 failures and tries again after 1 s.
func fakeFlapping(t *testing.T, aborts int) (*deployment, string) {
	t.Helper()
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	dir, err := os.MkdirTemp("", "e2ecb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "model"), 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	prof := fmt.Sprintf(`name: fake-flap
model: ./model
engine:
  command: [%s, serve]
  env: {TS_FAKE_TOKENS_PER_S: "200", TS_FAKE_STARTUP: 100ms}
gateway:
  port: %d
  retry: {initial_backoff_ms: 1, max_backoff_ms: 10}
  circuit_breaker: {failure_threshold: 3, success_threshold: 1, timeout_duration_secs: 1}
roles:
  - {name: prefill, kind: prefill, gpus: [0]}
  - {name: decode-0, kind: decode, gpus: [1], env: {TS_FAKE_ABORT_REQUESTS: "%d"}}
  - {name: decode-1, kind: decode, gpus: [2]}
restart:
  backoff: 200ms
  stop_grace: 5s
`, fakeBin, port, aborts)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	for _, r := range []string{"prefill", "decode-0", "decode-1"} {
		d.waitLine(0, r, "→ ready")
	}
	return d, fmt.Sprintf("http://127.0.0.1:%d", port)
}

func breakerIn(s snapshot.Snapshot, role string) snapshot.BreakerStatus {
	for _, b := range s.Gateway.Breakers {
		if b.Role == role {
			return b
		}
	}
	return snapshot.BreakerStatus{}
}

// A flapping decode (it aborts its first requests, then recovers) opens
// its breaker after failure_threshold failures, every client request
// still succeeding on the other decode; after timeout_duration_secs the
// breaker is half-open, the recovered decode serves again and the breaker
// closes. tsd status --json, /metrics and the event list show it.
func TestE2EFlappingDecodeBreakerOpensAndCloses(t *testing.T) {
	d, base := fakeFlapping(t, 3)
	if b := breakerIn(d.status(), "decode-0"); b.State != snapshot.BreakerClosed {
		t.Fatalf("breaker at start: %+v", b)
	}
	// Round robin sends every other request to decode-0: six requests
	// give it its three failures, each retried on decode-1.
	for range 6 {
		generate(t, base)
	}
	s := d.waitStatus(func(s snapshot.Snapshot) bool { return breakerIn(s, "decode-0").State != snapshot.BreakerClosed })
	if b := breakerIn(s, "decode-0"); b.State != snapshot.BreakerOpen && b.State != snapshot.BreakerHalfOpen {
		t.Fatalf("decode-0's breaker after three failures: %+v", b)
	}
	d.waitStatus(func(s snapshot.Snapshot) bool { return breakerIn(s, "decode-0").State == snapshot.BreakerHalfOpen })
	// Half-open admits it again; it has spent its aborts, so its next
	// request succeeds and closes the breaker.
	d.waitStatus(func(s snapshot.Snapshot) bool {
		generate(t, base)
		return breakerIn(s, "decode-0").State == snapshot.BreakerClosed
	})
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(b)
	for _, want := range []string{
		`smg_worker_cb_transitions_total{from="closed",to="open",worker="decode-0"} 1`,
		`smg_worker_cb_transitions_total{from="open",to="half_open",worker="decode-0"} 1`,
		`smg_worker_cb_transitions_total{from="half_open",to="closed",worker="decode-0"} 1`,
		`smg_worker_cb_state{worker="decode-0"} 0`,
		`tsd_worker_breaker_state{state="closed",worker="decode-0"} 1`,
		`tsd_gateway_attempt_failures_total{failure="aborted",verdict="retry"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if errs := d.status().Gateway.Errors; errs != 0 {
		t.Errorf("%d client-visible errors", errs)
	}
	d.waitStatus(func(s snapshot.Snapshot) bool {
		for _, e := range s.Events {
			if e.Role == "decode-0" && strings.Contains(e.Message, "circuit breaker closed → open") {
				return true
			}
		}
		return false
	})
}

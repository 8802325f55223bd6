package main

// Retries, migration and circuit breakers (docs/protocol.md §11.9) end to
// end: `tsd up --headless` on ts-fake engines with the profile's defaults.

import (
	"bufio"
	"encoding/json"
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
	dir := fakeProfileDir(t, "e2ecb")
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

// A chat stream whose decode is SIGKILLed midway goes on in the same
// response (OpenAI front end on the demo tokenizer): one role chunk, no
// error, finish_reason length, usage counting every token asked for and
// the prompt the client sent, then [DONE].
func TestE2EChatStreamMigratesAcrossADecodeKill(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	dir := t.TempDir()
	model, err := filepath.Abs("../../gateway/tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	prof := fmt.Sprintf(`name: chat-migrate
model: %s
served_model_name: demo
engine:
  command: [%s, serve]
  env: {TS_FAKE_TOKENS_PER_S: "50", TS_FAKE_STARTUP: 100ms, TS_FAKE_EOS_ID: "-1", TS_FAKE_TOKEN_MIN: "256"}
gateway:
  port: %d
roles:
  - {name: prefill, kind: prefill, gpus: [0]}
  - {name: decode, kind: decode, replicas: 2, gpus: [[1], [2]]}
restart:
  backoff: 200ms
  stop_grace: 5s
`, model, fakeBin, port)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	for _, r := range []string{"prefill", "decode-0", "decode-1"} {
		d.waitLine(0, r, "→ ready")
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	chat := func(kill bool) (chunks []map[string]any, raw string) {
		body := `{"model":"demo","messages":[{"role":"user","content":"tell me a long story"}],"max_tokens":100,"stream":true,"stream_options":{"include_usage":true}}`
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var b strings.Builder
		for sc.Scan() {
			line := sc.Text()
			b.WriteString(line + "\n")
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var c map[string]any
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatalf("chunk %q: %v", data, err)
			}
			chunks = append(chunks, c)
			if kill && len(chunks) == 5 {
				kill = false
				s := d.waitStatus(func(s snapshot.Snapshot) bool {
					a, _ := gatewayRole(s, "decode-0")
					b, _ := gatewayRole(s, "decode-1")
					return a.InFlight+b.InFlight == 1
				})
				victim := "decode-0"
				if r, _ := gatewayRole(s, "decode-1"); r.InFlight == 1 {
					victim = "decode-1"
				}
				if err := syscall.Kill(-roleStatus(t, s, victim).PID, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		return chunks, b.String()
	}
	usageOf := func(chunks []map[string]any) (prompt, completion float64, finish string, errs int) {
		for _, c := range chunks {
			if _, ok := c["error"]; ok {
				errs++
			}
			if u, ok := c["usage"].(map[string]any); ok && u != nil {
				prompt, completion = u["prompt_tokens"].(float64), u["completion_tokens"].(float64)
			}
			if cs, ok := c["choices"].([]any); ok {
				for _, ch := range cs {
					if f, ok := ch.(map[string]any)["finish_reason"].(string); ok && f != "" {
						finish = f
					}
				}
			}
		}
		return
	}
	// The killed stream first: the status it reads for the victim then
	// holds no earlier request (it is published at its own cadence).
	chunks, raw := chat(true)
	prompt, completion, finish, errs := usageOf(chunks)
	plainChunks, _ := chat(false)
	wantPrompt, _, _, _ := usageOf(plainChunks)
	if errs != 0 || finish != "length" || completion != 100 || prompt != wantPrompt || wantPrompt == 0 || !strings.HasSuffix(strings.TrimSpace(raw), "data: [DONE]") {
		t.Fatalf("across the kill: %d errors, finish %q, usage %v/%v (prompt without a kill %v):\n%s", errs, finish, prompt, completion, wantPrompt, raw)
	}
	out, _ := d.ctl("logs", "gateway")
	if !strings.Contains(out, "migrated=1") {
		t.Fatalf("no access line says migrated=1:\n%s", out)
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// admissionProfile is a 1P1D of ts-fake whose decode holds one request at
// a time as far as the gateway's queue is concerned (decode_requests: 1),
// with room for four waiting requests and no aging: the order requests
// are served in is the queue's alone.
func admissionProfile(port int) string {
	return fmt.Sprintf(`name: fake-admission
model: ./model
engine:
  command: [%s, serve]
  env: {TS_FAKE_TOKENS_PER_S: "500", TS_FAKE_STARTUP: 100ms}
gateway:
  port: %d
  queue_timeout: 60s
  admission: {decode_requests: 1, queue_requests: 4, aging: 0s}
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
}

// answer is one /generate request's end, as its client saw it.
type answer struct {
	id         string
	status     int
	retryAfter string
	code       string
	err        error
}

// generateAs sends /generate for id with the given priority field (nil:
// none) and headers, max_new_tokens tokens, streaming; it returns when
// the answer ended (or ctx did).
func generateAs(ctx context.Context, base, id string, priority *int, tokens int, header ...string) answer {
	body := map[string]any{"input_ids": seq(int32(len(id)*1000), 64), "stream": true, "rid": id,
		"sampling_params": map[string]any{"max_new_tokens": tokens, "min_new_tokens": tokens, "ignore_eos": true}}
	if priority != nil {
		body["priority"] = *priority
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/generate", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{id: id, err: err}
	}
	defer resp.Body.Close()
	a := answer{id: id, status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), code: resp.Header.Get("X-SMG-Error-Code")}
	_, a.err = io.Copy(io.Discard, resp.Body)
	return a
}

func prio(p int) *int { return &p }

// TestE2EAdmissionOverload drives two priority classes past what the
// engines take, on ts-fake: a long low request holds the decode; three
// more low ones wait; an interactive one (x-smg-priority) waits too; a
// fifth low one finds the queue full and is answered at once with 429
// and Retry-After; a system one (priority field) takes the newest low
// one's place (503, Retry-After). When the long request goes, the
// engines take the system request, then the interactive one, then the
// low ones in their order. Nothing hangs: every request is answered.
// The assertions are on order and answers only, never on timing.
func TestE2EAdmissionOverload(t *testing.T) {
	dir := fakeProfileDir(t, "e2eadm")
	port := freePort(t)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(admissionProfile(port)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	t.Cleanup(func() { d.ctl("stop", "--now"); _ = d.wait() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	queue := func(cond func(a *snapshot.AdmissionStatus) bool) {
		t.Helper()
		d.waitStatus(func(s snapshot.Snapshot) bool { return s.Gateway.Admission != nil && cond(s.Gateway.Admission) })
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // nothing may wait without bound
	defer cancel()
	answers := make(chan answer, 16)
	send := func(ctx context.Context, id string, priority *int, tokens int, header ...string) {
		go func() { answers <- generateAs(ctx, base, id, priority, tokens, header...) }()
	}
	holdCtx, release := context.WithCancel(ctx)
	send(holdCtx, "hold", prio(-1), 30_000) // holds the decode (a minute at 500 tokens/s) until released
	queue(func(a *snapshot.AdmissionStatus) bool { return a.InFlight == 1 })
	for i := 1; i <= 3; i++ {
		send(ctx, fmt.Sprintf("low-%d", i), prio(-1), 4)
		queue(func(a *snapshot.AdmissionStatus) bool { return a.Queued == i })
	}
	send(ctx, "interactive", nil, 4, "X-SMG-Priority", "interactive")
	queue(func(a *snapshot.AdmissionStatus) bool { return a.Queued == 4 && a.ByClass["interactive"] == 1 })

	full := generateAs(ctx, base, "low-full", prio(-1), 4)
	if full.status != http.StatusTooManyRequests || full.retryAfter == "" || full.code != "queue_full" {
		t.Fatalf("a low request at the full queue: %+v", full)
	}
	send(ctx, "system", prio(2), 4)
	displaced := <-answers
	if displaced.id != "low-3" || displaced.status != http.StatusServiceUnavailable || displaced.retryAfter == "" || displaced.code != "queue_displaced" {
		t.Fatalf("the system request should take the newest low one's place: %+v", displaced)
	}
	queue(func(a *snapshot.AdmissionStatus) bool { return a.Queued == 4 && a.ByClass["system"] == 1 })

	release()
	got := map[string]answer{}
	for len(got) < 5 {
		select {
		case a := <-answers:
			got[a.id] = a
		case <-ctx.Done():
			t.Fatalf("requests still unanswered after 2 minutes; answered: %v", got)
		}
	}
	for _, id := range []string{"system", "interactive", "low-1", "low-2"} {
		if a := got[id]; a.status != 200 || a.err != nil {
			t.Errorf("%s: %+v", id, a)
		}
	}
	// The order the decode engine finished them in is the order the queue
	// let them through, one at a time.
	order := finishOrder(t, filepath.Join(stateDir(t, dir), "logs", "decode.log"), "system", "interactive", "low-1", "low-2")
	if want := "system interactive low-1 low-2"; strings.Join(order, " ") != want {
		b, _ := os.ReadFile(filepath.Join(stateDir(t, dir), "logs", "decode.log"))
		t.Fatalf("served in the order %v, want %s; decode log:\n%s", order, want, tail(string(b), 30))
	}
	queue(func(a *snapshot.AdmissionStatus) bool { return a.Queued == 0 && a.InFlight == 0 })
	if a := d.status().Gateway.Admission; a.Shed["queue_full"] != 1 || a.Shed["displaced"] != 1 || a.Admitted != 5 {
		t.Fatalf("the queue after: %+v", a)
	}
	metrics := metricsText(t, base)
	for _, want := range []string{`smg_scheduler_admit_total{class="bulk",outcome="rejected_queue_full"} 1`, `smg_scheduler_admit_total{class="system",outcome="admitted"} 1`,
		`smg_admission_queue_rejected_total{reason="displaced"} 1`, `smg_scheduler_queue_wait_seconds_count{class="interactive"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// finishOrder is the order of ids in the engine log's Finish lines (each
// request's rid is its x-request-id with a suffix per attempt), waiting
// up to 30 s for all of them.
func finishOrder(t *testing.T, path string, ids ...string) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var order []string
		if f, err := os.Open(path); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				line := sc.Text()
				if !strings.Contains(line, "Finish!") {
					continue
				}
				for _, id := range ids {
					if strings.Contains(line, "Req: "+id+"-") {
						order = append(order, id)
					}
				}
			}
			f.Close()
		}
		if len(order) >= len(ids) || time.Now().After(deadline) {
			return order
		}
		time.Sleep(20 * time.Millisecond) // the log file has no event to wait on; bounded by the deadline
	}
}

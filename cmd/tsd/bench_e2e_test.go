package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// startBenchProfile runs `tsd up --headless` on a PD profile of unpaced
// ts-fake engines with the demo tokenizer (chat needs one), and waits
// until both roles are ready.
func startBenchProfile(t *testing.T) (d *deployment, profile, base string) {
	t.Helper()
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	tok, err := filepath.Abs("../../gateway/tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := freePort(t)
	prof := fmt.Sprintf(`name: bench-e2e
model: %s
served_model_name: demo
engine:
  command: [%s, serve]
  args: [--fake-startup, "0", --fake-tokens-per-s, "0", --fake-token-min, "256", --fake-eos-id, "-1", --fake-log-requests=false]
gateway:
  host: 127.0.0.1
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
`, tok, fakeBin, port)
	profile = filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(profile, []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d = runTSD(t, dir, "up", "--headless", profile)
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	t.Cleanup(func() {
		if out, err := d.ctl("stop"); err != nil {
			t.Errorf("tsd stop: %v\n%s", err, out)
		}
		_ = d.wait()
	})
	return d, profile, fmt.Sprintf("http://127.0.0.1:%d", port)
}

// gatewayCounters reads the generation and output-token counters from
// the gateway's /metrics.
func gatewayCounters(t *testing.T, base string) (requests, outTokens int) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "smg_router_requests_total":
			requests = int(v)
		case `smg_router_tokens_total{token_type="output"}`:
			outTokens = int(v)
		}
	}
	return requests, outTokens
}

// TestE2EBenchCountsMatchGateway: `tsd bench PROFILE` through the real
// gateway on ts-fake, for chat and /generate: the requests it reports
// completed and the output tokens it counted are exactly what the
// gateway's /metrics counted in between, and the JSON has upstream's fields.
func TestE2EBenchCountsMatchGateway(t *testing.T) {
	d, profile, base := startBenchProfile(t)
	for _, backend := range []string{"chat", "generate"} {
		req0, tok0 := gatewayCounters(t, base)
		out := filepath.Join(t.TempDir(), "r.json")
		cmd := exec.Command(tsdBin, "bench", profile, "--backend", backend, "--num-prompts", "30", "--max-concurrency", "4",
			"--random-input-len", "12", "--output-len", "9", "--request-rate", "500", "--seed", "5", "--output-file", out)
		cmd.Dir = d.dir
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tsd bench --backend %s: %v\n%s\ntsd:\n%s", backend, err, b, d.output())
		}
		for _, want := range []string{"Successful requests:", "Mean TTFT (ms):", "P99 ITL (ms):", "Median E2E Latency (ms):", "Output token throughput (tok/s):"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s: summary lacks %q:\n%s", backend, want, b)
			}
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: JSON: %v\n%s", backend, err, raw)
		}
		for _, k := range []string{"duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
			"mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
			"mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s: JSON lacks %q", backend, k)
			}
		}
		req1, tok1 := gatewayCounters(t, base)
		completed, outTokens := int(r["completed"].(float64)), int(r["total_output_tokens"].(float64))
		if completed != 30 || outTokens != 30*9 {
			t.Errorf("%s: bench says %d completed, %d output tokens; want 30 and 270\n%s", backend, completed, outTokens, b)
		}
		if req1-req0 != completed || tok1-tok0 != outTokens {
			t.Errorf("%s: gateway counted %d requests and %d output tokens, bench %d and %d", backend, req1-req0, tok1-tok0, completed, outTokens)
		}
		if r["backend"] != backend || r["model_id"] != "demo" || r["max_concurrency"].(float64) != 4 || r["request_rate"].(float64) != 500 {
			t.Errorf("%s: run description %v %v %v %v", backend, r["backend"], r["model_id"], r["max_concurrency"], r["request_rate"])
		}
	}
}

// TestBenchTargetErrors: a bench with nothing to target says how to name one.
func TestBenchTargetErrors(t *testing.T) {
	cmd := exec.Command(tsdBin, "bench", "--num-prompts", "1")
	cmd.Dir = t.TempDir()
	// An empty registry: other tests' deployments must not be found.
	cmd.Env = append(os.Environ(), "TSD_REGISTRY_DIR="+t.TempDir())
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "no tsd deployment is running") {
		t.Fatalf("want a target error, got %v:\n%s", err, b)
	}
	cmd = exec.Command(tsdBin, "bench", "--base-url", "http://127.0.0.1:1", "--model", "m", "--request-rate", "-3")
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "--request-rate") {
		t.Fatalf("want a --request-rate error, got %v:\n%s", err, b)
	}
}

// TestE2EBenchByName: with no profile, `tsd bench NAME` finds the
// deployment's gateway through the registry and its control socket, and
// refuses a name that nothing runs.
func TestE2EBenchByName(t *testing.T) {
	d, _, _ := startBenchProfile(t)
	name := d.status().Name
	cmd := exec.Command(tsdBin, "bench", name, "--backend", "generate", "--num-prompts", "3", "--random-input-len", "6", "--output-len", "2")
	cmd.Dir = d.dir
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "Successful requests:                     3") {
		t.Fatalf("tsd bench %s: %v\n%s", name, err, b)
	}
	cmd = exec.Command(tsdBin, "bench", "other", "--num-prompts", "1")
	cmd.Dir = d.dir
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), `no running deployment named "other"`) {
		t.Fatalf("want a wrong-name error, got %v:\n%s", err, b)
	}
}

// TestE2EBenchSharedPrefixConversations: `tsd bench` with the
// generated-shared-prefix dataset in multi-turn mode through the real
// gateway: every turn of every conversation is one request the gateway
// counts, and a cached-token share, when the gateway reports cached
// tokens, is a share.
func TestE2EBenchSharedPrefixConversations(t *testing.T) {
	d, profile, base := startBenchProfile(t)
	for _, backend := range []string{"chat", "generate"} {
		req0, _ := gatewayCounters(t, base)
		out := filepath.Join(t.TempDir(), "r.json")
		cmd := exec.Command(tsdBin, "bench", profile, "--backend", backend, "--dataset-name", "generated-shared-prefix",
			"--gsp-num-groups", "2", "--gsp-prompts-per-group", "3", "--gsp-system-prompt-len", "40", "--gsp-question-len", "6",
			"--gsp-output-len", "4", "--gsp-num-turns", "3", "--max-concurrency", "3", "--output-file", out)
		cmd.Dir = d.dir
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tsd bench %s: %v\n%s\ntsd:\n%s", backend, err, b, d.output())
		}
		if !strings.Contains(string(b), "generated-shared-prefix: 2 groups × 3 prompts, system prompt 40 tokens, question 6, output 4, 3 turn(s): 18 requests") {
			t.Errorf("%s: no dataset line:\n%s", backend, b)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		req1, _ := gatewayCounters(t, base)
		if r["completed"].(float64) != 18 || r["num_prompts"].(float64) != 18 || req1-req0 != 18 {
			t.Errorf("%s: completed %v of %v, gateway counted %d; want 18\n%s", backend, r["completed"], r["num_prompts"], req1-req0, b)
		}
		if sh, ok := r["cached_token_share"].(float64); ok && (sh < 0 || sh > 1) {
			t.Errorf("%s: cached_token_share %g", backend, sh)
		}
	}
}

// TestBenchSIGTERMNotSentIsNotFailed: `tsd bench` stopped by SIGTERM
// mid-run prints its table with the requests it never sent (and the one
// it cut) apart from Failed, which stays 0 (they used to be counted
// failed), and exits 0: every request it did finish succeeded.
func TestBenchSIGTERMNotSentIsNotFailed(t *testing.T) {
	second := make(chan struct{})
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) == 2 {
			close(second)
			<-r.Context().Done() // held until the client goes away
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	cmd := exec.Command(tsdBin, "bench", "--base-url", srv.URL, "--model", "m", "--num-prompts", "10", "--max-concurrency", "1",
		"--random-input-len", "4", "--output-len", "1", "--disable-tqdm")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the second request never came:\n%s", out.String())
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tsd bench after SIGTERM: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"Successful requests:                     1",
		"Failed requests:                         0",
		"Not sent (the run was stopped):          8",
		"Cut in flight by the stop:               1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestE2EBenchSweep: `tsd bench PROFILE --request-rate A,B` against a
// running deployment is a sweep: one run per rate, a table with goodput
// beside throughput, the JSON report with one point per rate, the PNG.
func TestE2EBenchSweep(t *testing.T) {
	d, profile, _ := startBenchProfile(t)
	out := t.TempDir()
	jsonPath, pngPath := filepath.Join(out, "s.json"), filepath.Join(out, "s.png")
	cmd := exec.Command(tsdBin, "bench", profile, "--dataset-name", "mixed", "--num-prompts", "10", "--mixed-rag-len", "200",
		"--mixed-system-prompt-len", "20", "--mixed-chat-len", "5", "--mixed-chat-output-len", "3", "--mixed-rag-output-len", "3",
		"--request-rate", "200,400", "--goodput", "ttft:60000", "e2el:60000", "--output-file", jsonPath, "--plot", pngPath)
	cmd.Dir = d.dir
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tsd bench sweep: %v\n%s", err, b)
	}
	var rep struct {
		SLO     string
		Layouts []struct {
			Name   string
			Shape  string
			Points []struct {
				RequestRate float64 `json:"request_rate"`
				Summary     struct {
					Completed      int
					RequestGoodput *float64 `json:"request_goodput"`
				} `json:"summary"`
			}
		}
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, raw)
	}
	if rep.SLO != "ttft<=60000ms e2el<=60000ms" || len(rep.Layouts) != 1 || rep.Layouts[0].Shape != "1P+1D" || len(rep.Layouts[0].Points) != 2 {
		t.Fatalf("report %+v\n%s", rep, b)
	}
	for i, p := range rep.Layouts[0].Points {
		if p.RequestRate != []float64{200, 400}[i] || p.Summary.Completed != 10 || p.Summary.RequestGoodput == nil {
			t.Errorf("point %d: %+v", i, p)
		}
	}
	if !strings.Contains(string(b), "goodput") || !strings.Contains(string(b), "Plot: "+pngPath) {
		t.Errorf("output:\n%s", b)
	}
	if _, err := os.Stat(pngPath); err != nil {
		t.Fatal(err)
	}
}

package loadgen

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Summarize: TPOT excludes the first token and one-token requests,
// failures are counted and listed once, throughput divides by the wall time.
func TestSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	rs := []Result{
		{OK: true, Start: t0, TTFT: 10 * ms, ITL: []time.Duration{5 * ms, 5 * ms}, Latency: 20 * ms, PromptTokens: 4, OutputTokens: 3},
		{OK: true, Start: t0, TTFT: 30 * ms, Latency: 30 * ms, PromptTokens: 6, OutputTokens: 1},
		{Err: "boom"}, {Err: "boom"},
	}
	s := Summarize(rs, 2*time.Second)
	want := []struct {
		name      string
		got, want float64
	}{
		{"completed", float64(s.Completed), 2},
		{"failed", float64(s.Failed), 2},
		{"input", float64(s.TotalInputTokens), 10},
		{"output", float64(s.TotalOutputTokens), 4},
		{"req/s", s.RequestThroughput, 1},
		{"tok/s", s.OutputThroughput, 2},
		{"mean ttft", s.MeanTTFTms, 20},
		{"median ttft", s.MedianTTFTms, 20},
		{"mean tpot", s.MeanTPOTms, 5}, // (20−10)/(3−1); the 1-token request has none
		{"mean itl", s.MeanITLms, 5},
		{"mean e2e", s.MeanE2ELms, 25},
		{"e2e alias", s.MeanE2ELatencyms, 25},
		{"peak tok/s", s.MaxOutputTokensPerS, 4},
		{"peak conc", float64(s.MaxConcurrentReqs), 2},
	}
	for _, w := range want {
		if math.Abs(w.got-w.want) > 1e-9 {
			t.Errorf("%s = %g, want %g", w.name, w.got, w.want)
		}
	}
	if len(s.Errors) != 1 || s.Errors[0] != "boom" {
		t.Errorf("errors %q", s.Errors)
	}
}

// Arrivals: all at once for inf; otherwise increasing, ending at n/rate,
// and reproducible from the seed.
func TestArrivals(t *testing.T) {
	for _, a := range Arrivals(5, math.Inf(1), 1) {
		if a != 0 {
			t.Fatalf("inf rate: %v", a)
		}
	}
	a := Arrivals(100, 50, 7)
	for i := 1; i < len(a); i++ {
		if a[i] < a[i-1] {
			t.Fatalf("not increasing at %d", i)
		}
	}
	if d := a[99] - 2*time.Second; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("last arrival %v, want 2s", a[99])
	}
	if b := Arrivals(100, 50, 7); b[42] != a[42] {
		t.Fatal("not reproducible")
	}
}

// The random dataset has the lengths asked for, ids in range, and is a
// function of the seed.
func TestRandom(t *testing.T) {
	ps, err := Random(RandomOptions{N: 20, InputLen: 16, OutputLen: 8, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if len(p.IDs) != 16 || p.InputLen != 16 || p.OutputLen != 8 || len(strings.Fields(p.Text)) != 16 {
			t.Fatalf("%+v", p)
		}
		for _, id := range p.IDs {
			if id < 256 || id >= 1000 {
				t.Fatalf("id %d out of range", id)
			}
		}
	}
	again, _ := Random(RandomOptions{N: 20, InputLen: 16, OutputLen: 8, Seed: 3})
	if again[5].Text != ps[5].Text {
		t.Fatal("not reproducible")
	}
	rr, _ := Random(RandomOptions{N: 200, InputLen: 100, OutputLen: 10, RangeRatio: 0.5, Seed: 1})
	for _, p := range rr {
		if p.InputLen < 50 || p.InputLen > 150 {
			t.Fatalf("input len %d outside the range", p.InputLen)
		}
	}
	for _, bad := range []RandomOptions{{N: 0, InputLen: 1, OutputLen: 1}, {N: 1, InputLen: 0, OutputLen: 1}, {N: 1, InputLen: 1, OutputLen: 1, RangeRatio: 1}} {
		if _, err := Random(bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// Prompt files: plain lines and JSON lines; a bad line is named by number.
func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.jsonl")
	os.WriteFile(path, []byte("hello there world\n\n{\"prompt\":\"a b\",\"output_len\":5}\n{\"input_ids\":[1,2,3]}\n"), 0o644)
	ps, err := LoadFile(path, 5, 9)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 5 || ps[0].Text != "hello there world" || ps[0].OutputLen != 9 || ps[1].OutputLen != 5 ||
		len(ps[2].IDs) != 3 || ps[2].InputLen != 3 || ps[3].Text != ps[0].Text {
		t.Fatalf("%+v", ps)
	}
	os.WriteFile(path, []byte("ok\n{\"prompt\": 3}\n"), 0o644)
	if _, err := LoadFile(path, 0, 9); err == nil || !strings.Contains(err.Error(), "p.jsonl:2:") {
		t.Fatalf("error %v should name line 2", err)
	}
}

// hasOutput finds output in each endpoint's chunk shape without decoding.
func TestHasOutput(t *testing.T) {
	for _, c := range []struct {
		b    Backend
		ev   string
		want bool
	}{
		{Chat, `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, false},
		{Chat, `{"choices":[{"index":0,"delta":{"content":"hi"}}]}`, true},
		{Chat, `{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`, false},
		{Completions, `{"choices":[{"text":"x"}]}`, true},
		{Completions, `{"choices":[{"text":""}]}`, false},
		{Generate, `{"output_ids":[5,6],"meta_info":{}}`, true},
		{Generate, `{"output_ids":[],"meta_info":{}}`, false},
	} {
		if got := hasOutput(c.b, []byte(c.ev)); got != c.want {
			t.Errorf("%s %s: %v", c.b, c.ev, got)
		}
	}
}

// fakeSSE answers chat and /generate with n chunks then usage and [DONE],
// counting requests and the largest number in flight.
func fakeSSE(t *testing.T, inflight, peak *atomic.Int64) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range 4 {
			if r.URL.Path == "/generate" {
				fmt.Fprintf(w, "data: {\"output_ids\":[%d]}\n\n", i)
			} else {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			}
			f.Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
	}))
}

// Run drives every prompt, never more than MaxConcurrency at once, and
// reads tokens and usage from the stream.
func TestRunAgainstSSE(t *testing.T) {
	var inflight, peak atomic.Int64
	srv := fakeSSE(t, &inflight, &peak)
	defer srv.Close()
	ps, _ := Random(RandomOptions{N: 40, InputLen: 3, OutputLen: 4, Seed: 1})
	for _, b := range []Backend{Chat, Generate} {
		peak.Store(0)
		var progress atomic.Int64
		rs, dur, err := Run(context.Background(), Config{BaseURL: srv.URL, Backend: b, Model: "m", Prompts: ps,
			MaxConcurrency: 3, RequestRate: math.Inf(1), Progress: func(done, total int) { progress.Store(int64(done)) }})
		if err != nil {
			t.Fatal(err)
		}
		s := Summarize(rs, dur)
		if s.Completed != 40 || s.TotalOutputTokens != 160 || s.TotalInputTokens != 280 || progress.Load() != 40 {
			t.Fatalf("%s: %+v progress %d", b, s, progress.Load())
		}
		if p := peak.Load(); p > 3 {
			t.Fatalf("%s: %d requests in flight, limit 3", b, p)
		}
		if len(rs[0].ITL) != 3 {
			t.Fatalf("%s: ITL %v", b, rs[0].ITL)
		}
	}
}

// A server error is a failed request with the status in its message.
func TestRunServerError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"nope"}}`, http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ps, _ := Random(RandomOptions{N: 2, InputLen: 3, OutputLen: 4, Seed: 1})
	rs, dur, err := Run(context.Background(), Config{BaseURL: srv.URL, Backend: Chat, Prompts: ps})
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(rs, dur)
	if s.Failed != 2 || len(s.Errors) != 1 || !strings.Contains(s.Errors[0], "503") {
		t.Fatalf("%+v", s)
	}
}

// A dataset without token ids cannot drive /generate: Run says so at once.
func TestRunRefusesUnfitDataset(t *testing.T) {
	_, _, err := Run(context.Background(), Config{BaseURL: "http://127.0.0.1:1", Backend: Generate, Prompts: []Prompt{{Text: "hi", OutputLen: 3}}})
	if err == nil || !strings.Contains(err.Error(), "token ids") {
		t.Fatalf("err %v", err)
	}
}

// Progress comes while requests are still being sent, not only after the
// last one went out (a regression: it used to start after the send loop).
// The server holds every request after the first until the first
// progress call, so the old order could never finish.
func TestProgressDuringSend(t *testing.T) {
	first := make(chan struct{})
	var once sync.Once
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			select {
			case <-first:
			case <-time.After(10 * time.Second):
				http.Error(w, "no progress reported while sending", http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	ps, _ := Random(RandomOptions{N: 5, InputLen: 3, OutputLen: 1, Seed: 1})
	rs, dur, err := Run(context.Background(), Config{BaseURL: srv.URL, Backend: Chat, Prompts: ps, MaxConcurrency: 1,
		Progress: func(done, total int) { once.Do(func() { close(first) }) }})
	if err != nil {
		t.Fatal(err)
	}
	if s := Summarize(rs, dur); s.Completed != 5 {
		t.Fatalf("%+v", s)
	}
}

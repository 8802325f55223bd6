package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// pacedProfile writes a PD profile of ts-fake engines generating
// tokensPerS tokens a second per request, whose restart.drain_timeout is
// drain, into a fresh directory; it returns the profile's path and the
// gateway's URL.
func pacedProfile(t *testing.T, tokensPerS int, drain string) (path, base string) {
	t.Helper()
	dir := t.TempDir()
	tok, err := filepath.Abs("../../gateway/tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	// The demo tokenizer (chat needs one); ids from 256 up decode to text.
	prof := fmt.Sprintf(`name: paced
model: %s
served_model_name: demo
engine:
  command: [%s, serve]
  args: [--fake-tokens-per-s, "%d", --fake-token-min, "256", --fake-eos-id, "-1"]
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
  drain_timeout: %s
`, tok, fakeBin, tokensPerS, port, drain)
	path = filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, fmt.Sprintf("http://127.0.0.1:%d", port)
}

// sseStream is a chat stream read as it comes: every data line, in order.
type sseStream struct {
	lines chan string
}

// openStream starts a streamed chat completion of max tokens and returns
// once its first content chunk arrived.
func openStream(t *testing.T, base string, max int) *sseStream {
	t.Helper()
	body := fmt.Sprintf(`{"model":"demo","stream":true,"max_tokens":%d,"ignore_eos":true,"messages":[{"role":"user","content":"count"}]}`, max)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	s := &sseStream{lines: make(chan string, 4096)}
	sc := bufio.NewScanner(resp.Body)
	first := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		defer close(s.lines)
		seen := false
		for sc.Scan() {
			l, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			s.lines <- l
			if !seen && strings.Contains(l, `"content"`) {
				seen = true
				close(first)
			}
		}
	}()
	select {
	case <-first:
	case <-time.After(60 * time.Second):
		t.Fatal("no first token in 60s")
	}
	return s
}

// all waits for the stream's end and returns its data lines.
func (s *sseStream) all(t *testing.T) []string {
	t.Helper()
	var out []string
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				return out
			}
			out = append(out, l)
		case <-deadline:
			t.Fatalf("the stream did not end; so far:\n%s", strings.Join(out, "\n"))
		}
	}
}

// finishOf is the finish_reason the stream's chunks gave ("" for none).
func finishOf(lines []string) string {
	for _, l := range lines {
		var c struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(l), &c) == nil && len(c.Choices) > 0 && c.Choices[0].FinishReason != nil {
			return *c.Choices[0].FinishReason
		}
	}
	return ""
}

// `tsd stop` of a whole deployment drains like a restart: a stream that
// ends within the profile's restart.drain_timeout finishes whole; one
// still running when the drain ends gets finish reason "abort" and an
// error event with code shutdown (then [DONE]), and its access line says
// 503 reason=shutdown, not the client's 499. The stop shows the drain,
// says how many finished and how many were cut, and ends with "stopped".
func TestE2EStopDrainsStreams(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	t.Parallel()
	// 20 tokens a second: the short stream needs about 2s of the 6s
	// drain, the long one 45s.
	prof, base := pacedProfile(t, 20, "6s")
	dir := filepath.Dir(prof)
	name := testDeploymentName(t)
	out, code := ctlIn(t, dir, "up", "-d", "--name", name, "--wait", "90s", "p.yaml")
	t.Cleanup(func() { ctlIn(t, dir, "stop", "--now", name) })
	if code != 0 {
		t.Fatalf("tsd up -d: exit %d\n%s", code, out)
	}
	js, code := ctlIn(t, dir, "plan", "--json", "--name", name, "p.yaml")
	var plan profiles.Plan
	if code != 0 || json.Unmarshal([]byte(js), &plan) != nil {
		t.Fatalf("tsd plan --json: exit %d\n%s", code, js)
	}

	long := openStream(t, base, 900)
	short := openStream(t, base, 40)
	start := time.Now()
	out, code = ctlIn(t, dir, "stop", name)
	took := time.Since(start)
	if code != 0 || !inOrder(out, "stopping "+name, "drain of 6s ended: 1 request finished, 1 cut", "stopped "+name+": 1 finished, 1 cut") {
		t.Fatalf("tsd stop: exit %d after %s\n%s", code, took, out)
	}
	if took < 5*time.Second {
		t.Fatalf("tsd stop took %s: it did not wait for the 6s drain\n%s", took, out)
	}

	sl := short.all(t)
	if f := finishOf(sl); f != "length" || sl[len(sl)-1] != "[DONE]" {
		t.Fatalf("the short stream did not finish whole (finish %q):\n%s", f, strings.Join(sl, "\n"))
	}
	ll := long.all(t)
	if len(ll) < 3 || finishOf(ll) != "abort" || !strings.Contains(ll[len(ll)-2], `"code":"shutdown"`) || ll[len(ll)-1] != "[DONE]" {
		t.Fatalf("the cut stream's end: finish %q\n%s", finishOf(ll), strings.Join(ll[max(0, len(ll)-4):], "\n"))
	}
	b, err := os.ReadFile(plan.Gateway.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	var cut, done int
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "msg=access") || !strings.Contains(l, "path=/v1/chat/completions") {
			continue
		}
		switch {
		case strings.Contains(l, "status=503") && strings.Contains(l, "reason=shutdown"):
			cut++
		case strings.Contains(l, "status=200"):
			done++
		default:
			t.Errorf("access line of neither the finished nor the cut stream: %s", l)
		}
	}
	if cut != 1 || done != 1 {
		t.Fatalf("access lines: %d cut (503 shutdown), %d finished; want 1 and 1\n%s", cut, done, b)
	}
}

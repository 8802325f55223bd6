package main

// The shipped layout examples (aggregated only, and mixed with
// conditional disaggregation) through `tsd up --headless` on ts-fake:
// every API served through whichever route a request takes, and `tsd
// apply` switching gateway.disaggregation live.

import (
	"bufio"
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

// layoutExample brings up profiles/examples/<name> on ts-fake (fakeExample's
// changes), with what serving every API needs: the demo text tokenizer as
// model (the example's own; fakeExample puts the vision one in), a
// scripted reply with a tool call, output logprobs, and the qwen tool-call
// parser. It returns the deployment, the gateway's URL and the profile's
// file name in the deployment's directory.
func layoutExample(t *testing.T, name string, edit func(p map[string]any)) (*deployment, string, string) {
	t.Helper()
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	model, err := filepath.Abs("../../gateway/tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	replies := filepath.Join(t.TempDir(), "replies.json")
	rules := `[{"match":"Weather in Oslo?","reply":"<think>Tool time.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"},` +
		`{"match":"","reply":"Plain answer."}]`
	if err := os.WriteFile(replies, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	var port int
	dir, prof := fakeExample(t, name, func(p map[string]any) {
		p["model"], p["tokenizer"] = model, model
		eng := p["engine"].(map[string]any)
		args, _ := eng["args"].([]any)
		eng["args"] = append(args, "--fake-replies", replies, "--enable-output-logprobs", "--fake-startup", "100ms")
		gw := p["gateway"].(map[string]any)
		gw["tool_call_parser"] = "qwen"
		port = gw["port"].(int)
		if edit != nil {
			edit(p)
		}
	})
	d := runTSD(t, dir, "up", "--headless", filepath.Base(prof))
	t.Cleanup(func() { _, _ = d.ctl("stop"); _ = d.wait() })
	return d, fmt.Sprintf("http://127.0.0.1:%d", port), filepath.Base(prof)
}

func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 60 * time.Second}
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sseData are an SSE body's data payloads, [DONE] last when it came.
func sseData(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// serveEveryAPI sends one request of each kind and checks its answer:
// chat with a tool call (whole and streamed), n = 2 with logprobs,
// completions, Responses, and /generate (whole and streamed) with prompt
// logprobs. It returns how many routes they made (n = 2 is two).
func serveEveryAPI(t *testing.T, base string) int {
	t.Helper()
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	st, b := postBody(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Weather in Oslo?"}],`+tools+`}`)
	var chat struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			Logprobs *struct {
				Content []struct{ Token string }
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if st != 200 || json.Unmarshal([]byte(b), &chat) != nil || len(chat.Choices) != 1 || chat.Choices[0].FinishReason != "tool_calls" ||
		len(chat.Choices[0].Message.ToolCalls) != 1 || chat.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` {
		t.Fatalf("chat with a tool call: %d %s", st, b)
	}
	st, b = postBody(t, base+"/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"Weather in Oslo?"}],`+tools+`}`)
	if d := sseData(b); st != 200 || len(d) < 3 || d[len(d)-1] != "[DONE]" || !strings.Contains(b, `"get_weather"`) || !strings.Contains(b, `"finish_reason":"tool_calls"`) {
		t.Fatalf("chat streamed: %d %s", st, b)
	}
	st, b = postBody(t, base+"/v1/chat/completions", `{"n":2,"logprobs":true,"max_tokens":4,"messages":[{"role":"user","content":"Say hello"}]}`)
	chat.Choices = nil
	if st != 200 || json.Unmarshal([]byte(b), &chat) != nil || len(chat.Choices) != 2 || chat.Choices[1].Logprobs == nil || len(chat.Choices[1].Logprobs.Content) == 0 {
		t.Fatalf("n=2 with logprobs: %d %s", st, b)
	}
	if st, b = postBody(t, base+"/v1/completions", `{"prompt":"Say hello","max_tokens":4}`); st != 200 || !strings.Contains(b, `"text":"Plain`) {
		t.Fatalf("completions: %d %s", st, b)
	}
	if st, b = postBody(t, base+"/v1/responses", `{"input":"Say hello"}`); st != 200 || !strings.Contains(b, "Plain answer.") {
		t.Fatalf("responses: %d %s", st, b)
	}
	for _, stream := range []bool{false, true} {
		st, b = postBody(t, base+"/generate", fmt.Sprintf(`{"input_ids":[11,12,13,14],"stream":%v,"return_logprob":true,"logprob_start_len":0,"sampling_params":{"max_new_tokens":3}}`, stream))
		if st != 200 || !strings.Contains(b, `"input_token_logprobs":[[null,11],[`) {
			t.Fatalf("/generate stream=%v: %d %s", stream, st, b)
		}
	}
	return 8
}

// accessLayouts counts the gateway's access lines by their layout=.
func accessLayouts(t *testing.T, d *deployment) map[string]int {
	t.Helper()
	out, err := d.ctl("logs", "gateway")
	if err != nil {
		t.Fatalf("tsd logs gateway: %v\n%s", err, out)
	}
	n := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "msg=access") {
			continue
		}
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "layout="); ok {
				n[v]++
			}
		}
	}
	return n
}

// The aggregated-only example (four aggregated engines) serves every API
// in one leg per request: each access line says layout=aggregated, the
// status splits every route that way, /metrics counts them under never.
func TestE2EAggregatedExampleServes(t *testing.T) {
	d, base, _ := layoutExample(t, "agg-4.yaml", nil)
	for i := range 4 {
		d.waitLine(0, fmt.Sprintf("agg-%d", i), "→ ready")
	}
	routes := serveEveryAPI(t, base)
	s := d.waitStatus(func(s snapshot.Snapshot) bool {
		return s.Gateway.Layouts != nil && s.Gateway.Layouts.Aggregated == uint64(routes) && s.Gateway.InFlight == 0
	})
	if !s.Gateway.Ready || s.Gateway.Layouts.Disaggregation != "never" || s.Gateway.Layouts.PD != 0 || s.Gateway.Policy.Aggregated != "cache_aware" {
		t.Fatalf("status: ready %v layouts %+v policy %+v", s.Gateway.Ready, s.Gateway.Layouts, s.Gateway.Policy)
	}
	if n := accessLayouts(t, d); n["aggregated"] != 7 || n["pd"] != 0 {
		t.Fatalf("access lines by layout %v, want 7 aggregated", n)
	}
	if m := metricsText(t, base); !strings.Contains(m, fmt.Sprintf(`tsd_gateway_layout_routes_total{layout="aggregated",reason="never"} %d`, routes)) {
		t.Fatalf("/metrics lacks the aggregated routes:\n%s", m)
	}
	if out, err := d.ctl("status"); err != nil || !strings.Contains(out, fmt.Sprintf("disaggregation never: 0 routed prefill → decode, %d aggregated", routes)) {
		t.Fatalf("tsd status: %v\n%s", err, out)
	}
}

// The mixed example under conditional: fresh prompts go prefill →
// decode; `tsd apply` switches gateway.disaggregation to never live (no
// engine restarts) and every API is served aggregated; switched back to
// conditional, a prompt the aggregated engine now holds stays there.
func TestE2EMixedExampleApplySwitchesLayout(t *testing.T) {
	var prof map[string]any
	d, base, name := layoutExample(t, "mixed-conditional.yaml", func(p map[string]any) { prof = p })
	for _, r := range []string{"agg-0", "agg-1", "prefill", "decode"} {
		d.waitLine(0, r, "→ ready")
	}
	routes := serveEveryAPI(t, base)
	d.waitStatus(func(s snapshot.Snapshot) bool {
		return s.Gateway.Layouts != nil && s.Gateway.Layouts.PD == uint64(routes) && s.Gateway.InFlight == 0
	})
	pids := pidsOf(d.status())

	write := func(mode string) {
		prof["gateway"].(map[string]any)["disaggregation"] = mode
		b, err := json.Marshal(prof) // YAML is a superset of JSON
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := d.ctl("apply", "--yes", name); err != nil {
			t.Fatalf("tsd apply (disaggregation %s): %v\n%s", mode, err, out)
		}
		d.waitStatus(func(s snapshot.Snapshot) bool {
			return s.Gateway.Layouts != nil && s.Gateway.Layouts.Disaggregation == mode
		})
	}
	write("never")
	routes2 := serveEveryAPI(t, base)
	write("conditional")
	if st, b := postBody(t, base+"/v1/completions", `{"prompt":"Say hello","max_tokens":4}`); st != 200 {
		t.Fatalf("completions after the switch back: %d %s", st, b)
	}
	s := d.waitStatus(func(s snapshot.Snapshot) bool {
		return s.Gateway.Layouts.Aggregated == uint64(routes2+1) && s.Gateway.InFlight == 0
	})
	if s.Gateway.Layouts.PD != uint64(routes) {
		t.Fatalf("split %+v, want %d pd and %d aggregated", s.Gateway.Layouts, routes, routes2+1)
	}
	for role, pid := range pidsOf(s) {
		if pids[role] != pid {
			t.Errorf("%s restarted (pid %d → %d): a disaggregation change is live", role, pids[role], pid)
		}
	}
	if n := accessLayouts(t, d); n["pd"] != 7 || n["aggregated"] != 8 {
		t.Fatalf("access lines by layout %v, want 7 pd and 8 aggregated", n)
	}
	m := metricsText(t, base)
	for _, w := range []string{
		fmt.Sprintf(`tsd_gateway_layout_routes_total{layout="pd",reason="uncached_ratio"} %d`, routes),
		fmt.Sprintf(`tsd_gateway_layout_routes_total{layout="aggregated",reason="never"} %d`, routes2),
		`tsd_gateway_layout_routes_total{layout="aggregated",reason="uncached"} 1`,
	} {
		if !strings.Contains(m, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

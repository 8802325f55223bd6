package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `tsd up` on ts-fake with gateway.tool_call_parser / reasoning_parser
// set in the profile: the plan hands them to the gateway's OpenAI front
// end (a Qwen3-style reply comes back as reasoning_content and
// tool_calls) and --reasoning-parser to the engines.
func TestE2EProfileReplyParsers(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	model, err := filepath.Abs("../../gateway/tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	replies := `[{"match":"Weather in Oslo?","reply":"<think>Tool time.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"}]`
	if err := os.WriteFile(filepath.Join(dir, "replies.json"), []byte(replies), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	// The demo tokenizer's end of turn is id 1002 (generation_config.json).
	prof := fmt.Sprintf(`name: agent
model: %s
engine:
  command: [%s, serve]
  args: [--fake-replies, %s, --fake-eos-id, "1002"]
gateway:
  port: %d
  tool_call_parser: qwen
  reasoning_parser: qwen3
roles:
  - {name: prefill, kind: prefill, gpus: [0]}
  - {name: decode, kind: decode, gpus: [1]}
restart:
  stop_grace: 5s
`, model, fakeBin, filepath.Join(dir, "replies.json"), port)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSD(t, dir, "up", "--headless", "p.yaml")
	t.Cleanup(func() { _, _ = d.ctl("stop"); _ = d.wait() })
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	s := d.status()
	for _, name := range []string{"prefill", "decode"} {
		pid := roleStatus(t, s, name).PID
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), "--reasoning-parser qwen3") {
			t.Fatalf("%s command line lacks --reasoning-parser qwen3: %q", name, cmdline)
		}
	}
	body := `{"messages":[{"role":"user","content":"Weather in Oslo?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Choices []struct {
			Message struct {
				ReasoningContent string `json:"reasoning_content"`
				ToolCalls        []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || len(r.Choices) != 1 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	c := r.Choices[0]
	if c.FinishReason != "tool_calls" || c.Message.ReasoningContent != "Tool time." || len(c.Message.ToolCalls) != 1 ||
		c.Message.ToolCalls[0].Function.Name != "get_weather" || c.Message.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` {
		t.Fatalf("%s", b)
	}
}

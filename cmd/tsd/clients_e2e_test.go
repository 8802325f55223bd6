package main

// The OpenAI API as real clients read it, end to end: three npm clients we did not
// write (the official `openai` package, 4.x, 5.x, 6.x and latest;
// Vercel's AI SDK through @ai-sdk/openai-compatible and @ai-sdk/openai;
// LangChain's @langchain/openai) run their tool-calling, reasoning,
// structured-output, top-logprob and /v1/responses scenarios against `tsd up
// --headless` on ts-fake. The clients are pinned in
// testdata/clients/package.json (+ lock) and installed into the test
// cache (testkit/npmtest), never into the repo.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/testkit/npmtest"
)

// clientReplies are ts-fake's --fake-replies rules, tried in order against
// the rendered prompt (cmd/ts-fake/replies.go); the prompts are
// testdata/clients/lib.mjs's.
// A request under a json_schema constraint (tool_choice required or
// named, response_format json_schema) gets an instance of the schema
// instead, as a grammar-constrained engine would.
var clientReplies = []map[string]string{
	// A tool result in the history (the template renders it as a tool
	// turn): the model answers from it.
	{"match": "<|im_start|>tool\n", "reply": "It is sunny in Paris."},
	// Qwen3's hermes-style call, the format the qwen tool parser reads.
	{"match": "What is the weather in Paris?", "reply": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
	// JSON mode without a schema constraint: the prompt asked for JSON.
	{"match": "Describe a city as JSON.", "reply": `{"city": "Paris", "population": 2100000}`},
	{"match": "Say hello.", "reply": "Hello from tsd."},
	// Qwen3's think block, which the qwen3 reasoning parser splits off.
	{"match": "Think first:", "reply": "<think>The capital of France is Paris.</think>Paris."},
}

// clientScripts are the scripts in testdata/clients and the env that
// picks what each runs.
var clientScripts = []struct {
	name, script string
	env          []string
}{
	{"openai-latest", "openai.mjs", []string{"TSD_OPENAI_PKG=openai"}},
	{"openai-4", "openai.mjs", []string{"TSD_OPENAI_PKG=openai4"}},
	{"openai-5", "openai.mjs", []string{"TSD_OPENAI_PKG=openai5"}},
	{"openai-6", "openai.mjs", []string{"TSD_OPENAI_PKG=openai6"}},
	{"aisdk", "aisdk.mjs", nil},
	{"langchain", "langchain.mjs", nil},
}

// clientLine is one scenario's result as lib.mjs prints it.
type clientLine struct {
	Name   string              `json:"name"`
	OK     bool                `json:"ok"`
	Detail string              `json:"detail"`
	MS     int                 `json:"ms"`
	Fields map[string][]string `json:"fields"` // route → request-body key paths sent
}

// routes are the routes a scenario called.
func (l clientLine) routes() []string {
	var out []string
	for r := range l.Fields {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// fakeClientDeployment brings up a 1P1D deployment on ts-fake with the
// demo tokenizer (whose chat template renders tools and tool turns),
// served as qwen3-demo with the qwen (hermes-style <tool_call>) tool
// parser and the qwen3 reasoning parser named in the profile (the demo
// model's path names no family), and an API key. ts-fake ends a reply with the model's own EOS
// (<|im_end|>, config.json's eos_token_id) rather than its default id 2,
// which this vocabulary spells as a byte the reply would end with. It
// returns the OpenAI base URL and the key.
func fakeClientDeployment(t *testing.T) (base, key string) {
	t.Helper()
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	dir := t.TempDir()
	model, err := filepath.Abs("../../gateway/tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := json.Marshal(clientReplies)
	replies := filepath.Join(dir, "replies.json")
	if err := os.WriteFile(replies, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	port := freeCluster(t)
	key = "clients-e2e-key"
	prof := fmt.Sprintf(`name: clients-e2e
model: %s
served_model_name: qwen3-demo
engine:
  command: [%s, serve]
  args: [--enable-output-logprobs]
  env: {TS_FAKE_TOKENS_PER_S: "5000", TS_FAKE_STARTUP: 100ms, TS_FAKE_REPLIES: %q, TS_FAKE_EOS_ID: "1002"}
gateway:
  port: %d
  api_key_env: TSD_CLIENTS_E2E_KEY
  tool_call_parser: qwen
  reasoning_parser: qwen3
roles:
  - name: prefill
    gpus: [0]
  - name: decode
    gpus: [1]
restart:
  backoff: 200ms
  stop_grace: 5s
`, model, fakeBin, replies, port)
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(prof), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTSDEnv(t, dir, []string{"TSD_CLIENTS_E2E_KEY=" + key}, "up", "--headless", "p.yaml")
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	return fmt.Sprintf("http://127.0.0.1:%d/v1", port), key
}

// runClient runs one client script from a fresh directory beside the
// cached node_modules (ESM resolves packages from the script's own
// folder, so the scripts are copied next to a link to them).
func runClient(t *testing.T, modules, script string, env []string) ([]clientLine, string) {
	t.Helper()
	work := t.TempDir()
	for _, f := range []string{script, "lib.mjs", "package.json"} {
		b, err := os.ReadFile(filepath.Join("testdata/clients", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var lines []clientLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l clientLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Name != "" {
			lines = append(lines, l)
		}
	}
	if err != nil {
		return lines, fmt.Sprintf("node %s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	return lines, ""
}

// hasScenario reports whether a scenario whose name holds part ran.
func hasScenario(lines []clientLine, part string) bool {
	for _, l := range lines {
		if strings.Contains(l.Name, part) {
			return true
		}
	}
	return false
}

// TestE2EClients runs every client's scenarios against one deployment;
// each scenario is a subtest (client/scenario), so a failure names it and
// the client's own error. The request fields each client sent are
// logged (what the gateway's admission table must accept).
// TSD_CLIENTS_ONLY=name,name runs only those scenarios (debugging).
func TestE2EClients(t *testing.T) {
	t.Parallel()
	npmtest.NeedNodeMajor(t, 20)
	modules := npmtest.Project(t, "clients", "testdata/clients")
	base, key := fakeClientDeployment(t)
	for _, c := range clientScripts {
		t.Run(c.name, func(t *testing.T) {
			env := append([]string{"TSD_BASE_URL=" + base, "TSD_API_KEY=" + key, "TSD_MODEL=qwen3-demo"}, c.env...)
			if only := os.Getenv("TSD_CLIENTS_ONLY"); only != "" {
				env = append(env, "TSD_ONLY="+only)
			}
			lines, failed := runClient(t, modules, c.script, env)
			if failed != "" {
				t.Errorf("%s", failed)
			}
			if len(lines) == 0 && failed == "" && os.Getenv("TSD_CLIENTS_ONLY") != "" {
				t.Skip("TSD_CLIENTS_ONLY names none of its scenarios")
			}
			if len(lines) == 0 {
				t.Fatalf("%s printed no scenario", c.script)
			}
			if os.Getenv("TSD_CLIENTS_ONLY") == "" && !hasScenario(lines, "logprobs") {
				t.Errorf("%s ran no top-logprob scenario", c.name)
			}
			fields := map[string]map[string]bool{}
			for _, l := range lines {
				for r, fs := range l.Fields {
					if fields[r] == nil {
						fields[r] = map[string]bool{}
					}
					for _, f := range fs {
						fields[r][f] = true
					}
				}
				t.Run(l.Name, func(t *testing.T) {
					if !l.OK {
						t.Errorf("%s %s failed (%d ms, %v): %s", c.name, l.Name, l.MS, l.routes(), l.Detail)
						return
					}
					t.Logf("%s %s ok (%d ms): %s", c.name, l.Name, l.MS, l.Detail)
				})
			}
			for r, set := range fields {
				names := make([]string, 0, len(set))
				for f := range set {
					names = append(names, f)
				}
				sort.Strings(names)
				t.Logf("%s sent to %s: %s", c.name, r, strings.Join(names, " "))
			}
		})
	}
}

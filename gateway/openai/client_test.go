package openai

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/tokenizer/testcache"
)

// openaiClientDir installs the official openai npm package once into the
// test cache (network only on the first run) and returns its directory.
func openaiClientDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("skipping: npm is not installed")
	}
	dir := filepath.Join(testcache.Dir(), "node-openai")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
		return dir
	}
	unlock := testcache.Lock(t, "node-openai")
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err == nil {
		return dir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("skipping: test cache: %v", err)
	}
	_ = os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"tsd-openai-client-test","private":true}`), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "openai@5")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("skipping: npm install openai failed (registry unreachable?): %v\n%s", err, out)
	}
	return dir
}

// The official openai client (node) works against our handlers end to end.
func TestOfficialNodeClient(t *testing.T) {
	dir := openaiClientDir(t)
	tk := demoTokenizer(t)
	eng := newFake(tk, reply)
	srv := newTestServer(t, eng, Options{Model: "demo", APIKey: "test-key"})
	script, _ := filepath.Abs("testdata/client.mjs")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, srv.URL+"/v1")
	cmd.Env = append(os.Environ(), "OPENAI_DIR="+filepath.Join(dir, "node_modules", "openai"))
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node client: %v\n%s\n%s", err, out, stderr)
	}
	t.Logf("node client saw: %s", out)
	var res map[string]map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("node output %q: %v", out, err)
	}
	get := func(s, k string) any { return res[s][k] }
	check := func(cond bool, what string) {
		t.Helper()
		if !cond {
			t.Errorf("%s: %v", what, res)
		}
	}
	full := reply
	check(get("chat", "content") == full && get("chat", "finish") == "stop" && get("chat", "object") == "chat.completion", "chat")
	check(get("chat_stream", "content") == full && get("chat_stream", "finish") == "stop" && get("chat_stream", "role") == "assistant" && get("chat_stream", "usage") != nil, "chat_stream")
	toks, _ := tk.Encode(reply, false)
	first3 := tk.Decode(toks[:3], false)
	check(get("completion", "text") == first3 && get("completion", "finish") == "length", "completion")
	check(get("completion_stream", "text") == full && get("completion_stream", "finish") == "stop", "completion_stream")
	contents, _ := get("n2", "contents").([]any)
	check(len(contents) == 2 && contents[0] == full && contents[1] == full, "n2")
	check(get("stop", "content") == "Hello! How are you today? " && get("stop", "finish") == "stop" && get("stop", "streamed") == "Hello! How are you today? ", "stop")
	check(get("bad_request", "thrown") == true && get("bad_request", "status") == float64(400) && strings.Contains(get("bad_request", "message").(string), "top_logprobs"), "bad_request")
	check(get("bad_image", "status") == float64(400) && strings.Contains(get("bad_image", "message").(string), "takes no images"), "bad_image")
}

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

	"github.com/tsd-project/tsd/testkit/npmtest"
)

// openaiClientDir installs the official openai npm package once into the
// test cache (network only on the first run) and returns its directory.
func openaiClientDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(npmtest.Packages(t, "openai", "openai@5"), "node_modules", "openai")
}

// The official openai client (node) works against our handlers end to end.
func TestOfficialNodeClient(t *testing.T) {
	dir := openaiClientDir(t)
	tk := demoTokenizer(t)
	eng := newFake(tk, reply)
	srv := serveEngine(t, eng, tk, Options{Model: "demo"}, "test-key")
	script, _ := filepath.Abs("testdata/client.mjs")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, srv.URL+"/v1")
	cmd.Env = append(os.Environ(), "OPENAI_DIR="+dir)
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
	alts, _ := get("top_logprobs", "alternatives").([]any)
	allThree := len(alts) > 0
	for _, a := range alts {
		allThree = allThree && a == float64(3)
	}
	check(allThree && get("top_logprobs", "leads") == true && get("top_logprobs", "tokens") == float64(len(alts)), "top_logprobs")
	check(get("bad_request", "thrown") == true && get("bad_request", "status") == float64(400) && strings.Contains(get("bad_request", "message").(string), "top_logprobs"), "bad_request")
	check(get("bad_image", "status") == float64(400) && strings.Contains(get("bad_image", "message").(string), "takes no images"), "bad_image")
}

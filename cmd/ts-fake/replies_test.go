package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/parsers"
	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/testkit/lanetest"
)

const demoTokenizer = "../../gateway/tokenizer/testdata/demo"

func ids32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, x := range ids {
		out[i] = int32(x)
	}
	return out
}

// promptReq is a request whose prompt spells text in v.
func promptReq(t *testing.T, v *fakemodel.Vocab, rid, text string, stream bool) wire.GenerateRequest {
	t.Helper()
	ids, err := v.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	q := req(rid, 500, stream)
	q.InputIDs = ids32(ids)
	return q
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// --fake-replies: a prompt containing a rule's substring gets the rule's
// reply spelled token by token, then EOS ("stop"); other prompts get the
// usual deterministic tokens. Without a tokenizer the ids are the bytes.
func TestFakeRepliesByteVocab(t *testing.T) {
	t.Parallel()
	call := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\"}}\n</tool_call>"
	rules, _ := json.Marshal([]map[string]string{{"match": "weather", "reply": call}, {"match": "hello", "reply": "Hi there!"}})
	fe, _ := readyFake(t, 1, "--fake-replies", writeFile(t, "replies.json", string(rules)))
	ctx := ctxFor(t, 30*time.Second)
	bv := fakemodel.ByteVocab()
	qs := []wire.GenerateRequest{
		promptReq(t, bv, "w", "<|im_start|>user\nWhat is the weather in Tokyo?<|im_end|>", true),
		promptReq(t, bv, "h", "say hello", false),
		req("other", 7, false),
	}
	for _, q := range qs {
		if err := fe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := fe.Results(ctx, "w", "h", "other")
	if err != nil {
		t.Fatal(err)
	}
	for rid, want := range map[string]string{"w": call, "h": "Hi there!"} {
		r := got[rid]
		if r.Finish != "stop" || len(r.Tokens) == 0 || r.Tokens[len(r.Tokens)-1] != 2 {
			t.Fatalf("%s: %+v, want the reply then EOS 2", rid, r)
		}
		if text := bv.Decode(r.Tokens[:len(r.Tokens)-1]); text != want {
			t.Errorf("%s spelled %q, want %q", rid, text, want)
		}
	}
	if want, reason := expected(qs[2]); !equalTokens(got["other"].Tokens, want) || got["other"].Finish != reason {
		t.Errorf("unmatched prompt: %v %q, want %v %q", got["other"].Tokens, got["other"].Finish, want, reason)
	}
}

// With the demo tokenizer (env knob, text rules) prompts are read and
// replies spelled through its vocabulary, ending in its EOS.
func TestFakeRepliesDemoTokenizer(t *testing.T) {
	t.Parallel()
	rules := "# comment\nParis\tThe weather in Paris:\\n<think>sunny</think> 22°C\n"
	fe := startFrontend(t, lanetest.Options{})
	startFakeEnv(t, fe, []string{"TS_FAKE_REPLIES=" + writeFile(t, "replies.txt", rules)},
		"--tokenizer", demoTokenizer, "--fake-eos-id", "1002", "--fake-token-min", "256")
	if _, err := fe.WaitRegistered(ctxFor(t, 30*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	demo, err := fakemodel.LoadVocab(demoTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	if err := fe.Submit(0, promptReq(t, demo, "p", "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n", true)); err != nil {
		t.Fatal(err)
	}
	r, err := fe.Result(ctxFor(t, 30*time.Second), "p")
	if err != nil {
		t.Fatal(err)
	}
	want := "The weather in Paris:\n<think>sunny</think> 22°C"
	if r.Finish != "stop" || r.Tokens[len(r.Tokens)-1] != 1002 || demo.Decode(r.Tokens[:len(r.Tokens)-1]) != want {
		t.Fatalf("%+v spells %q, want %q then <|im_end|>", r, demo.Decode(r.Tokens), want)
	}
	if wantIDs, _ := demo.Encode(want); len(r.Tokens) != len(wantIDs)+1 {
		t.Errorf("%d tokens, want %d (merged tokens, not bytes)", len(r.Tokens), len(wantIDs)+1)
	}
}

// A json_schema request (tool_choice enforcement) is answered with an
// instance of the schema, which parses back into calls; a schema that
// cannot be satisfied aborts the request.
func TestJSONSchemaReply(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1)
	ctx := ctxFor(t, 30*time.Second)
	tools := []parsers.Tool{
		{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","minLength":2},"unit":{"enum":["c","f"]}},"required":["city","unit"]}`)},
		{Name: "get_time"},
	}
	required, _, err := parsers.ToolChoiceSchema(tools, parsers.ToolChoice{Mode: "required"})
	if err != nil {
		t.Fatal(err)
	}
	named, _, err := parsers.ToolChoiceSchema(tools, parsers.ToolChoice{Mode: "function", Name: "get_weather"})
	if err != nil {
		t.Fatal(err)
	}
	bad := `{"$ref":"#/$defs/missing"}`
	for rid, s := range map[string]string{"required": required, "named": named, "bad": bad} {
		q := req(rid, 500, true)
		q.Sampling.JSONSchema = &s
		if err := fe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := fe.Results(ctx, "required", "named", "bad")
	if err != nil {
		t.Fatal(err)
	}
	bv := fakemodel.ByteVocab()
	text := func(r []int32) string { return bv.Decode(r[:len(r)-1]) }
	// The reply reads back as calls through the front end's parser chain
	// for that tool_choice, with nothing left over as content.
	parse := func(r []int32, c parsers.ToolChoice) delta.Result {
		st, err := parsers.New(parsers.Config{ToolChoice: c})
		if err != nil {
			t.Fatal(err)
		}
		return delta.Collect(append(st.Push(text(r)), st.Finish()...))
	}
	res := parse(got["required"].Tokens, parsers.ToolChoice{Mode: "required"})
	if delta.TrimSpace(res.Content) != "" || len(res.Calls) != 1 || res.Calls[0].Name != "get_weather" || res.Calls[0].Arguments != `{"city":"aa","unit":"c"}` {
		t.Errorf("required: %q -> %+v", text(got["required"].Tokens), res)
	}
	res = parse(got["named"].Tokens, parsers.ToolChoice{Mode: "function", Name: "get_weather"})
	if delta.TrimSpace(res.Content) != "" || len(res.Calls) != 1 || res.Calls[0].Arguments != `{"city":"aa","unit":"c"}` {
		t.Errorf("named: %q -> %+v", text(got["named"].Tokens), res)
	}
	if r := got["bad"]; r.Finish != "abort" || len(r.Tokens) != 0 {
		t.Errorf("unsatisfiable schema: %+v, want an abort", r)
	}
}

// A bad replies file is an argument error naming the file and line.
func TestFakeRepliesBadFile(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{"a.txt": "no tab here\n", "b.json": `[{"match": "x"}]`, "c.json": `{"x": 1}`} {
		p := startFake(t, nil, "--fake-replies", writeFile(t, name, body))
		rc, err := p.exit(ctxFor(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if rc != 2 {
			t.Errorf("%s: exit %d, want 2", name, rc)
		}
		if err := p.log.wait(ctxFor(t, 30*time.Second), name); err != nil {
			t.Error(err)
		}
	}
	if rc, _ := startFake(t, nil, "--fake-replies", "/nonexistent/replies.json").exit(ctxFor(t, 30*time.Second)); rc != 2 {
		t.Errorf("missing file: exit %d", rc)
	}
}

// In json_object mode (json_schema {"type":"object"}) a matching rule
// whose reply is a JSON object is the answer; a non-object reply, or no
// match, gets the schema instance {}.
func TestJSONObjectModeReply(t *testing.T) {
	t.Parallel()
	rules, _ := json.Marshal([]map[string]string{{"match": "recipe", "reply": `{"name":"soup","steps":["boil"]}`}, {"match": "plain", "reply": "not json"}})
	fe, _ := readyFake(t, 1, "--fake-replies", writeFile(t, "replies.json", string(rules)))
	bv := fakemodel.ByteVocab()
	anyObject := `{"type":"object"}`
	for _, q := range []wire.GenerateRequest{promptReq(t, bv, "r", "a recipe please", true), promptReq(t, bv, "p", "plain", true), promptReq(t, bv, "n", "nothing", true)} {
		q.Sampling.JSONSchema = &anyObject
		if err := fe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := fe.Results(ctxFor(t, 30*time.Second), "r", "p", "n")
	if err != nil {
		t.Fatal(err)
	}
	for rid, want := range map[string]string{"r": `{"name":"soup","steps":["boil"]}`, "p": `{}`, "n": `{}`} {
		r := got[rid]
		if text := bv.Decode(r.Tokens[:len(r.Tokens)-1]); r.Finish != "stop" || text != want {
			t.Errorf("%s: %+v spells %q, want %q", rid, r, text, want)
		}
	}
}

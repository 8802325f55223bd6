package gateway

// Aggregated engines (ts-fake in aggregate serving, --disaggregation-mode
// null) behind the gateway: an aggregated-only deployment serves every
// API through one leg per request, and a mixed one routes per request by
// gateway.disaggregation, switched live.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/profiles"
)

// layoutCluster is a deployment of rs on ts-fake behind the OpenAI front
// end (Qwen3's parsers, scripted replies in the demo tokenizer's
// vocabulary, as agentCluster) and /generate, with edit applied to the
// plan and the gateway's log (its access lines) kept in log.
func layoutCluster(t *testing.T, edit func(*profiles.Plan), rs ...role) (*cluster, *syncBuf) {
	t.Helper()
	rules := []map[string]string{
		{"match": "Weather in Paris?", "reply": "<think>The user wants the weather; I call the tool.</think>\n\n" +
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"},
		{"match": "Say hello", "reply": "Plain answer."},
	}
	b, _ := json.Marshal(rules)
	path := filepath.Join(t.TempDir(), "replies.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(demoTok)
	if err != nil {
		t.Fatal(err)
	}
	mount := func(e tokenapi.Engine, mux *http.ServeMux) {
		openai.New(e, tok, openai.Options{ToolCallParser: "qwen", ReasoningParser: "qwen3"}).Register(mux)
	}
	extra := []string{"--fake-replies", path, "--tokenizer", demoTok, "--fake-eos-id", "1002", "--reasoning-parser", "qwen3", "--enable-output-logprobs"}
	for i := range rs {
		rs[i].extra = append(append([]string{}, extra...), rs[i].extra...)
	}
	log := &syncBuf{b: &bytes.Buffer{}}
	opts := Options{Mount: mount, Logger: slog.New(slog.NewTextHandler(log, nil))}
	c := newClusterWith(t, opts, "tsd", profiles.ModePD, edit, rs...)
	c.waitRegistered(roleNames(rs)...)
	return c, log
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// accessLines are the gateway log's access lines.
func accessLines(log *syncBuf) []string {
	var out []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "msg=access") {
			out = append(out, l)
		}
	}
	return out
}

// An aggregated-only deployment is ready with its aggregated ranks and
// serves every API through one leg per request: chat (a tool call,
// streamed and not), n = 2 with logprobs, completions, Responses,
// /generate (streamed and not) with prompt logprobs from the one leg, and
// cached_tokens from the engine that cached the prompt; each access line
// says layout=aggregated with its one rank, /metrics counts the routes
// and the status carries the split and the aggregated policy.
func TestAggregatedOnlyServesEveryAPI(t *testing.T) {
	t.Parallel()
	c, log := layoutCluster(t, func(p *profiles.Plan) { p.Gateway.Policy.Aggregated = "cache_aware" },
		role{name: "agg-0", kind: profiles.KindAggregated}, role{name: "agg-1", kind: profiles.KindAggregated})
	if st, b := getBody(t, c.base+"/readiness"); st != 200 || !strings.Contains(b, `"healthy_workers":2`) {
		t.Fatalf("/readiness: %d %s", st, b)
	}
	ask := `{"model":"fake","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":` + agentTools + `%s}`
	m, finish := chatOnce(t, c.base, fmt.Sprintf(ask, ""))
	if finish != "tool_calls" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" {
		t.Fatalf("chat: %s %+v", finish, m)
	}
	_, _, calls, finish := chatStream(t, c.base, fmt.Sprintf(ask, `,"stream":true`))
	if finish != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" {
		t.Fatalf("chat streamed: %s %+v", finish, calls)
	}

	st, b := postJSON(t, c.base+"/v1/chat/completions", `{"model":"fake","n":2,"logprobs":true,"max_tokens":6,"messages":[{"role":"user","content":"Say hello"}]}`)
	var two struct {
		Choices []struct {
			Message  e2eMsg `json:"message"`
			Logprobs struct {
				Content []struct{ Token string } `json:"content"`
			} `json:"logprobs"`
		}
	}
	if err := json.Unmarshal(b, &two); st != 200 || err != nil || len(two.Choices) != 2 || len(two.Choices[0].Logprobs.Content) == 0 || len(two.Choices[1].Logprobs.Content) == 0 {
		t.Fatalf("n=2 with logprobs: %d %s", st, b)
	}

	if st, b := postJSON(t, c.base+"/v1/completions", `{"model":"fake","prompt":"Say hello","max_tokens":5}`); st != 200 || !strings.Contains(string(b), `"text":`) {
		t.Fatalf("completions: %d %s", st, b)
	}
	if st, b := postJSON(t, c.base+"/v1/responses", `{"model":"fake","input":"Say hello"}`); st != 200 || !strings.Contains(string(b), "Plain answer.") {
		t.Fatalf("responses: %d %s", st, b)
	}

	prompt := []int32{11, 12, 13, 14, 15}
	for _, stream := range []bool{false, true} {
		st, rs, msg := postGenerate(t, c.base, fmt.Sprintf(`{"input_ids":[11,12,13,14,15],"stream":%v,"return_logprob":true,"logprob_start_len":0,"sampling_params":{"max_new_tokens":4,"ignore_eos":true}}`, stream))
		if st != 200 || len(rs) == 0 {
			t.Fatalf("/generate stream=%v: %d %s", stream, st, msg)
		}
		checkPromptLPs(t, rs[0].MetaInfo.Input, prompt, 0)
		var ids []int32
		for _, r := range rs {
			if stream {
				ids = append(ids, r.OutputIDs...)
			} else {
				ids = r.OutputIDs
			}
		}
		if len(ids) != 4 {
			t.Fatalf("/generate stream=%v: %d tokens", stream, len(ids))
		}
	}

	// cache_aware sends the same long prompt back to the engine that
	// computed it: its second answer reports the prefix cached.
	long := `{"model":"fake","max_tokens":3,"messages":[{"role":"user","content":"Say hello` + strings.Repeat(" to everyone in the room", 40) + `"}]}`
	var cached int
	for range 2 {
		st, b := postJSON(t, c.base+"/v1/chat/completions", long)
		var r struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &r); st != 200 || err != nil {
			t.Fatalf("long chat: %d %s", st, b)
		}
		cached = r.Usage.Details.Cached
	}
	if cached == 0 {
		t.Fatal("a repeated prompt on the aggregated engine that cached it reported no cached_tokens")
	}

	waitRecordsEnded(t, c.g, 9)
	lines := accessLines(log)
	if len(lines) != 9 {
		t.Fatalf("%d access lines, want 9:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if !strings.Contains(l, "layout=aggregated layout_reason=never") || !strings.Contains(l, "aggregated_rank=0") || strings.Contains(l, "prefill_rank") {
			t.Fatalf("access line %q", l)
		}
	}
	_, metrics := getBody(t, c.base+"/metrics")
	// n = 2 is two routes, one per sample.
	if !strings.Contains(metrics, `tsd_gateway_layout_routes_total{layout="aggregated",reason="never"} 10`) {
		t.Fatalf("/metrics layout routes:\n%s", grepLines(metrics, "layout_routes"))
	}
	s := c.g.Status()
	if !s.Ready || s.Layouts == nil || s.Layouts.Aggregated != 10 || s.Layouts.PD != 0 || s.Policy.Aggregated != "cache_aware" {
		t.Fatalf("status ready %v layouts %+v policy %+v", s.Ready, s.Layouts, s.Policy)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A mixed deployment under conditional: a fresh prompt goes prefill →
// decode (its uncached share is the whole prompt); switched live to
// never, requests warm the aggregated engine; back under conditional a
// turn that extends a prompt it holds goes there (layout=aggregated
// uncached=... ratio=...). With the aggregated engine gone, conditional
// sends everything prefill → decode and the deployment stays ready.
func TestMixedConditionalRoutesPerRequest(t *testing.T) {
	t.Parallel()
	c, log := layoutCluster(t, func(p *profiles.Plan) {
		p.Gateway.Policy.Aggregated = "cache_aware"
		p.Gateway.Disaggregation = profiles.DisaggConditional
		p.Gateway.Conditional = profiles.ConditionalPlan{MaxUncachedTokens: 2048, MaxUncachedRatio: 0.7}
	}, role{name: "agg", kind: profiles.KindAggregated}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprint(100 + i)
	}
	body := func(extra string) string {
		return `{"input_ids":[` + strings.Join(ids, ",") + extra + `],"sampling_params":{"max_new_tokens":3,"ignore_eos":true}}`
	}
	gen := func(b string) {
		t.Helper()
		if st, rs, msg := postGenerate(t, c.base, b); st != 200 || len(rs) != 1 || len(rs[0].OutputIDs) != 3 {
			t.Fatalf("/generate: %d %s", st, msg)
		}
	}
	gen(body(""))
	plan := c.plan.Gateway
	plan.Disaggregation = profiles.DisaggNever
	if err := c.g.Reconfigure(plan, "", nil); err != nil {
		t.Fatal(err)
	}
	gen(body(""))
	plan.Disaggregation = profiles.DisaggConditional
	if err := c.g.Reconfigure(plan, "", nil); err != nil {
		t.Fatal(err)
	}
	gen(body(",1,2,3,4,5,6"))
	c.kill("agg")
	gen(body(",7,8"))
	if st, _ := getBody(t, c.base+"/readiness"); st != 200 {
		t.Fatalf("/readiness without the aggregated engine under conditional: %d", st)
	}
	waitRecordsEnded(t, c.g, 4)
	lines := accessLines(log)
	want := []string{
		"layout=pd layout_reason=uncached_ratio uncached=300 ratio=1.00 route=round_robin",
		"layout=aggregated layout_reason=never route=cache_aware",
		"layout=aggregated layout_reason=uncached uncached=6 ratio=0.02 route=cache_aware",
		"layout=pd layout_reason=no_aggregated_worker route=round_robin",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d access lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("access line %d %q lacks %q", i, lines[i], w)
		}
	}
	_, metrics := getBody(t, c.base+"/metrics")
	for _, w := range []string{
		`tsd_gateway_layout_routes_total{layout="pd",reason="uncached_ratio"} 1`,
		`tsd_gateway_layout_routes_total{layout="aggregated",reason="uncached"} 1`,
		`tsd_gateway_route_decisions_total{kind="aggregated",policy="cache_aware",reason="cache_hit"} 1`,
	} {
		if !strings.Contains(metrics, w) {
			t.Errorf("/metrics lacks %s:\n%s", w, grepLines(metrics, "tsd_gateway_"))
		}
	}
	if l := c.g.Status().Layouts; l == nil || l.Disaggregation != "conditional" || l.PD != 2 || l.Aggregated != 2 {
		t.Fatalf("split %+v", l)
	}
}

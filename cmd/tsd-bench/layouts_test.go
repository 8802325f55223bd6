package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// An example profile is made to run on ts-fake under the performance
// model and nothing else of it changes: roles, GPUs and the gateway's
// routing keys stay the example's.
func TestLayoutProfile(t *testing.T) {
	src, err := os.ReadFile("../../profiles/examples/mixed-conditional.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := layoutProfile(src, "bench-mixed", "/b/ts-fake", "/tok", "llama-3.1-8b-bf16-h200", 18123)
	if err != nil {
		t.Fatal(err)
	}
	var p, orig map[string]any
	if err := yaml.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	_ = yaml.Unmarshal(src, &orig)
	eng := p["engine"].(map[string]any)
	args := strings.Join(toStrings(eng["args"]), " ")
	if p["name"] != "bench-mixed" || p["model"] != "/tok" || p["tokenizer"] != "/tok" || toStrings(eng["command"])[0] != "/b/ts-fake" ||
		!strings.Contains(args, "--fake-perf llama-3.1-8b-bf16-h200") || !strings.Contains(args, "--fake-startup 0") || !strings.Contains(args, "--fake-eos-id -1") {
		t.Fatalf("profile:\n%s", out)
	}
	gw, ogw := p["gateway"].(map[string]any), orig["gateway"].(map[string]any)
	if gw["port"] != uint64(18123) || gw["host"] != "127.0.0.1" || gw["disaggregation"] != ogw["disaggregation"] {
		t.Fatalf("gateway %v (example's %v)", gw, ogw)
	}
	if a, b := mustJSON(t, p["roles"]), mustJSON(t, orig["roles"]); a != b {
		t.Fatalf("roles changed:\n%s\nwant\n%s", a, b)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The section: goodput side by side per rate (the best in bold), the
// detail rows, where the aggregated layout broke TPOT, the winner and
// why, that the figures are simulated and on what, and, when conditional
// does not win, that the preset was not tuned.
func TestRenderLayouts(t *testing.T) {
	raw := `{"workload":"mixed: 10 requests","slo":"ttft<=1000ms tpot<=10ms",
	"simulated":"simulated (ts-fake performance model p: rests on q)","winner":"pd-2p2d","reason":"pd-2p2d (2P+2D): 3 req/s met ...",
	"layouts":[
	 {"name":"agg-4","shape":"aggregated ×4","points":[
	   {"request_rate":24,"summary":{"request_throughput":24,"request_goodput":20,"goodput":{"request_goodput":20,"slo_attainment":0.8,"slo_broken":{"tpot":0.05}}}},
	   {"request_rate":40,"summary":{"request_throughput":39,"request_goodput":10,"p99_itl_ms":136,"goodput":{"request_goodput":10,"slo_attainment":0.25,"slo_broken":{"tpot":0.7}}}}]},
	 {"name":"pd-2p2d","shape":"2P+2D","points":[
	   {"request_rate":24,"summary":{"request_throughput":24,"request_goodput":23,"goodput":{"request_goodput":23,"slo_attainment":0.95}}},
	   {"request_rate":40,"summary":{"request_throughput":40,"request_goodput":38,"goodput":{"request_goodput":38,"slo_attainment":0.95}}}]},
	 {"name":"mixed-conditional","shape":"2A+1P+1D","error":"did not come up: boom","points":[]}]}`
	var rep layoutsReport
	if err := json.Unmarshal([]byte(raw), &rep); err != nil {
		t.Fatal(err)
	}
	md := renderLayouts(layoutsRun{Report: rep, Options: layoutsOptions{preset: "p", outputLen: 200}}, env{commit: "abc123", cpu: "Xeon", cores: 2, load: "1.0 2.0 3.0"})
	for _, want := range []string{
		layoutsHeading,
		"**Simulated figures** (ts-fake performance model p: rests on q): ts-fake's performance model times",
		"| rate (req/s) | agg-4 (aggregated ×4) | pd-2p2d (2P+2D) | mixed-conditional (2A+1P+1D) |",
		"| 24 | 20.00 | **23.00** | – |",
		"| 40 | 10.00 | **38.00** | – |",
		"agg-4 (aggregated ×4) breaks the TPOT objective (more than 10% of its requests miss it) from 40 req/s: 70% missed it there, ITL p99 136 ms.",
		"**Winner: pd-2p2d.** Why: pd-2p2d (2P+2D): 3 req/s met ...",
		"The conditional layout does not win here.",
		"- mixed-conditional: did not come up: boom",
		"Commit abc123, on Xeon (2 cores, load average 1.0 2.0 3.0 at the start;",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	md = renderLayouts(layoutsRun{Err: "exec: tsd: not found"}, env{})
	if !strings.Contains(md, "Not measured: exec: tsd: not found") {
		t.Errorf("a run that failed: %s", md)
	}
}

// A layouts-only run replaces its own section and keeps the others.
func TestSpliceSection(t *testing.T) {
	doc := "# t\n\n## A\n\na\n\n" + layoutsHeading + "\n\nold\n\n## B\n\nb\n"
	got := spliceSection(doc, layoutsHeading, layoutsHeading+"\n\nnew\n\n")
	if got != "# t\n\n## A\n\na\n\n"+layoutsHeading+"\n\nnew\n\n## B\n\nb\n" {
		t.Fatalf("spliced:\n%s", got)
	}
	got = spliceSection("# t\n\n## A\n\na\n", layoutsHeading, layoutsHeading+"\n\nnew\n")
	if got != "# t\n\n## A\n\na\n\n"+layoutsHeading+"\n\nnew\n" {
		t.Fatalf("appended:\n%q", got)
	}
	got = spliceSection("# t\n\n"+layoutsHeading+"\n\nold\n", layoutsHeading, layoutsHeading+"\n\nnew\n")
	if got != "# t\n\n"+layoutsHeading+"\n\nnew\n" {
		t.Fatalf("last section:\n%q", got)
	}
}

// The command line of the rows: every layout, four simulated GPUs, the
// mixed workload, the sweep and the SLO, JSON and PNG.
func TestLayoutsArgv(t *testing.T) {
	o := layoutsOptions{rates: "24,40", requests: 100, goodput: "ttft:1000,tpot:10", outputLen: 200}
	got := strings.Join(layoutsArgv(o, "tsd", []string{"a.yaml", "b.yaml"}, "r.json", "r.png"), " ")
	want := "tsd bench --layouts a.yaml,b.yaml --fake-gpus 4 --dataset-name mixed --num-prompts 100 --mixed-chat-output-len 200 --mixed-rag-output-len 200 " +
		"--request-rate 24,40 --seed 1 --output-file r.json --plot r.png --disable-tqdm --goodput ttft:1000,tpot:10"
	if got != want {
		t.Fatalf("argv\n%s\nwant\n%s", got, want)
	}
}

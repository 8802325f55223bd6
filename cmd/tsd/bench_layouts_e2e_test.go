package main

import (
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// layoutExamples are the shipped example profiles the layouts e2e test
// compares: an aggregated, a PD and a mixed conditional layout.
var layoutExamples = []string{"agg-4.yaml", "pd-1p3d.yaml", "mixed-conditional.yaml"}

// TestE2EBenchLayouts: `tsd bench --layouts` over three example profiles
// on ts-fake (made quick: no startup delay, unpaced tokens, a small mixed
// workload at two small rates): every layout is brought up, measured at
// every rate and stopped (no deployment left registered, no engine left
// running), a winner is named with a reason, and the JSON and the PNG are
// written. It asserts structure, never timings.
func TestE2EBenchLayouts(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	examples := layoutExamples
	for _, e := range examples {
		if _, err := os.Stat(filepath.Join("../../profiles/examples", e)); err != nil {
			t.Fatalf("example profile %s: %v", e, err)
		}
	}
	var paths []string
	for i, e := range examples {
		_, path := fakeExample(t, e, func(p map[string]any) {
			p["name"] = fmt.Sprintf("%s-%d", testDeploymentName(t), i)
			eng := p["engine"].(map[string]any)
			eng["args"] = []any{"--fake-startup", "0", "--fake-tokens-per-s", "0", "--fake-eos-id", "-1", "--fake-log-requests=false"}
			p["restart"] = map[string]any{"stop_grace": "5s"}
		})
		paths = append(paths, path)
	}
	reg := t.TempDir()
	out := t.TempDir()
	jsonPath, pngPath := filepath.Join(out, "layouts.json"), filepath.Join(out, "layouts.png")
	cmd := exec.Command(tsdBin, "bench", "--layouts", strings.Join(paths, ","), "--fake-gpus", "4",
		"--dataset-name", "mixed", "--num-prompts", "12", "--mixed-rag-len", "300", "--mixed-system-prompt-len", "40", "--mixed-chat-len", "10",
		"--mixed-chat-output-len", "4", "--mixed-rag-output-len", "4", "--request-rate", "20,40", "--num-warmups", "2",
		"--goodput", "ttft:60000", "tpot:60000", "--output-file", jsonPath, "--plot", pngPath, "--layout-timeout", "2m")
	cmd.Dir = out
	cmd.Env = append(os.Environ(), "TSD_REGISTRY_DIR="+reg)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tsd bench --layouts: %v\n%s", err, b)
	}
	text := string(b)
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatalf("no JSON: %v\n%s", err, text)
	}
	var rep struct {
		Workload, SLO, Simulated, Winner, Reason string
		Layouts                                  []struct {
			Name, Shape, Error string
			Points             []struct {
				RequestRate float64 `json:"request_rate"`
				Summary     struct {
					Completed, Failed int
					Goodput           *struct {
						Goodput float64 `json:"request_goodput"`
						Judged  int     `json:"judged_requests"`
					} `json:"goodput"`
				} `json:"summary"`
			} `json:"points"`
		}
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, raw)
	}
	if len(rep.Layouts) != len(examples) {
		t.Fatalf("%d layouts in the JSON, want %d\n%s", len(rep.Layouts), len(examples), text)
	}
	for i, l := range rep.Layouts {
		if want := strings.TrimSuffix(examples[i], ".yaml"); l.Name != want || l.Shape == "" || l.Error != "" {
			t.Errorf("layout %d: name %q shape %q error %q, want %q and no error", i, l.Name, l.Shape, l.Error, want)
		}
		if len(l.Points) != 2 || l.Points[0].RequestRate != 20 || l.Points[1].RequestRate != 40 {
			t.Fatalf("layout %s: points %+v, want rates 20 and 40", l.Name, l.Points)
		}
		for _, p := range l.Points {
			if p.Summary.Completed+p.Summary.Failed != 12 || p.Summary.Goodput == nil || p.Summary.Goodput.Judged != 12 {
				t.Errorf("layout %s at %g: %+v", l.Name, p.RequestRate, p.Summary)
			}
		}
		if !strings.Contains(text, l.Name+" ("+l.Shape+"): starting") {
			t.Errorf("no start line for %s:\n%s", l.Name, text)
		}
	}
	if rep.Winner == "" || !strings.HasPrefix(rep.Reason, rep.Winner+" (") || rep.SLO != "ttft<=60000ms tpot<=60000ms" ||
		!strings.HasPrefix(rep.Workload, "mixed: 12 requests") || !strings.HasPrefix(rep.Simulated, "simulated (ts-fake") {
		t.Errorf("winner %q, reason %q, slo %q, workload %q, simulated %q", rep.Winner, rep.Reason, rep.SLO, rep.Workload, rep.Simulated)
	}
	for _, want := range []string{"Winner: " + rep.Winner, "Why: " + rep.Reason, "Figures simulated (ts-fake", "Plot: " + pngPath} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	// Every layout was stopped: none is left registered.
	ls := exec.Command(tsdBin, "ls")
	ls.Env = cmd.Env
	if lb, _ := ls.CombinedOutput(); strings.Contains(string(lb), testDeploymentName(t)) {
		t.Errorf("a layout is still registered after the bench:\n%s", lb)
	}
}

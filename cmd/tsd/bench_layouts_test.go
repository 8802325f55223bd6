package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/loadgen"
	"github.com/tsd-project/tsd/profiles"
)

// parseBench parses a `tsd bench` command line as main does.
func parseBench(t *testing.T, args ...string) benchCmd {
	t.Helper()
	var c cli
	p, err := newParser(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(goodputArgs(append([]string{"bench"}, args...))); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return c.Bench
}

// --goodput takes vLLM's space-separated pairs: the pairs after the flag
// join its value, and nothing else does.
func TestGoodputArgs(t *testing.T) {
	for _, c := range []struct {
		in, want []string
	}{
		{[]string{"bench", "--goodput", "ttft:1000", "tpot:50", "x.yaml"}, []string{"bench", "--goodput", "ttft:1000,tpot:50", "x.yaml"}},
		{[]string{"bench", "--goodput=ttft:1000", "e2el:9000", "--num-prompts", "3"}, []string{"bench", "--goodput=ttft:1000,e2el:9000", "--num-prompts", "3"}},
		{[]string{"bench", "--goodput", "ttft:1000,tpot:50"}, []string{"bench", "--goodput", "ttft:1000,tpot:50"}},
		{[]string{"bench", "x.yaml", "ttft:1000"}, []string{"bench", "x.yaml", "ttft:1000"}},
		{[]string{"bench", "--goodput"}, []string{"bench", "--goodput"}},
		{[]string{"bench", "--", "--goodput", "ttft:1", "tpot:2"}, []string{"bench", "--", "--goodput", "ttft:1", "tpot:2"}},
	} {
		if got := goodputArgs(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("goodputArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	b := parseBench(t, "--goodput", "ttft:1000", "tpot:50", "--base-url", "http://x")
	slo, err := loadgen.ParseSLO(b.Goodput)
	if err != nil || slo != (loadgen.SLO{TTFT: time.Second, TPOT: 50 * time.Millisecond}) || b.Target != "" {
		t.Fatalf("parsed %+v (target %q): %v", slo, b.Target, err)
	}
}

// --request-rate is one rate, inf, or a list (a sweep).
func TestParseRates(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []float64
		bad  bool
	}{
		{"inf", []float64{math.Inf(1)}, false},
		{"4", []float64{4}, false},
		{"1,2, 4,8", []float64{1, 2, 4, 8}, false},
		{"0.5,inf", []float64{0.5, math.Inf(1)}, false},
		{"-3", nil, true},
		{"1,,2", nil, true},
		{"fast", nil, true},
	} {
		got, err := parseRates(c.in)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "--request-rate") {
				t.Errorf("%q: error %v", c.in, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %v %v, want %v", c.in, got, err, c.want)
		}
	}
}

// Against a gateway that wants a key, looking the model up names
// --api-key-env and the variables tried, not "no model listed (pass
// --model)" as it used to; with the key in the profile's variable the
// lookup succeeds.
func TestBenchKeyedGatewayNamesAPIKeyEnv(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sekrit" {
			http.Error(w, `{"error":{"message":"invalid api key"}}`, http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"data":[{"id":"demo"}]}`)
	}))
	defer srv.Close()
	flagEnv, profEnv := "TSD_TEST_BENCH_KEY_A", "TSD_TEST_BENCH_KEY_B"
	t.Setenv(flagEnv, "")
	t.Setenv(profEnv, "")
	c := parseBench(t, "--base-url", srv.URL, "--api-key-env", flagEnv)
	tg := benchTarget{base: srv.URL, profKeyEnv: profEnv}
	err := c.resolveModel(context.Background(), &tg)
	if err == nil || !strings.Contains(err.Error(), "--api-key-env") || !strings.Contains(err.Error(), "$"+flagEnv+" or $"+profEnv) ||
		strings.Contains(err.Error(), "no model listed") {
		t.Fatalf("error %v: want one naming --api-key-env and both variables", err)
	}
	t.Setenv(flagEnv, "wrong")
	tg = benchTarget{base: srv.URL, profKeyEnv: profEnv}
	if err := c.resolveModel(context.Background(), &tg); err == nil || !strings.Contains(err.Error(), "the key in $"+flagEnv+" was refused") {
		t.Fatalf("a refused key: %v", err)
	}
	t.Setenv(flagEnv, "")
	t.Setenv(profEnv, "sekrit")
	tg = benchTarget{base: srv.URL, profKeyEnv: profEnv}
	if err := c.resolveModel(context.Background(), &tg); err != nil || tg.model != "demo" || tg.apiKey != "sekrit" {
		t.Fatalf("with the profile's key: model %q key %q: %v", tg.model, tg.apiKey, err)
	}
}

// --random-input-len counts tokens of the served model's tokenizer, not
// words: on the demo tokenizer 256 used to send about 515 tokens.
func TestBenchRandomInputLenCountsTokens(t *testing.T) {
	dir, err := filepath.Abs("../../gateway/tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--random-input-len", "256", "--num-prompts", "20", "--tokenizer", dir},
		{"--dataset-name", "mixed", "--num-prompts", "20", "--mixed-rag-len", "900", "--tokenizer", dir},
	} {
		c := parseBench(t, append(args, "--base-url", "http://x")...)
		count, err := c.tokenCounter("")
		if err != nil {
			t.Fatal(err)
		}
		ps, err := c.dataset(1, count)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range ps {
			ids, err := tok.Encode(p.Text, false)
			if err != nil {
				t.Fatal(err)
			}
			want := p.InputLen
			if p.Class == loadgen.ClassChat {
				want = p.InputLen - 1 + 2 // the "\n\n" separator: one id, two newline tokens here
			}
			if d := len(ids) - want; d < -2 || d > 2 {
				t.Fatalf("%q prompt %d: %d tokens on the demo tokenizer, asked for %d", args, i, len(ids), p.InputLen)
			}
			if p.Class != loadgen.ClassChat && len(ids) != p.InputLen {
				t.Fatalf("%q prompt %d: %d tokens, asked for exactly %d", args, i, len(ids), p.InputLen)
			}
		}
	}
}

// A layout's figures are simulated when its engines are ts-fake, with
// the performance model's preset named, described and sourced where the
// profile passes one (--fake-perf, or TS_FAKE_PERF in the role's env).
func TestDetectSimulation(t *testing.T) {
	const preset = "llama-3.1-8b-bf16-h200"
	role := func(argv ...string) profiles.RolePlan { return profiles.RolePlan{Argv: argv} }
	envRole := role("ts-fake", "serve")
	envRole.Env = map[string]string{"TS_FAKE_PERF": preset}
	for _, c := range []struct {
		name      string
		roles     []profiles.RolePlan
		simulated bool
		note      []string
	}{
		{"real engines", []profiles.RolePlan{role("ts", "serve", "--model", "m")}, false, nil},
		{"ts-fake, no model", []profiles.RolePlan{role("/x/bin/ts-fake", "serve")}, true, []string{"simulated (ts-fake engines without a performance model"}},
		{"the shipped preset", []profiles.RolePlan{role("ts-fake", "serve", "--fake-perf", preset), role("ts-fake", "serve", "--fake-perf="+preset)}, true,
			[]string{"simulated (ts-fake performance model " + preset + ", an 8B dense model", ": rests on NVIDIA's H200 spec sheet"}},
		{"through the environment", []profiles.RolePlan{envRole}, true, []string{"performance model " + preset + ", "}},
		{"part real", []profiles.RolePlan{role("ts-fake", "serve", "--fake-perf", preset), role("ts", "serve")}, true, []string{"; 1 of 2 roles on ts-fake)"}},
		{"an unknown preset", []profiles.RolePlan{role("ts-fake", "serve", "--fake-perf", "nope")}, true, []string{"performance model nope: unknown here"}},
	} {
		s := detectSimulation(&profiles.Plan{Roles: c.roles})
		if s.Simulated() != c.simulated || (c.note == nil && s.Note() != "") {
			t.Errorf("%s: simulated %v, note %q", c.name, s.Simulated(), s.Note())
		}
		for _, n := range c.note {
			if !strings.Contains(s.Note(), n) {
				t.Errorf("%s: note %q lacks %q", c.name, s.Note(), n)
			}
		}
	}
}

// The comparison table: a row per layout and rate with throughput,
// goodput, attainment and the percentiles, then the winner and why, under
// the simulated note.
func TestWriteLayoutTable(t *testing.T) {
	g := loadgen.Goodput{SLO: "ttft<=1000ms", Goodput: 1.5, Attainment: 0.75}
	rep := layoutReport{SLO: "ttft<=1000ms", Simulated: "simulated (ts-fake performance model p: rests on q)",
		Layouts: []layoutResult{
			{Name: "agg-4", Shape: "aggregated ×4", Points: []layoutPoint{{rate: 2, Summary: loadgen.Summary{RequestThroughput: 2, MedianTTFTms: 10, P90TTFTms: 20, P99TTFTms: 30, Goodput: &g}}}},
			{Name: "pd", Shape: "1P+3D", Error: "did not come up: boom"},
		}, Winner: "agg-4", Reason: "agg-4 (aggregated ×4): 1.5 req/s met ttft<=1000ms"}
	var b bytes.Buffer
	writeLayoutTable(&b, rep)
	for _, want := range []string{
		"Figures simulated (ts-fake performance model p: rests on q)",
		"SLO: ttft<=1000ms",
		"agg-4   aggregated ×4  2 req/s  2.00   1.50     75%      10 / 20 / 30",
		"pd      1P+3D          -",
		"pd: did not come up: boom",
		"Winner: agg-4",
		"Why: agg-4 (aggregated ×4): 1.5 req/s met",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// The plot is a PNG with both panels' data.
func TestPlotLayouts(t *testing.T) {
	g := func(v float64) *loadgen.Goodput { return &loadgen.Goodput{SLO: "ttft<=500ms", Goodput: v} }
	rep := layoutReport{SLO: "ttft<=500ms", Workload: "mixed: 10 requests", Simulated: "simulated (x)", Winner: "b",
		Layouts: []layoutResult{
			{Name: "a", Shape: "aggregated ×4", Points: []layoutPoint{{rate: 1, Summary: loadgen.Summary{P90TTFTms: 100, Goodput: g(1)}}, {rate: 2, Summary: loadgen.Summary{P90TTFTms: 900, Goodput: g(1.2)}}}},
			{Name: "b", Shape: "1P+3D", Points: []layoutPoint{{rate: math.Inf(1), Summary: loadgen.Summary{RequestThroughput: 3, P90TTFTms: 300, Goodput: g(2.5)}}}},
			{Name: "c", Shape: "2P+2D"},
		}}
	path := filepath.Join(t.TempDir(), "l.png")
	if err := plotLayouts(path, rep, loadgen.SLO{TTFT: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 300 {
		t.Fatalf("image %v", b)
	}
	if got := wrap("aaa bbb ccc", 7); !reflect.DeepEqual(got, []string{"aaa bbb", "ccc"}) {
		t.Fatalf("wrap: %q", got)
	}
}

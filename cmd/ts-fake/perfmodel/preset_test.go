package perfmodel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every shipped preset traces every number to a source, and describes
// itself as simulated with what it rests on.
func TestShippedPresetsAreSourced(t *testing.T) {
	if len(Presets()) == 0 {
		t.Fatal("no shipped preset")
	}
	for name, p := range Presets() {
		if u := p.Unsourced(); len(u) > 0 {
			t.Errorf("%s: numbers without a source: %v", name, u)
		}
		d := p.Describe()
		if !strings.Contains(d, "simulated") || !strings.Contains(d, p.RestsOn) || !strings.HasPrefix(d, name) {
			t.Errorf("%s: Describe() = %q", name, d)
		}
	}
}

const goodYAML = `name: tiny
describes: a test model on a test GPU
rests_on: nothing real
model:
  params: 1e9
  embedding_params: 1e8
  layers: 8
  attention_heads: 8
  kv_heads: 2
  head_dim: 64
  weight_bytes_per_param: 2
  kv_bytes_per_element: 2
gpu:
  memory_bytes: 80e9
  memory_bandwidth: 2e12
  peak_flops: 300e12
efficiency:
  mbu: 0.5
  mfu: 0.5
  per_sequence_us: 0
  tensor_parallel: 0.9
transfer:
  bandwidth: 10e9
`

// A user's preset file: YAML or JSON, strictly decoded; every error names
// the file, the line where there is one, and the field.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, data, want string
	}{
		{"unknown key", strings.Replace(goodYAML, "  mbu: 0.5\n", "  mbu: 0.5\n  mbus: 1\n", 1), `f.yaml:19:3: unknown field "mbus"`},
		{"wrong type", strings.Replace(goodYAML, "layers: 8", "layers: eight", 1), "f.yaml:7:11: model.layers: wrong type"},
		{"missing number", strings.Replace(goodYAML, "  peak_flops: 300e12\n", "", 1), "f.yaml: gpu.peak_flops: must be a positive number (is it missing?)"},
		{"fraction above 1", strings.Replace(goodYAML, "mfu: 0.5", "mfu: 1.5", 1), "f.yaml:19:8: efficiency.mfu: must be a fraction in (0, 1]"},
		{"more KV heads than heads", strings.Replace(goodYAML, "kv_heads: 2", "kv_heads: 16", 1), "f.yaml:9:13: model.kv_heads: must be positive and at most model.attention_heads"},
		{"no rests_on", strings.Replace(goodYAML, "rests_on: nothing real\n", "", 1), "f.yaml: rests_on: must say which measurements"},
	} {
		_, err := Parse("f.yaml", []byte(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := Parse("f.yaml", []byte(goodYAML)); err != nil {
		t.Errorf("good preset: %v", err)
	}
}

// --fake-perf takes a shipped preset's name or a file, JSON as well as
// YAML; a file without a name is named after itself.
func TestLoad(t *testing.T) {
	if p, err := Load("llama-3.1-8b-bf16-h200"); err != nil || p.Name != "llama-3.1-8b-bf16-h200" {
		t.Fatalf("shipped preset: %+v %v", p.Name, err)
	}
	dir := t.TempDir()
	json := filepath.Join(dir, "mine.json")
	body := `{"describes": "d", "rests_on": "r",
	 "model": {"params": 1e9, "embedding_params": 0, "layers": 2, "attention_heads": 2, "kv_heads": 1, "head_dim": 8,
	           "weight_bytes_per_param": 2, "kv_bytes_per_element": 2},
	 "gpu": {"memory_bytes": 1e10, "memory_bandwidth": 1e12, "peak_flops": 1e14},
	 "efficiency": {"mbu": 1, "mfu": 1, "per_sequence_us": 0, "tensor_parallel": 1},
	 "transfer": {"bandwidth": 1e9}}`
	if err := os.WriteFile(json, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(json)
	if err != nil || p.Name != "mine" {
		t.Fatalf("json file: %+v %v", p, err)
	}
	if _, err := Load(filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "neither a preset (llama-3.1-8b-bf16-h200") {
		t.Errorf("absent file: %v", err)
	}
}

// A report finds the preset an engine's command line names, so it can
// label its figures.
func TestFromArgs(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "TS_FAKE_PERF" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		name   string
		argv   []string
		getenv func(string) string
		want   string // preset name; "" off
		err    bool
	}{
		{"flag", []string{"ts-fake", "serve", "--fake-perf", "llama-3.1-8b-bf16-h200"}, nil, "llama-3.1-8b-bf16-h200", false},
		{"flag=value", []string{"--headless", "--fake-perf=llama-3.1-8b-bf16-h200"}, nil, "llama-3.1-8b-bf16-h200", false},
		{"env", []string{"--headless"}, env("llama-3.1-8b-bf16-h200"), "llama-3.1-8b-bf16-h200", false},
		{"off", []string{"--headless", "--fake-tokens-per-s", "50"}, env(""), "", false},
		{"unknown", []string{"--fake-perf", "nope"}, nil, "", true},
	} {
		p, ok, err := FromArgs(c.argv, c.getenv)
		if (err != nil) != c.err || ok != (c.want != "") || p.Name != c.want {
			t.Errorf("%s: %q %v %v", c.name, p.Name, ok, err)
		}
	}
}

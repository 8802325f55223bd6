// Package perfmodel is ts-fake's performance model (--fake-perf): what one
// engine step costs on a stated GPU for a stated model, so layouts differ on
// ts-fake as they differ on GPUs (docs/perf-model.md). It is pure: a preset
// (the numbers, each traced to a public measurement in the docs), the step
// time of a batch, and the two scheduling rules ts-fake's scheduler asks
// about (Admit, Chunks). It sleeps nothing and reads no clock; ts-fake's
// scheduler sleeps what it answers. Every figure it produces is simulated:
// Describe says so, with what the preset rests on.
package perfmodel

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Preset is one model class on one GPU: the numbers the model needs, read
// from a shipped preset (Presets) or a user's YAML/JSON file (Load).
type Preset struct {
	// Name is what --fake-perf names it by (a file's own name when it
	// gives none).
	Name string `yaml:"name"`
	// Describes says which model class, precision and GPU the numbers are
	// for, in words ("an 8B dense model ... on one NVIDIA H200").
	Describes string `yaml:"describes"`
	// RestsOn says, in one line, which measurements the numbers come
	// from; it is printed beside every simulated figure.
	RestsOn string `yaml:"rests_on"`

	Model      ModelSpec  `yaml:"model"`
	GPU        GPUSpec    `yaml:"gpu"`
	Efficiency Efficiency `yaml:"efficiency"`
	Transfer   Transfer   `yaml:"transfer"`

	// Sources maps each number (its path, e.g. "gpu.memory_bandwidth") to
	// where it comes from. Shipped presets source every number; a user's
	// file may leave this out.
	Sources map[string]string `yaml:"sources"`
}

// ModelSpec is the model's shape, as its config.json states it.
type ModelSpec struct {
	Params          float64 `yaml:"params"`           // every parameter, embeddings included
	EmbeddingParams float64 `yaml:"embedding_params"` // the input embedding table: looked up, not multiplied
	Layers          int     `yaml:"layers"`
	AttentionHeads  int     `yaml:"attention_heads"` // query heads
	KVHeads         int     `yaml:"kv_heads"`
	HeadDim         int     `yaml:"head_dim"`
	WeightBytes     float64 `yaml:"weight_bytes_per_param"` // 2 for bf16
	KVBytes         float64 `yaml:"kv_bytes_per_element"`   // 2 for a bf16 KV cache
}

// GPUSpec is one GPU's spec sheet.
type GPUSpec struct {
	MemoryBytes     float64 `yaml:"memory_bytes"`     // HBM capacity
	MemoryBandwidth float64 `yaml:"memory_bandwidth"` // HBM bytes/s
	PeakFLOPs       float64 `yaml:"peak_flops"`       // dense tensor-core FLOP/s at the model's precision
}

// Efficiency is what a real engine reaches of the spec sheet, each a
// measured fraction.
type Efficiency struct {
	MBU            float64 `yaml:"mbu"`             // memory-bound steps: achieved / peak bandwidth
	MFU            float64 `yaml:"mfu"`             // compute-bound steps: achieved / peak FLOP/s
	PerSequenceUS  float64 `yaml:"per_sequence_us"` // extra step time per decode sequence, µs
	TensorParallel float64 `yaml:"tensor_parallel"` // with TP > 1: achieved / ideal speed-up
}

// Transfer is the prefill → decode KV transfer backend.
type Transfer struct {
	Bandwidth float64 `yaml:"bandwidth"` // bytes/s one rank moves KV at
}

//go:embed presets/*.yaml
var presetFS embed.FS

// Presets are the shipped presets by name.
func Presets() map[string]Preset {
	out := map[string]Preset{}
	entries, _ := presetFS.ReadDir("presets")
	for _, e := range entries {
		file := path.Join("presets", e.Name())
		data, err := presetFS.ReadFile(file)
		if err != nil {
			panic(fmt.Sprintf("perfmodel: read shipped preset %s: %v", file, err))
		}
		p, err := Parse(file, data)
		if err != nil {
			panic(fmt.Sprintf("perfmodel: shipped preset: %v", err))
		}
		out[p.Name] = p
	}
	return out
}

// PresetNames lists the shipped presets, sorted.
func PresetNames() []string {
	var names []string
	for n := range Presets() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Load resolves --fake-perf's value: a shipped preset's name, else a
// YAML or JSON file.
func Load(nameOrFile string) (Preset, error) {
	if p, ok := Presets()[nameOrFile]; ok {
		return p, nil
	}
	data, err := os.ReadFile(nameOrFile)
	if err != nil {
		return Preset{}, fmt.Errorf("%q is neither a preset (%s) nor a readable file: %w",
			nameOrFile, strings.Join(PresetNames(), ", "), err)
	}
	p, err := Parse(nameOrFile, data)
	if err != nil {
		return Preset{}, err
	}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(path.Base(nameOrFile), path.Ext(nameOrFile))
	}
	return p, nil
}

// Parse decodes a preset strictly (unknown keys are errors) and checks
// every number; errors name file, line and field.
func Parse(file string, data []byte) (Preset, error) {
	var p Preset
	if err := yaml.UnmarshalWithOptions(data, &p, yaml.Strict()); err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				at := fmt.Sprintf("%s:%d:%d", file, tk.Position.Line, tk.Position.Column)
				if f := fieldAt(data, tk.Position.Line, tk.Position.Column); f != "" {
					return Preset{}, fmt.Errorf("%s: %s: wrong type (%s)", at, f, ye.GetMessage())
				}
				return Preset{}, fmt.Errorf("%s: %s", at, ye.GetMessage())
			}
			return Preset{}, fmt.Errorf("%s: %s", file, ye.GetMessage())
		}
		return Preset{}, fmt.Errorf("%s: %w", file, err)
	}
	for _, c := range p.checks() {
		if c.bad {
			return Preset{}, fmt.Errorf("%s: %s: %s", position(file, data, c.field), c.field, c.why)
		}
	}
	return p, nil
}

// check is one rule on one field.
type check struct {
	field string
	bad   bool
	why   string
}

// checks are every rule a preset must meet: one row per field.
func (p Preset) checks() []check {
	pos := func(f string, v float64) check {
		return check{f, !(v > 0), "must be a positive number (is it missing?)"}
	}
	frac := func(f string, v float64) check {
		return check{f, !(v > 0 && v <= 1), "must be a fraction in (0, 1] (is it missing?)"}
	}
	m, g, e := p.Model, p.GPU, p.Efficiency
	return []check{
		{"describes", p.Describes == "", "must say which model class and GPU the numbers are for"},
		{"rests_on", p.RestsOn == "", "must say which measurements the numbers come from (it is printed beside every simulated figure)"},
		pos("model.params", m.Params),
		{"model.embedding_params", !(m.EmbeddingParams >= 0 && m.EmbeddingParams < m.Params), "must be at least 0 and below model.params"},
		pos("model.layers", float64(m.Layers)),
		pos("model.attention_heads", float64(m.AttentionHeads)),
		{"model.kv_heads", !(m.KVHeads > 0 && m.KVHeads <= m.AttentionHeads), "must be positive and at most model.attention_heads"},
		pos("model.head_dim", float64(m.HeadDim)),
		pos("model.weight_bytes_per_param", m.WeightBytes),
		pos("model.kv_bytes_per_element", m.KVBytes),
		pos("gpu.memory_bytes", g.MemoryBytes),
		pos("gpu.memory_bandwidth", g.MemoryBandwidth),
		pos("gpu.peak_flops", g.PeakFLOPs),
		frac("efficiency.mbu", e.MBU),
		frac("efficiency.mfu", e.MFU),
		{"efficiency.per_sequence_us", !(e.PerSequenceUS >= 0), "must be 0 or more"},
		frac("efficiency.tensor_parallel", e.TensorParallel),
		pos("transfer.bandwidth", p.Transfer.Bandwidth),
	}
}

// numberFields are the preset's numbers, the keys Sources must cover in a
// shipped preset.
func numberFields() []string {
	var out []string
	for _, c := range (Preset{}).checks() {
		if strings.Contains(c.field, ".") {
			out = append(out, c.field)
		}
	}
	return out
}

// position is file:line:col of field's value in data, or the file alone
// when the field is absent.
func position(file string, data []byte, field string) string {
	p, err := yaml.PathString("$." + field)
	if err != nil {
		return file
	}
	n, err := p.ReadNode(strings.NewReader(string(data)))
	if err != nil || n == nil {
		return file
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return fmt.Sprintf("%s:%d:%d", file, tk.Position.Line, tk.Position.Column)
	}
	return file
}

// fieldAt is the key path ("model.layers") whose value starts at line:col
// of data, or "" (a type error names the Go field, not the file's).
func fieldAt(data []byte, line, col int) string {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return ""
	}
	var walk func(n ast.Node, prefix string) string
	walk = func(n ast.Node, prefix string) string {
		switch v := n.(type) {
		case *ast.MappingNode:
			for _, mv := range v.Values {
				if s := walk(mv, prefix); s != "" {
					return s
				}
			}
		case *ast.MappingValueNode:
			key := v.Key.GetToken().Value
			if prefix != "" {
				key = prefix + "." + key
			}
			if tk := v.Value.GetToken(); tk != nil && tk.Position != nil && tk.Position.Line == line && tk.Position.Column == col {
				return key
			}
			return walk(v.Value, key)
		}
		return ""
	}
	for _, d := range f.Docs {
		if d != nil && d.Body != nil {
			if s := walk(d.Body, ""); s != "" {
				return s
			}
		}
	}
	return ""
}

// Unsourced lists the numbers Sources does not trace (shipped presets must
// trace all of them).
func (p Preset) Unsourced() []string {
	var out []string
	for _, f := range numberFields() {
		if strings.TrimSpace(p.Sources[f]) == "" {
			out = append(out, f)
		}
	}
	return slices.Clip(out)
}

// Describe is how every simulated figure names what it rests on:
// "NAME (simulated: DESCRIBES; rests on RESTS_ON)".
func (p Preset) Describe() string {
	return fmt.Sprintf("%s (simulated: %s; rests on %s)", p.Name, p.Describes, p.RestsOn)
}

// FromArgs finds the preset an engine command line runs under (its
// --fake-perf, else env TS_FAKE_PERF through getenv, which may be nil),
// so a report of figures measured against such engines can say they are
// simulated and on what (Describe). ok is false when the model is off.
func FromArgs(argv []string, getenv func(string) string) (p Preset, ok bool, err error) {
	name := ""
	for i, a := range argv {
		if v, found := strings.CutPrefix(a, "--fake-perf="); found {
			name = v
		} else if a == "--fake-perf" && i+1 < len(argv) {
			name = argv[i+1]
		}
	}
	if name == "" && getenv != nil {
		name = getenv("TS_FAKE_PERF")
	}
	if name == "" {
		return Preset{}, false, nil
	}
	p, err = Load(name)
	return p, err == nil, err
}

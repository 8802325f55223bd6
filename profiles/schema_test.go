package profiles

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goccy/go-yaml/ast"
)

const (
	keysBegin = "<!-- keys:begin (generated from profiles/schema.go by `go generate ./profiles`; do not edit) -->\n"
	keysEnd   = "<!-- keys:end -->"
)

// Pins: docs/profiles.md's key table is the schema's, row for row; run
// `go generate ./profiles` (this test with -update) after adding a key.
func TestDocsKeyTable(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "docs", "profiles.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i, j := strings.Index(doc, keysBegin), strings.Index(doc, keysEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %q … %q markers", path, strings.TrimSpace(keysBegin), keysEnd)
	}
	want := KeyTable()
	got := doc[i+len(keysBegin) : j]
	if got == want {
		return
	}
	if *update {
		out := doc[:i+len(keysBegin)] + want + doc[j:]
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s key table is stale; run `go generate ./profiles`:\n%s", path, want)
}

// Pins: every default in the tables reads cleanly through its own row, and
// the derived Default* helpers keep the documented values.
func TestSchemaDefaults(t *testing.T) {
	t.Parallel()
	l := &loader{file: "default", pos: map[string]Pos{}, anchors: map[string]ast.Node{}}
	topSection.defaultsInto(l, &Profile{})
	engineSection.defaultsInto(l, &Engine{})
	mooncakeSection.defaultsInto(l, &Mooncake{})
	gatewaySection.defaultsInto(l, &Gateway{})
	policySection.defaultsInto(l, &PolicyPlan{})
	roleSection.defaultsInto(l, &Role{})
	restartSection.defaultsInto(l, &Restart{})
	sloSection.defaultsInto(l, &SLO{})
	sloRoleSection.defaultsInto(l, &SLORole{})
	if len(l.errs) > 0 {
		t.Fatalf("defaults that do not read: %v", l.errs)
	}
	if got := DefaultCommand(); !reflect.DeepEqual(got, []string{"ts", "serve"}) {
		t.Errorf("DefaultCommand = %q", got)
	}
	if got := DefaultPolicy(); got != (PolicyPlan{Prefill: "round_robin", Decode: "round_robin", Encode: "consistent_hashing", Aggregated: "round_robin"}) {
		t.Errorf("DefaultPolicy = %+v", got)
	}
	var g Gateway
	gatewaySection.setDefaults(&g)
	if g.Host != DefaultGatewayHost || g.Port != DefaultGatewayPort || g.Mode != ModeAuto || g.BootstrapServer != BootstrapEngine || g.ImageURLs {
		t.Errorf("gateway defaults %+v", g)
	}
	var r Role
	roleSection.setDefaults(&r)
	if r.Replicas != 1 || r.TP != 1 || r.DP != 1 || r.Host != HostLocal || r.EngineIndex != 0 {
		t.Errorf("role defaults %+v", r)
	}
}

// Pins: every key of every section is refused with a did-you-mean hint
// when misspelt by one letter, which proves the unknown-key check reads
// the same tables.
func TestSchemaUnknownKeys(t *testing.T) {
	t.Parallel()
	rows := SchemaRows()
	if len(rows) < 40 {
		t.Fatalf("only %d schema rows", len(rows))
	}
	for _, c := range []struct{ src, key, hint string }{
		{"model: m\nacelerator: ascend\nroles: []\n", "acelerator", "accelerator"},
		{"model: m\nengine: {mooncake: {intranode_nvlnk: true}}\nroles: []\n", "engine.mooncake.intranode_nvlnk", "intranode_nvlink"},
		{"model: m\nroles:\n  - {name: prefill, gpus: [0], gpu_memory_utilisation: 0.5}\n", "roles[0].gpu_memory_utilisation", "gpu_memory_utilization"},
		{"model: m\nroles:\n  - {name: prefill, gpus: [0], ib_devic: mlx5_0}\n", "roles[0].ib_devic", "ib_device"},
	} {
		_, errs := Parse("k.yaml", []byte(c.src))
		if !strings.Contains(errs.Error(), c.key+`: unknown key (did you mean "`+c.hint+`"?)`) {
			t.Errorf("%q: %v", c.src, errs)
		}
	}
}

// DefaultCommand is the engine command when the profile names none.
func DefaultCommand() []string {
	var e Engine
	engineSection.setDefaults(&e)
	return e.Command
}

// DefaultPolicy is the worker-selection policy per kind.
func DefaultPolicy() PolicyPlan {
	var p PolicyPlan
	policySection.setDefaults(&p)
	return p
}

// SchemaRows lists every profile key with its type, default and doc line,
// in file order: what docs/profiles.md's key table shows.
func SchemaRows() []DocRow {
	return topSection.docRows("", map[docSection]bool{})
}

// KeyTable renders SchemaRows as the Markdown table in docs/profiles.md.
func KeyTable() string {
	var b strings.Builder
	b.WriteString("| key | type | default | what it does |\n|---|---|---|---|\n")
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, r := range SchemaRows() {
		def := r.Default
		if def == "" {
			def = "—"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Key, esc(r.Type), esc(def), esc(r.Doc))
	}
	return b.String()
}

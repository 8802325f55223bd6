package profiles

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the loader and, when they load, to the
// planner: neither may panic, and every error must carry the file name.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("examples", "*.yaml"))
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"model: m\nroles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n",
		"model: m\nroles:\n  - &a {name: prefill, gpus: [0]}\n  - <<: *a\n    name: decode\n",
		"model: m\nroles: [{name: decode, replicas: 2, gpus: [[1],[2]], dist_init_port: [1, 65535]}]\n",
		"a: &x [*x]\n",
		"<<: {model: m}\n",
		"---\nmodel: m\n---\nmodel: n\n",
		"model: m\nrestart: {budget: 9999999999999999999 in 1ns}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, errs := Parse("fuzz.yaml", data)
		for _, e := range errs {
			if s := e.Error(); len(s) < len("fuzz.yaml") || s[:len("fuzz.yaml")] != "fuzz.yaml" {
				t.Fatalf("error without file name: %q", s)
			}
		}
		if p == nil {
			return
		}
		// Plan even a profile with errors: callers get a partial plan to
		// show, so the planner must survive half-loaded roles.
		plan, _ := MakePlan(p, fixedFacts())
		if plan == nil {
			t.Fatal("nil plan")
		}
		for i := range plan.Roles {
			_ = plan.Roles[i].CommandLine()
		}
	})
}

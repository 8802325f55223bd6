package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Pins: every engine command line in the planner's golden plans
// (profiles/testdata/*.plan.json: PD, EPD, Ascend, Slurm, kv_aware,
// aggregated only, mixed) parses with ts-fake's mirror of TokenSpeed's
// server_args, names no flag it does not know, and runs the mode its role
// kind means: aggregated roles run aggregate serving (null).
func TestPlannedArgvParses(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "profiles", "testdata", "*.plan.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden plans: %v", err)
	}
	modes := map[string]string{"encode": "encode", "prefill": "prefill", "decode": "decode", "aggregated": "null"}
	kinds := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var plan struct {
			Roles []struct {
				Name string   `json:"name"`
				Kind string   `json:"kind"`
				Argv []string `json:"argv"`
			} `json:"roles"`
		}
		if err := json.Unmarshal(data, &plan); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, r := range plan.Roles {
			i := slices.Index(r.Argv, "--headless")
			if i < 0 {
				t.Errorf("%s %s: no --headless in %q", filepath.Base(f), r.Name, r.Argv)
				continue
			}
			c, err := resolveConfig(parseArgs(r.Argv[i:]), noEnv)
			if err != nil {
				t.Errorf("%s %s: %q: %v", filepath.Base(f), r.Name, r.Argv[i:], err)
				continue
			}
			if len(c.unknown) > 0 || c.mode != modes[r.Kind] {
				t.Errorf("%s %s (%s): mode %q, unknown flags %v", filepath.Base(f), r.Name, r.Kind, c.mode, c.unknown)
			}
			kinds[r.Kind] = true
		}
	}
	for k := range modes {
		if !kinds[k] {
			t.Errorf("no golden plan has a %s role", k)
		}
	}
}

package slurm

import (
	"strings"
	"testing"
)

// Nodelists and squeue output come from the environment and other
// programs: no input may panic, and an expansion never yields an empty
// name or one with brackets left in it.
func FuzzExpandNodelist(f *testing.F) {
	for _, s := range []string{"n[1-2]", "gpu[01-03],login", "r[1-2]-g[0-1]", "n[", "]", "a,,b", "n[1-99999999]", "][0]", "a[1-99999]b[1-99999]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 200 {
			return
		}
		names, err := ExpandNodelist(s)
		if err != nil {
			return
		}
		if len(names) > 1<<20 {
			t.Fatalf("%q expanded to %d names", s, len(names))
		}
		for _, n := range names {
			if n == "" || strings.ContainsAny(n, "[],") {
				t.Fatalf("%q gave name %q", s, n)
			}
		}
	})
}

func FuzzParseSteps(f *testing.F) {
	f.Add("12.0 tsd.demo.prefill\n12.batch batch\n")
	f.Add(".\n1. x\n.2 y\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, st := range ParseSteps(s) {
			if st.Job == "" || !strings.HasPrefix(st.ID, st.Job+".") {
				t.Fatalf("step %+v from %q", st, s)
			}
		}
	})
}

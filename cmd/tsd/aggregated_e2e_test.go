package main

import (
	"regexp"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// Pins: the shipped mixed-conditional example comes up on ts-fake under
// `tsd up`: its aggregated engines start in aggregate serving and are
// ready only once every attention-DP rank registered, like the prefill
// and decode beside them, and `tsd status` names their kind.
func TestE2EAggregatedRolesReady(t *testing.T) {
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	dir, prof := fakeExample(t, "mixed-conditional.yaml", func(p map[string]any) {
		// Two attention-DP ranks per aggregated engine, so readiness has
		// more than one rank to wait for (ts-fake ignores the indices).
		agg := exampleRole(t, p, "agg")
		agg["dp"] = 2
		agg["gpus"] = []any{[]any{0, 1}, []any{4, 5}}
	})
	d := runTSD(t, dir, "up", "--headless", prof)
	for _, r := range []string{"agg-0", "agg-1", "prefill", "decode"} {
		d.waitLine(0, r, "→ ready")
	}
	s := d.waitStatus(func(s snapshot.Snapshot) bool {
		for _, r := range s.Roles {
			if r.State != snapshot.StateReady {
				return false
			}
		}
		return len(s.Roles) == 4
	})
	for _, name := range []string{"agg-0", "agg-1"} {
		r := roleStatus(t, s, name)
		if r.Kind != "aggregated" || r.RanksExpected != 2 || r.RanksRegistered != 2 {
			t.Errorf("%s: kind %s, ranks %d/%d", name, r.Kind, r.RanksRegistered, r.RanksExpected)
		}
	}
	d.waitLine(0, "agg-0", `disaggregation_mode="null"`)
	out, err := d.ctl("status")
	if err != nil || !regexp.MustCompile(`(?m)^\s*agg-1\s+aggregated\s+ready\s.*\s2/2\s`).MatchString(out) {
		t.Fatalf("tsd status: %v\n%s", err, out)
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up: %v\n%s", err, d.output())
	}
}

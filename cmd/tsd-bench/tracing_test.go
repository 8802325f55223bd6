package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/loadgen"
)

// The traced rows' verdicts follow from the rows: tsd's traced CPU per
// token against bare's (the untraced figure beside it), the traced share
// of TTFT against its target, or not measured with the reason.
func TestTracingTargets(t *testing.T) {
	row := func(target string, cpuUS int) loadRow {
		return loadRow{Target: target, Backend: "chat", C: 64, N: 10, CPU: time.Duration(cpuUS) * time.Millisecond,
			S: loadgen.Summary{OutputThroughput: 100, TotalOutputTokens: 1000, Duration: 1}}
	}
	rows := []loadRow{row("tsd", 5), row("bare", 3)}
	share := []shareRow{{Name: "random", Lines: 10, P50: 200}, {Name: "repeat", Repeat: true, Lines: 10, P50: 90}}
	pinned := planCores("on", 16, 2, true)
	for _, c := range []struct {
		name          string
		tr            tracingRow
		verdicts      []string
		measuredParts []string
	}{
		{"both met", tracingRow{Chat: row("tsd, tracing 10%", 5), Share: shareRow{Lines: 10, P50: 230, P90: 400}}, []string{"met", "met"},
			[]string{"1.67× (5.00 / 3.00); untraced 5.00, +0%", "230 µs (p90 400); untraced 200"}},
		{"tracing costs too much", tracingRow{Chat: row("tsd, tracing 10%", 7), Share: shareRow{Lines: 10, P50: 350}}, []string{"MISSED", "MISSED"},
			[]string{"2.33× (7.00 / 3.00); untraced 5.00, +40%", "350 µs"}},
		{"apply failed", tracingRow{Err: "tsd apply p-traced.yaml: exit status 1"}, []string{"not measured: tsd apply p-traced.yaml: exit status 1", "not measured: tsd apply p-traced.yaml: exit status 1"}, nil},
	} {
		got := tracingTargets(pinned, c.tr, rows, share, 64)
		if len(got) != 2 {
			t.Fatalf("%s: %d rows", c.name, len(got))
		}
		for i, v := range c.verdicts {
			if got[i].verdict != v {
				t.Errorf("%s row %d: verdict %q, want %q", c.name, i, got[i].verdict, v)
			}
		}
		for i, m := range c.measuredParts {
			if !strings.HasPrefix(got[i].measured, m) {
				t.Errorf("%s row %d: measured %q, want it to begin %q", c.name, i, got[i].measured, m)
			}
		}
	}
	if got := tracingTargets(pinned, tracingRow{Chat: row("x", 5)}, rows[:1], nil, 64); !strings.HasPrefix(got[0].verdict, "not measured (no clean bare") {
		t.Errorf("no bare row: %q", got[0].verdict)
	}
	if got := tracingTargets(planCores("auto", 2, 2, true), tracingRow{Chat: row("x", 5), Share: shareRow{Lines: 1, P50: 1}}, rows, share, 64); !strings.HasSuffix(got[0].verdict, "(not pinned: indicative)") {
		t.Errorf("unpinned verdict %q", got[0].verdict)
	}
}

// The traced profile is the bench profile with gateway.tracing added.
func TestWithTracing(t *testing.T) {
	l := planCores("off", 2, 2, false)
	p := profileText("pd", "/tok", "/bin/ts-fake", l, 8123, 1, 1)
	got, err := withTracing(p, "http://127.0.0.1:4318", 0.1)
	if err != nil || !strings.Contains(got, "gateway:\n  tracing: {endpoint: \"http://127.0.0.1:4318\", sample_ratio: 0.1}\n  host: 127.0.0.1\n") {
		t.Fatalf("%v\n%s", err, got)
	}
	if _, err := withTracing("model: m\n", "http://x", 0.1); err == nil {
		t.Fatal("a profile without a gateway section took tracing")
	}
	if tracingConc([]int{1, 64, 512}) != 64 || tracingConc([]int{1, 8}) != 8 {
		t.Fatal("tracingConc")
	}
}

package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// fitColumns is a pure function of the widths and the window: each row
// one case. Columns: a fixed ROLE, a STATE with three forms, two
// optional columns, a fill REASON.
func TestFitColumns(t *testing.T) {
	role := colFit{widths: []int{10}}
	state := colFit{widths: []int{33, 27, 20}, shrinkAt: []int{4, 2}}
	kind := colFit{priority: 3, widths: []int{7}}
	infl := colFit{priority: 2, widths: []int{4}}
	reason := colFit{fill: true, minFill: 8, widths: []int{40}}
	cols := []colFit{role, state, kind, infl, reason}
	type got struct {
		shown string // one letter per column: x shown, . dropped
		form  int    // STATE's form
		fill  int    // REASON's width
	}
	show := func(ls []colLayout) got {
		var b strings.Builder
		for _, l := range ls {
			if l.shown {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return got{b.String(), ls[1].form, ls[4].width}
	}
	for _, c := range []struct {
		name  string
		width int
		want  got
	}{
		// 2 + 10 + 1+33 + 1+7 + 1+4 + 1+8 = 68: everything fits in full.
		{"200 columns: all in full, REASON gets the rest", 200, got{"xxxxx", 0, 200 - 60}},
		{"120 columns", 120, got{"xxxxx", 0, 120 - 60}},
		{"exactly the minimum", 68, got{"xxxxx", 0, 8}},
		// 67: STATE's first short form (priority 4) comes before dropping
		// KIND (priority 3).
		{"one short: STATE abbreviates first", 67, got{"xxxxx", 1, 67 - 54}},
		// 61: form 1 gives 62; KIND goes (priority 3) before STATE's
		// second form (priority 2).
		{"KIND gives way before the shorter STATE", 61, got{"xx.xx", 1, 61 - 46}},
		{"80 columns keep KIND", 80, got{"xxxxx", 0, 80 - 60}},
		// 52: without KIND 54; STATE's form 2 (priority 2) comes before
		// INFL (priority 2) is dropped: shrinks first at one priority.
		{"STATE's last form before INFL goes", 53, got{"xx.xx", 2, 53 - 39}},
		{"INFL goes last", 44, got{"xx..x", 2, 44 - 34}},
		{"too narrow for anything: REASON gets nothing", 20, got{"xx..x", 2, 0}},
	} {
		if g := show(fitColumns(cols, c.width, 2, nil)); g != c.want {
			t.Errorf("%s (%d): %+v, want %+v", c.name, c.width, g, c.want)
		}
	}
}

// Pins: every STATE form keeps the numbers: the drain's in-flight count
// and seconds, the backoff countdown, the progress count; shorter forms
// only abbreviate words.
func TestStateForms(t *testing.T) {
	for _, c := range []struct {
		name  string
		r     snapshot.RoleStatus
		forms []string
	}{
		{"draining", snapshot.RoleStatus{State: snapshot.StateDraining, DrainInFlight: 3, DrainDeadline: t0.Add(29 * time.Second)},
			[]string{"draining · 3 in flight · 29s left", "draining · 3 in flight · 29s", "draining · 3 infl · 29s", "drain · 3 infl · 29s"}},
		{"backoff", snapshot.RoleStatus{State: snapshot.StateBackoff, NextTryAt: t0.Add(13 * time.Second)},
			[]string{"backoff · next try in 13s", "backoff · retry in 13s", "backoff · 13s", "backoff · 13s"}},
		{"progress", snapshot.RoleStatus{State: snapshot.StateStarting, Progress: &snapshot.Progress{Phase: "loading weights", Frac: 5.0 / 11, Text: "5/11"}},
			[]string{"starting ████░░░░ 5/11 weights", "starting ██░░ 5/11 weights", "starting 5/11 weights", "start 5/11 weights"}},
		{"phase", snapshot.RoleStatus{State: snapshot.StateHandshaking, Phase: "waiting for INIT (42s)"},
			[]string{"handshaking · waiting for INIT (42s)", "handshaking · wait INIT (42s)", "handshaking · wait INIT (42s)", "hshake · wait INIT (42s)"}},
		{"ready", snapshot.RoleStatus{State: snapshot.StateReady, Phase: "ready"}, []string{"ready"}},
		{"no state", snapshot.RoleStatus{}, []string{"unknown"}},
	} {
		var cl cell
		stateForms(&c.r, t0, &cl)
		got := cl.forms[:cl.n]
		if fmt.Sprint(got) != fmt.Sprint(c.forms) {
			t.Errorf("%s: %q, want %q", c.name, got, c.forms)
		}
	}
}

// drainingDeployment is 16 roles with the gateway's traffic, decode-1
// draining 12 requests with 1m29s left after a restart.
func drainingDeployment() snapshot.Snapshot {
	s := tuitest.WithTraffic(tuitest.Deployment(16, 2, 4, t0))
	r := &s.Roles[2]
	r.State, r.DrainInFlight, r.DrainDeadline, r.Restarts = snapshot.StateDraining, 12, t0.Add(89*time.Second), 1
	return s
}

// At 80, 120 and 200 columns a draining role after a restart shows its
// whole countdown, and UPTIME, INFL, REQ/S and ERR stay on screen; no
// STATE cell is cut.
func TestDrainCountdownFits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		w, h int
		want string
	}{
		{80, 24, " · 12 infl · 1m29s"},
		{120, 40, "draining · 12 in flight · 1m29s left"},
		{200, 60, "draining · 12 in flight · 1m29s left"},
	} {
		m, _ := newTestModel(t, c.w, c.h, drainingDeployment())
		out := plain(m)
		checkFrame(t, out, c.w, c.h)
		head := header(t, out)
		for _, col := range []string{"UPTIME", "INFL", "REQ/S", "ERR", "RANKS", "RST"} {
			if !strings.Contains(head, col) {
				t.Errorf("%d columns: header lacks %s: %q", c.w, col, head)
			}
		}
		row := rowOf(t, tableLines(t, m), "decode-1")
		if !strings.Contains(row, c.want) {
			t.Errorf("%d columns: decode-1 row %q lacks %q", c.w, row, c.want)
		}
		stateCol := strings.Index(head, "STATE")
		if cell := row[stateCol:]; strings.Contains(strings.SplitN(cell, "  ", 2)[0], "…") {
			t.Errorf("%d columns: STATE cut: %q", c.w, row)
		}
	}
}

// One column set per width: while a STATE text grows and shrinks (a
// drain begins and ends) the table keeps the same columns, whichever
// came first; STATE takes a shorter form, never cut, and its width goes
// back to REASON when the drain ends.
func TestColumnsStayWhileTextChanges(t *testing.T) {
	t.Parallel()
	calm := func() snapshot.Snapshot {
		s := drainingDeployment()
		s.Roles = append([]snapshot.RoleStatus(nil), s.Roles...)
		s.Roles[2].State, s.Roles[2].DrainInFlight, s.Roles[2].DrainDeadline = snapshot.StateReady, 0, time.Time{}
		s.Seq++
		return s
	}
	for _, w := range []int{80, 100, 120, 200} {
		for _, order := range [][]snapshot.Snapshot{{drainingDeployment(), calm()}, {calm(), drainingDeployment(), calm()}} {
			m, _ := newTestModel(t, w, 40, order[0])
			first := strings.Fields(header(t, plain(m)))
			for k, s := range order[1:] {
				s.Seq += uint64(k + 10)
				m.setSnapshot(s)
				out := plain(m)
				if got := strings.Fields(header(t, out)); strings.Join(got, " ") != strings.Join(first, " ") {
					t.Errorf("%d columns, frame %d: columns\n%q\nwant the first frame's\n%q", w, k+1, got, first)
				}
				row := rowOf(t, tableLines(t, m), "decode-1")
				if s.Roles[2].State == snapshot.StateDraining && !strings.Contains(row, " · 12 infl · 1m29s") && !strings.Contains(row, "· 12 in flight · 1m29s") {
					t.Errorf("%d columns, frame %d: the countdown is not whole: %q", w, k+1, row)
				}
			}
		}
	}
}

// When the text outgrows the columns chosen for the width, the wide cell
// is cut with "…" and every line still fits.
func TestWideCellIsCut(t *testing.T) {
	t.Parallel()
	s := drainingDeployment()
	m, _ := newTestModel(t, 80, 40, s)
	before := header(t, plain(m))
	s.Roles = append([]snapshot.RoleStatus(nil), s.Roles...)
	s.Roles[0].Name = "prefill-with-a-very-long-name-0"
	s.Seq++
	m.setSnapshot(s)
	out := plain(m)
	checkFrame(t, out, 80, 40)
	if after := header(t, out); strings.Join(strings.Fields(after), " ") != strings.Join(strings.Fields(before), " ") {
		t.Errorf("columns changed:\n%q\n%q", before, after)
	}
	if row := tableLines(t, m)[0]; !strings.Contains(row, "prefill-with-a-") || !strings.Contains(strings.Fields(row)[1], "…") {
		t.Errorf("the long name is not cut with an ellipsis: %q", row)
	}
}

func header(t *testing.T, screen string) string {
	t.Helper()
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, "ROLE") && strings.Contains(l, "STATE") {
			return l
		}
	}
	t.Fatalf("no table header:\n%s", screen)
	return ""
}

// Pins compactList: runs of three or more become ranges; anything not a
// list of numbers is left alone.
func TestCompactList(t *testing.T) {
	for in, want := range map[string]string{
		"0,1,2,3":   "0-3",
		"0,1,3,4,5": "0,1,3-5",
		"0,2":       "0,2",
		"7":         "7",
		"n1:0,n1:1": "n1:0,n1:1",
		"-":         "-",
	} {
		if got := compactList(in); got != want {
			t.Errorf("compactList(%q) = %q, want %q", in, got, want)
		}
	}
}

package tui

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// tableLines is the roles table as shown: header to the first blank line.
func tableLines(t *testing.T, m *Model) []string {
	t.Helper()
	var out []string
	in := false
	for _, l := range strings.Split(plain(m), "\n") {
		switch {
		case strings.Contains(l, "ROLE ") && strings.Contains(l, "STATE"):
			in = true
		case in && strings.TrimSpace(l) == "":
			return out
		case in:
			out = append(out, l)
		}
	}
	return out
}

func rowOf(t *testing.T, lines []string, word string) string {
	t.Helper()
	for _, l := range lines {
		if strings.Contains(l, word) {
			return l
		}
	}
	t.Fatalf("no row with %q in\n%s", word, strings.Join(lines, "\n"))
	return ""
}

// Replicas fold under a summary row of their role; → opens it, ← closes
// it from the summary or from a member, and what is open survives new
// snapshots.
func TestReplicaGroups(t *testing.T) {
	t.Parallel()
	s := tuitest.Grouped(tuitest.Deployment(8, 4, 4, t0))
	m, _ := newTestModel(t, 120, 40, s)
	rows := tableLines(t, m)
	if len(rows) != 3 {
		t.Fatalf("want 3 summary rows (prefill, decode, encode), got\n%s", strings.Join(rows, "\n"))
	}
	dec := rowOf(t, rows, "+ decode ×4")
	// decode-0 still handshakes: the summary shows the worst member's
	// state, how many are ready, and the sums of ranks and restarts.
	for _, want := range []string{"handshaking · 3/4 ready", "15/16", " 1 "} {
		if !strings.Contains(dec, want) {
			t.Errorf("decode summary lacks %q: %q", want, dec)
		}
	}
	press(m, "down", "right")
	rows = tableLines(t, m)
	if len(rows) != 7 || !strings.Contains(rowOf(t, rows, "− decode ×4"), "▸") {
		t.Fatalf("→ did not open decode under the selected summary:\n%s", strings.Join(rows, "\n"))
	}
	for _, name := range []string{"    decode-0", "    decode-1", "    decode-2", "    decode-3"} {
		rowOf(t, rows, name)
	}
	m.Update(snapMsg{s: s}) // a new snapshot keeps it open
	if len(tableLines(t, m)) != 7 {
		t.Fatal("a snapshot closed the group")
	}
	press(m, "down", "down") // decode-1
	if r, _ := m.overview.role(); r.Name != "decode-1" {
		t.Fatalf("selected %s, want decode-1", r.Name)
	}
	press(m, "left") // from a member: closes its group and selects it
	rows = tableLines(t, m)
	if len(rows) != 3 || !strings.Contains(rowOf(t, rows, "+ decode ×4"), "▸") {
		t.Fatalf("← from a member did not close its group:\n%s", strings.Join(rows, "\n"))
	}
	press(m, "enter") // enter opens a summary too
	if len(tableLines(t, m)) != 7 {
		t.Fatal("enter did not open the group")
	}
	press(m, "up", "r")
	if m.confirm != nil || !strings.Contains(m.flash.text, "prefill has 2 replicas") {
		t.Fatalf("r on a summary: flash %q, confirm %v", m.flash.text, m.confirm != nil)
	}
	// :inspect of a member of a closed group opens the group.
	press(m, "left")
	m.overview.selectRole(4) // prefill-1
	if rows := tableLines(t, m); !strings.Contains(rowOf(t, rows, "prefill-1"), "▸") {
		t.Fatalf("prefill-1 not selected in its opened group:\n%s", strings.Join(rows, "\n"))
	}
}

// An instance of several ranks opens to one row per rank, with each
// rank's handshake state; ← on a rank closes them.
func TestRankRows(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 120, 40, tuitest.Deployment(4, 4, 4, t0))
	press(m, "down", "right") // decode-0: rank 1 waits for INIT
	rows := tableLines(t, m)
	if len(rows) != 8 {
		t.Fatalf("want 4 roles + 4 ranks, got\n%s", strings.Join(rows, "\n"))
	}
	if r := rowOf(t, rows, "rank 1"); !strings.Contains(r, "hello") {
		t.Errorf("rank 1 row: %q", r)
	}
	press(m, "down", "down")
	if d, _ := m.overview.current(); d.kind != rowRank {
		t.Fatalf("selection is %+v, want a rank row", d)
	}
	press(m, "left")
	rows = tableLines(t, m)
	if len(rows) != 4 || !strings.Contains(rowOf(t, rows, "decode-0"), "▸") {
		t.Fatalf("← on a rank did not close the ranks onto decode-0:\n%s", strings.Join(rows, "\n"))
	}
}

// The backoff countdown moves with the clock (the 1 s tick redraws it),
// and the reason loses the stale "next try in".
func TestBackoffCountdown(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	f := tuitest.NewFake(tuitest.Troubled(tuitest.Deployment(4, 1, 4, t0), t0, -1, 2, -1))
	m := New(f, Options{Now: clock})
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 40})
	cur, ch, cancel := f.Subscribe()
	m.Update(snapSubscribedMsg{cur: cur, ch: ch, cancel: cancel})
	t.Cleanup(m.closeSubscriptions)

	row := rowOf(t, tableLines(t, m), "decode-1")
	if !strings.Contains(row, "backoff · next try in 13s") || strings.Contains(row, "16s") {
		t.Fatalf("backoff row: %q", row)
	}
	for _, c := range []struct {
		after time.Duration
		want  string
	}{{400 * time.Millisecond, "in 13s"}, {time.Second, "in 12s"}, {9500 * time.Millisecond, "in 4s"}, {20 * time.Second, "in 0s"}} {
		now.Store(t0.Add(c.after).UnixNano())
		m.Update(tickMsg(clock()))
		if row := rowOf(t, tableLines(t, m), "decode-1"); !strings.Contains(row, c.want) {
			t.Errorf("after %v: %q, want %q", c.after, row, c.want)
		}
	}
}

// A starting role shows the engine's own progress as a bar in its STATE
// cell.
func TestStartupProgressBar(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 120, 40, tuitest.Troubled(tuitest.Deployment(4, 1, 4, t0), t0, -1, -1, 1))
	if row := rowOf(t, tableLines(t, m), "decode-0"); !strings.Contains(row, "starting ████░░░░ 5/11 weights") {
		t.Fatalf("progress row: %q", row)
	}
	if got := progressText(&snapshot.Progress{Phase: "graph capture", Frac: 1}); got != "████████ 100% graphs" {
		t.Errorf("progressText = %q", got)
	}
}

// The gateway's per-role accounting fills the traffic columns where
// there is room; a group's row adds its members up.
func TestTrafficColumns(t *testing.T) {
	t.Parallel()
	s := tuitest.WithTraffic(tuitest.Grouped(tuitest.Deployment(8, 2, 4, t0)))
	m, _ := newTestModel(t, 200, 60, s)
	rows := tableLines(t, m)
	head := strings.Split(plain(m), "\n")
	var header string
	for _, l := range head {
		if strings.Contains(l, "ROLE ") {
			header = l
		}
	}
	for _, col := range []string{"REQ/S", "TOK/S", "ERR", "TTFT p50/99", "ITL p50/99"} {
		if !strings.Contains(header, col) {
			t.Errorf("header lacks %s: %q", col, header)
		}
	}
	// decode members are roles 1, 2, 5, 6: 0.8+0.6·(1,2,0,1) req/s each.
	if dec := rowOf(t, rows, "+ decode ×4"); !strings.Contains(dec, " 5.6 ") || !strings.Contains(dec, " 3 ") {
		t.Errorf("decode summary traffic: %q", dec)
	}
	m2, _ := newTestModel(t, 80, 24, s)
	for _, l := range tableLines(t, m2) {
		if len([]rune(l)) > 80 {
			t.Errorf("row wider than 80: %q", l)
		}
	}
}

// progressText is a startup step with the engine's own progress through
// it: "█████░░░ 5/11 weights" (the STATE cell's fullest form, after the
// state word).
func progressText(p *snapshot.Progress) string {
	name, count := progressParts(p)
	return progressBar(p.Frac, progressBarW) + " " + count + " " + name
}

package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// Pins: the level spellings of Python logging, slog, tracebacks and Go
// panics, most serious first; a line without one has none.
func TestLineLevel(t *testing.T) {
	for _, c := range []struct {
		text string
		want logLevel
	}{
		{"[2026-08-22 10:00:00,001] - ERROR - scheduler died (s.py:1)", levelError},
		{"[2026-08-22 10:00:00] - CRITICAL - out of memory", levelError},
		{`time=... level=ERROR msg="decode leg failed"`, levelError},
		{"Traceback (most recent call last):", levelError},
		{"panic: runtime error: index out of range [-1]", levelError},
		{"[decode] WARNING kv cache usage high: 93%", levelWarning},
		{`level=WARN msg="slow"`, levelWarning},
		{"[2026-08-22] - INFO - Load weight end", levelInfo},
		{"an ERROR - in the middle - is not - ERROR - ...", levelError},
		{"errors: 0, warnings: 0", levelNone},
		{"", levelNone},
	} {
		if got := lineLevel(c.text); got != c.want {
			t.Errorf("lineLevel(%q) = %d, want %d", c.text, got, c.want)
		}
	}
}

// Pins: a role keeps its tag colour across calls (by name, not position).
func TestRoleStyleStable(t *testing.T) {
	if first, again := roleStyle("decode-1").Render("x"), roleStyle("decode-1").Render("x"); first != again {
		t.Fatal("a role's colour changed between calls")
	}
}

func levelLines(role string, t0 time.Time) []snapshot.LogLine {
	lines := tuitest.LogLines(role, 60, t0)
	for i, at := range []int{12, 31, 47} {
		lines[at].Text = fmt.Sprintf("[2026-08-22 10:00:0%d,000] - ERROR - %s: scheduler step %d failed: CUDA error: an illegal memory access was encountered (scheduler.py:%d) and the rest of a long line that only horizontal scrolling reveals", i, role, at, 400+at)
	}
	return lines
}

// Pins: e and E jump between error lines, T shows times, → scrolls a long
// line when wrap is off, and the status line says how far.
func TestLogsErrorsTimesScroll(t *testing.T) {
	m, f := newTestModel(t, 120, 40, tuitest.Deployment(2, 1, 1, t0))
	f.AppendLogs(levelLines("prefill-0", t0)...)
	runCmd(t, m, press(m, "l"))
	press(m, "g", "e")
	first := strings.Split(plain(m), "\n")[2]
	if !strings.Contains(first, "» ") || !strings.Contains(first, "scheduler step 12 failed") {
		t.Fatalf("after g, e the top line is %q", first)
	}
	press(m, "e")
	if !strings.Contains(plain(m), "» [2026-08-22 10:00:01,000] - ERROR - prefill-0: scheduler step 31 failed") ||
		!strings.Contains(plain(m), "error 2/3") {
		t.Fatalf("after e again:\n%s", plain(m))
	}
	press(m, "E")
	if top := strings.Split(plain(m), "\n")[2]; !strings.Contains(top, "step 12 failed") {
		t.Fatalf("after E: %q", top)
	}
	press(m, "E")
	if !strings.Contains(m.flash.text, "no error above") {
		t.Fatalf("flash %q", m.flash.text)
	}
	press(m, "T")
	if top := strings.Split(plain(m), "\n")[2]; !strings.HasPrefix(top, "» "+t0.Add(12*time.Millisecond).Format(stampLayout)+" ") {
		t.Fatalf("timestamps: %q", top)
	}
	press(m, "right", "right")
	screen := plain(m)
	if !strings.Contains(screen, "→") || !strings.Contains(strings.Split(screen, "\n")[2], "only horizontal scrolling") {
		t.Fatalf("after → →:\n%s", screen)
	}
	press(m, "left", "left")
	if strings.Contains(strings.Split(plain(m), "\n")[1], "→") {
		t.Fatal("scroll offset shown after scrolling back")
	}
}

// The logs page with levels: errors in red and warnings in yellow (the
// ANSI golden), times on, merged tags coloured per role; plain goldens at
// every size.
func TestGoldenLogsLevels(t *testing.T) {
	for _, sz := range []struct{ w, h int }{{200, 60}, {120, 40}, {80, 24}} {
		m, f := newTestModel(t, sz.w, sz.h, tuitest.Deployment(4, 2, 2, t0))
		f.AppendLogs(levelLines("prefill-0", t0)...)
		f.AppendLogs(levelLines("decode-0", t0.Add(5*time.Millisecond))...)
		runCmd(t, m, press(m, "L"))
		press(m, "g", "e", "T")
		s := plain(m)
		checkFrame(t, s, sz.w, sz.h)
		golden(t, fmt.Sprintf("logs_levels_%dx%d", sz.w, sz.h), s)
		if sz.w == 120 {
			golden(t, "logs_levels_ansi_120x40", m.render())
		}
	}
}

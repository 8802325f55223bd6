package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// Pins: every verb, its aliases and its argument rules; unknown verbs and
// roles get a hint; a replica group restarts as a group and is refused
// elsewhere with what to type.
func TestParseCommand(t *testing.T) {
	roles := commandTarget{roles: []string{"prefill-0", "decode-0", "decode-1"}, groups: []string{"decode"}, entries: []string{"decode", "prefill"}}
	for _, c := range []struct {
		line      string
		verb, arg string
		err       string
	}{
		{":restart decode-1", "restart", "decode-1", ""},
		{":restart --now decode-1", "restart", "decode-1", ""},
		{":restart decode", "restart", "decode", ""},
		{":stop decode", "", "", "decode is a replica group: name one instance (decode-0, decode-1)"},
		{":stop decode-0 --now", "stop", "decode-0", ""},
		{":describe decode-0", "describe", "decode-0", ""},
		{":d prefill-0", "describe", "prefill-0", ""},
		{":sort", "sort", "", ""},
		{":sort restarts asc", "sort", "restarts", ""},
		{":sort rst", "sort", "restarts", ""},
		{":sort infl sideways", "", "", `is not asc or desc`},
		{":split", "split", "", ""},
		{"r decode-0", "restart", "decode-0", ""},
		{":stop prefill-0", "stop", "prefill-0", ""},
		{":start decode-0", "start", "decode-0", ""},
		{":logs", "logs", "", ""},
		{":logs all", "logs", "", ""},
		{":l decode-1", "logs", "decode-1", ""},
		{":inspect decode-0", "inspect", "decode-0", ""},
		{":sort state", "sort", "state", ""},
		{":sort name", "sort", "role", ""},
		{":q", "quit", "", ""},
		{":help", "help", "", ""},
		{":", "", "", "empty command"},
		{":restart", "", "", ":restart needs ROLE (:restart [--rolling] [--now] ROLE)"},
		{":restart decode-9", "", "", `no role "decode-9" (did you mean "decode-0"?)`},
		{":restart a b", "", "", `:restart: unexpected "b"`},
		{":restart --rolling prefill", "restart", "prefill", ""}, // a kind: the daemon knows its instances
		{":restart --bogus decode-0", "", "", ":restart: unknown flag --bogus"},
		{":signal decode-0", "signal", "decode-0", ""},
		{":signal decode-0 sigusr1", "signal", "decode-0", ""},
		{":kill decode-0 KILL", "signal", "decode-0", ""},
		{":signal decode-0 BOGUS", "", "", `"BOGUS" is not one of TERM, INT`},
		{":signal decode", "", "", "decode is a replica group"},
		{":apply", "apply", "", ""},
		{":apply edited.yaml", "apply", "edited.yaml", ""},
		{":ctx", "ctx", "", ""},
		{":ctx other", "ctx", "other", ""},
		{":scale", "", "", ":scale needs ENTRY=N…"},
		{":quit now", "", "", ":quit takes no argument"},
		{":sort color", "", "", `cannot sort by "color"`},
		{":restrat decode-0", "", "", `unknown command "restrat" (did you mean "restart"?)`},
		{":scale decode=3", "scale", "decode", ""},
		{":scale decode=3 --gpus 4,5", "scale", "decode", ""},
		{":scale --gpus=4 prefill=2", "scale", "prefill", ""},
		{":scale decode=0", "", "", "N of 1 or more"},
		{":scale dec=2", "", "", `no profile entry "dec" (did you mean "decode"?)`},
		{":scale decode=2 x", "", "", `not "x"`},
	} {
		got, err := parseCommand(c.line, roles)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want %q", c.line, err, c.err)
		case c.err == "" && (err != nil || got.verb != c.verb || got.arg != c.arg):
			t.Errorf("%q = %+v, %v; want %s %q", c.line, got, err, c.verb, c.arg)
		}
	}
}

// Pins: : opens the command line, enter runs it on the backend, a bad one
// says why, and esc closes it without acting.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	press(m, ":")
	typeText(m, "restart decode-0")
	if !strings.Contains(plain(m), ":restart decode-0█") {
		t.Fatalf("command line not shown:\n%s", plain(m))
	}
	// A typed restart asks as r does.
	if cmd := press(m, "enter"); cmd != nil || !strings.Contains(plain(m), "restart decode-0? ") {
		t.Fatalf(":restart acted without asking:\n%s", plain(m))
	}
	runCmd(t, m, press(m, "y"))
	if got := f.Calls(); len(got) != 1 || got[0] != "restart decode-0" {
		t.Fatalf("calls %v", got)
	}
	press(m, ":")
	typeText(m, "restrat x")
	press(m, "enter")
	if !strings.Contains(plain(m), `unknown command "restrat" (did you mean "restart"?)`) {
		t.Fatalf("error not shown:\n%s", plain(m))
	}
	press(m, ":")
	typeText(m, "stop prefill-0")
	press(m, "esc")
	if len(f.Calls()) != 1 {
		t.Fatalf("esc acted: %v", f.Calls())
	}
	press(m, ":")
	typeText(m, "logs decode-0")
	runCmd(t, m, press(m, "enter"))
	if m.focus != pageLogs || m.logs.source != "decode-0" {
		t.Fatalf("focus %v source %q", m.focus, m.logs.source)
	}
}

// Pins: :scale asks (saying what starts or stops), then scales through
// the backend; y runs it with the GPUs given.
func TestScaleCommand(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, tuitest.Grouped(deployment()))
	press(m, ":")
	typeText(m, "scale decode=5 --gpus 4")
	if cmd := press(m, "enter"); cmd != nil || !strings.Contains(plain(m), "scale decode=5 (4 → 5: 1 new replica(s) start on GPU(s) 4") {
		t.Fatalf(":scale acted without asking:\n%s", plain(m))
	}
	runCmd(t, m, press(m, "y"))
	if got := f.Calls(); len(got) != 1 || got[0] != "scale decode=5 gpus 4" {
		t.Fatalf("calls %v", got)
	}
	press(m, ":")
	typeText(m, "scale decode=4")
	press(m, "enter")
	if !strings.Contains(plain(m), "decode has 4 replica(s) already") || len(f.Calls()) != 1 {
		t.Fatalf("a scale to the same count:\n%s\ncalls %v", plain(m), f.Calls())
	}
}

// Pins: :sort (and o) order the table on a copy of the snapshot, the
// selection follows its role, and a click selects the row under it.
func TestSortAndClick(t *testing.T) {
	t.Parallel()
	s := deployment()
	m, _ := newTestModel(t, 120, 40, s)
	press(m, "down") // decode-0
	press(m, ":")
	typeText(m, "sort name")
	press(m, "enter")
	if sel, _ := m.overview.role(); sel.Name != "decode-0" {
		t.Fatalf("selection moved to %q", sel.Name)
	}
	if m.snap.Roles[0].Name > m.snap.Roles[len(m.snap.Roles)-1].Name {
		t.Fatal("not sorted by name")
	}
	if s.Roles[0].Name != "prefill-0" {
		t.Fatal("the backend's snapshot was reordered")
	}
	// Click the first table row: body row tableY, screen row tableY+1.
	m.Update(tea.MouseClickMsg{X: 3, Y: m.overview.tableY + 1, Button: tea.MouseLeft})
	if m.overview.selected != 0 {
		t.Fatalf("click selected %d", m.overview.selected)
	}
	m.Update(tea.MouseWheelMsg{X: 3, Y: 5, Button: tea.MouseWheelDown})
	if m.overview.selected != 1 {
		t.Fatalf("wheel down selected %d", m.overview.selected)
	}
}

// Pins: v opens every kept event, the newest at the bottom; & filters by
// substring; scrolling up leaves follow.
func TestEventsPage(t *testing.T) {
	t.Parallel()
	s := deployment()
	s.Events = nil
	for i := 0; i < 80; i++ {
		s.Events = append(s.Events, snapshot.Event{Time: t0.Add(time.Duration(i) * time.Second), Role: fmt.Sprintf("decode-%d", i%3), Message: fmt.Sprintf("event %d", i)})
	}
	m, _ := newTestModel(t, 100, 30, s)
	press(m, "v")
	screen := plain(m)
	if !strings.Contains(screen, "events · 80 of 80 kept") || !strings.Contains(screen, "event 79") || strings.Contains(screen, "event 10\n") {
		t.Fatalf("events page:\n%s", screen)
	}
	press(m, "&")
	typeText(m, "decode-1")
	press(m, "enter")
	screen = plain(m)
	if !strings.Contains(screen, "27 of 80 kept") || strings.Contains(screen, "decode-2") {
		t.Fatalf("filtered:\n%s", screen)
	}
	press(m, "g")
	if first := strings.TrimRight(strings.Split(plain(m), "\n")[2], " "); !strings.HasSuffix(first, "decode-1       event 1") {
		t.Fatalf("first row after g: %q", first)
	}
}

// The gateway's access log is a source: :logs gateway opens it, and tab
// reaches it after the roles.
func TestGatewayLogSource(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	f.AppendLogs(snapshot.LogLine{Seq: 1, Time: t0, Role: "gateway",
		Text: "POST /v1/chat/completions 200 prompt=12 completion=40 latency=1.2s rid=chatcmpl-7"})
	press(m, ":")
	typeText(m, "logs gateway")
	runCmd(t, m, press(m, "enter"))
	if m.focus != pageLogs || m.logs.source != "gateway" {
		t.Fatalf("focus %v source %q", m.focus, m.logs.source)
	}
	if !strings.Contains(plain(m), "POST /v1/chat/completions 200") {
		t.Fatalf("gateway line not shown:\n%s", plain(m))
	}
	srcs := m.logs.sources()
	if srcs[len(srcs)-1] != "gateway" {
		t.Fatalf("sources %v: the gateway is not last", srcs)
	}
	runCmd(t, m, press(m, "tab")) // from the last source back to merged
	if m.logs.source != "" {
		t.Fatalf("tab from gateway went to %q", m.logs.source)
	}
}

package tui

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/snapshot/trend"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// d opens the describe view of the selected role: its command line,
// argv one flag a line, env (secrets as the daemon masked them), ports
// and restart policy, at every size, nothing cut.
func TestGoldenDescribe(t *testing.T) {
	for _, sz := range allSizes {
		m, _ := newTestModel(t, sz.w, sz.h, tuitest.Deployment(8, 4, 4, t0))
		press(m, "down")
		runCmd(t, m, press(m, "d"))
		out := plain(m)
		checkFrame(t, out, sz.w, sz.h)
		if !strings.Contains(out, "describe decode-0") || !strings.Contains(out, "HF_TOKEN") || !strings.Contains(out, "***") {
			t.Fatalf("%dx%d: describe view:\n%s", sz.w, sz.h, out)
		}
		golden(t, fmt.Sprintf("describe_%dx%d", sz.w, sz.h), out)
	}
}

// The describe view says why when the backend cannot answer, and a
// late answer for a role no longer shown is dropped.
func TestDescribeErrors(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	f.Specs = nil
	press(m, "down")
	cmd := press(m, "d")
	if !strings.Contains(plain(m), "asking the daemon") {
		t.Fatalf("no loading line:\n%s", plain(m))
	}
	press(m, "esc")
	m.Update(cmd()) // the answer arrives after esc
	if m.describe.spec != nil {
		t.Fatal("a late answer was kept")
	}
	press(m, "d")
	m.Update(describedMsg{role: "decode-0", err: fmt.Errorf("reach tsd: gone")})
	if !strings.Contains(plain(m), "reach tsd: gone") {
		t.Fatalf("the error is not shown:\n%s", plain(m))
	}
}

// x splits the overview: the table, then the selected role's live log,
// following the selection; a summary row says to open it; x again
// closes the log stream.
func TestSplitView(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, tuitest.Grouped(deployment()))
	f.AppendLogs(tuitest.LogLines("prefill-0", 30, t0)...)
	f.AppendLogs(tuitest.LogLines("prefill-1", 30, t0)...)
	press(m, "right") // open prefill's replicas
	press(m, "down")  // prefill-0
	runCmd(t, m, press(m, "x"))
	out := plain(m)
	if !strings.Contains(out, "logs: prefill-0") || !strings.Contains(out, "[prefill-0] INFO scheduler: step 29") || !strings.Contains(out, "ROLE ") {
		t.Fatalf("split view:\n%s", out)
	}
	if strings.Contains(out, "GPUs · fake") {
		t.Fatalf("the log pane should take the GPU panel's place:\n%s", out)
	}
	runCmd(t, m, press(m, "down"))
	if out := plain(m); !strings.Contains(out, "logs: prefill-1") || !strings.Contains(out, "[prefill-1] INFO") {
		t.Fatalf("the log did not follow the selection:\n%s", out)
	}
	if n := f.LogSubscribers(); n != 1 {
		t.Fatalf("%d log subscriptions, want the selected role's only", n)
	}
	press(m, "up", "up") // the summary row
	if out := plain(m); !strings.Contains(out, "replicas: → opens them, then select one for its log") {
		t.Fatalf("summary row in the split view:\n%s", out)
	}
	press(m, "x")
	if n := f.LogSubscribers(); n != 0 || m.overview.split.on {
		t.Fatalf("x did not close the split view: %d subscriptions", n)
	}
}

// The split view at every size.
func TestGoldenSplit(t *testing.T) {
	for _, sz := range allSizes {
		m, f := newTestModel(t, sz.w, sz.h, tuitest.WithTraffic(tuitest.Deployment(8, 2, 4, t0)))
		f.AppendLogs(tuitest.LogLines("decode-0", 80, t0)...)
		press(m, "down")
		runCmd(t, m, press(m, "x"))
		out := plain(m)
		checkFrame(t, out, sz.w, sz.h)
		golden(t, fmt.Sprintf("split_%dx%d", sz.w, sz.h), out)
	}
}

// / filters the roles table as it is typed (name, kind, state, reason);
// ctrl+w and ctrl+u edit the prompt; esc on the overview clears it; a
// filter nothing matches says so.
func TestOverviewFilter(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 120, 40, deployment())
	press(m, "/")
	typeText(m, "dec")
	rows := tableLines(t, m)
	for _, r := range rows {
		if !strings.Contains(r, "decode") {
			t.Fatalf("row %q passed the filter %q", r, "dec")
		}
	}
	if len(rows) != 4 || !strings.Contains(plain(m), "filter: dec█ · 4 of 8 roles") {
		t.Fatalf("filtering:\n%s", plain(m))
	}
	press(m, "ctrl+w")
	typeText(m, "crashed")
	press(m, "enter")
	if rows := tableLines(t, m); len(rows) != 1 || !strings.Contains(rows[0], "decode-1") {
		t.Fatalf("filter by reason: %q", rows)
	}
	if !strings.Contains(plain(m), `filter "crashed" · 1 of 8 roles`) {
		t.Fatalf("applied filter line:\n%s", plain(m))
	}
	press(m, "/", "ctrl+u")
	typeText(m, "nothing-like-it")
	press(m, "enter")
	if !strings.Contains(plain(m), "no role matches the filter") {
		t.Fatalf("empty filter result:\n%s", plain(m))
	}
	press(m, "esc")
	if rows := tableLines(t, m); len(rows) != 8 || m.overview.filter != "" {
		t.Fatalf("esc did not clear the filter: %d rows", len(rows))
	}
}

// o sorts by each column in turn with a marker in its heading, O
// reverses it, and :sort names any column and direction; the plan's
// order comes back after the last column.
func TestSortMarker(t *testing.T) {
	t.Parallel()
	s := deployment()
	m, _ := newTestModel(t, 200, 40, tuitest.WithTraffic(s))
	press(m, "o")
	if h := header(t, plain(m)); !strings.Contains(h, "ROLE↑") {
		t.Fatalf("o: header %q", h)
	}
	press(m, "O")
	if h := header(t, plain(m)); !strings.Contains(h, "ROLE↓") || m.snap.Roles[0].Name != "prefill-1" {
		t.Fatalf("O: header %q, first %s", h, m.snap.Roles[0].Name)
	}
	press(m, ":")
	typeText(m, "sort restarts")
	press(m, "enter")
	if h := header(t, plain(m)); !strings.Contains(h, "RST↓") || m.snap.Roles[0].Name != "decode-1" {
		t.Fatalf(":sort restarts: header %q, first %s", h, m.snap.Roles[0].Name)
	}
	press(m, ":")
	typeText(m, "sort reqs asc")
	press(m, "enter")
	if h := header(t, plain(m)); !strings.Contains(h, "REQ/S↑") {
		t.Fatalf(":sort reqs asc: header %q", h)
	}
	for i := 0; i < len(tableColumns) && m.overview.sort.by != ""; i++ {
		press(m, "o")
	}
	if m.overview.sort.by != "" || !slices.EqualFunc(m.snap.Roles, s.Roles, func(a, b snapshot.RoleStatus) bool { return a.Name == b.Name }) {
		t.Fatalf("o past the last column: sort %q", m.overview.sort.by)
	}
	if h := header(t, plain(m)); strings.ContainsAny(h, "↑↓") {
		t.Fatalf("plan order keeps a marker: %q", h)
	}
}

// Pins the command line's Tab completion: verbs, then each verb's
// arguments; a single candidate completes with a space, several grow to
// their common prefix.
func TestCompleteLine(t *testing.T) {
	tg := commandTarget{roles: []string{"decode-0", "decode-1", "prefill-0"}, groups: []string{"decode"}, entries: []string{"decode", "prefill"}}
	for _, c := range []struct {
		line, want string
		cands      []string
	}{
		{"", "", dashboardVerbs()},
		{"re", "restart ", []string{"restart"}},
		{"s", "s", []string{"stop", "start", "scale", "signal", "sort", "split"}},
		{"st", "st", []string{"stop", "start"}},
		{"restart d", "restart decode", []string{"decode-0", "decode-1", "decode"}},
		{"restart p", "restart prefill-0 ", []string{"prefill-0"}},
		{"restart -", "restart --", []string{"--rolling", "--now"}},
		{"restart --n", "restart --now ", []string{"--now"}},
		{"restart --now -", "restart --now --rolling ", []string{"--rolling"}},
		{"signal decode-0 ", "signal decode-0 ", []string{"TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "CONT", "STOP", "KILL"}},
		{"scale d", "scale decode=", []string{"decode="}},
		{"restart --now d", "restart --now decode", []string{"decode-0", "decode-1", "decode"}},
		{"stop d", "stop decode-", []string{"decode-0", "decode-1"}},
		{"logs g", "logs gateway ", []string{"gateway"}},
		{"sort re", "sort re", []string{"restarts", "reqs", "reason"}},
		{"sort rst", "sort rst", nil},
		{"sort restarts ", "sort restarts ", []string{"asc", "desc"}},
		{"restart decode-0 ", "restart decode-0 ", nil},
		{"bogus x", "bogus x", nil},
	} {
		got, cands := completeLine(c.line, tg)
		if got != c.want || fmt.Sprint(cands) != fmt.Sprint(c.cands) {
			t.Errorf("completeLine(%q) = %q %q, want %q %q", c.line, got, cands, c.want, c.cands)
		}
	}
}

// In the dashboard: tab completes, tab again cycles through the
// candidates (shown in the footer), up and down walk the history.
func TestCommandTabAndHistory(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 120, 40, deployment())
	press(m, ":")
	typeText(m, "insp")
	press(m, "tab")
	typeText(m, "dec")
	press(m, "tab")
	if m.cmd.in.text != "inspect decode-" {
		t.Fatalf("after tab: %q", m.cmd.in.text)
	}
	if foot := plain(m); !strings.Contains(foot, "tab: decode-0 decode-1 decode-2 decode-3") {
		t.Fatalf("candidates not shown:\n%s", foot)
	}
	press(m, "tab")
	if m.cmd.in.text != "inspect decode-0" || !strings.Contains(plain(m), "[decode-0]") {
		t.Fatalf("cycling: %q", m.cmd.in.text)
	}
	press(m, "tab", "tab")
	if m.cmd.in.text != "inspect decode-2" {
		t.Fatalf("cycling on: %q", m.cmd.in.text)
	}
	press(m, "shift+tab")
	if m.cmd.in.text != "inspect decode-1" {
		t.Fatalf("shift+tab: %q", m.cmd.in.text)
	}
	press(m, "enter")
	if m.focus != pageInspector || m.inspector.role != "decode-1" {
		t.Fatalf("inspect did not run: focus %v role %q", m.focus, m.inspector.role)
	}
	press(m, "esc", ":")
	typeText(m, "events")
	press(m, "enter", "esc", ":")
	typeText(m, "half typed")
	press(m, "up")
	if m.cmd.in.text != "events" {
		t.Fatalf("up: %q", m.cmd.in.text)
	}
	press(m, "up")
	if m.cmd.in.text != "inspect decode-1" {
		t.Fatalf("up up: %q", m.cmd.in.text)
	}
	press(m, "up") // the oldest: stays
	press(m, "down", "down")
	if m.cmd.in.text != "half typed" {
		t.Fatalf("down to the draft: %q", m.cmd.in.text)
	}
	press(m, "ctrl+w")
	if m.cmd.in.text != "half " {
		t.Fatalf("ctrl+w: %q", m.cmd.in.text)
	}
	press(m, "ctrl+u")
	if m.cmd.in.text != "" || !m.cmd.active {
		t.Fatalf("ctrl+u: %q", m.cmd.in.text)
	}
}

// Pins lineInput: the keys every prompt edits with.
func TestLineInput(t *testing.T) {
	for _, c := range []struct {
		text string
		keys []string
		want string
	}{
		{"", []string{"a", "b", " ", "c"}, "ab c"},
		{"restart decode-0", []string{"ctrl+w"}, "restart "},
		{"restart decode-0  ", []string{"ctrl+w"}, "restart "},
		{"restart decode-0", []string{"ctrl+w", "ctrl+w"}, ""},
		{"restart decode-0", []string{"alt+backspace"}, "restart "},
		{"restart decode-0", []string{"ctrl+u"}, ""},
		{"héllo", []string{"backspace"}, "héll"},
		{"", []string{"backspace", "ctrl+w", "ctrl+u"}, ""},
	} {
		in := lineInput{text: c.text}
		for _, k := range c.keys {
			in.edit(keyMsg(k))
		}
		if in.text != c.want {
			t.Errorf("%q + %v = %q, want %q", c.text, c.keys, in.text, c.want)
		}
	}
}

// Ctrl-U and Ctrl-W work in the logs' find and filter prompts and the
// events filter too.
func TestPromptEditingEverywhere(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	f.AppendLogs(tuitest.LogLines("decode-0", 20, t0)...)
	press(m, "down")
	runCmd(t, m, press(m, "l"))
	press(m, "/")
	typeText(m, "step 1")
	press(m, "ctrl+w")
	typeText(m, "batch")
	if m.logs.in.text != "step batch" {
		t.Fatalf("find prompt: %q", m.logs.in.text)
	}
	press(m, "esc", "&")
	typeText(m, "junk")
	press(m, "ctrl+u")
	typeText(m, "WARN")
	press(m, "enter")
	if m.logs.filterText != "WARN" {
		t.Fatalf("filter prompt: %q", m.logs.filterText)
	}
	press(m, "esc", "v", "&")
	typeText(m, "a b")
	press(m, "ctrl+w")
	if m.events.input.text != "a " {
		t.Fatalf("events filter prompt: %q", m.events.input.text)
	}
}

// r on the only ready instance of its kind warns of the outage; R on a
// kind of one instance says it is the only one; ! answers without the
// drain; :restart --now and :stop --now ask "now" and y does that.
func TestOutageAndNow(t *testing.T) {
	t.Parallel()
	s := tuitest.Deployment(4, 1, 4, t0) // prefill-0, decode-0 (handshaking), decode-1, encode-0
	m, f := newTestModel(t, 200, 40, s)
	press(m, "down", "down") // decode-1: the only ready decode
	press(m, "r")
	if !strings.Contains(plain(m), "restart decode-1? "+inFlightText(s.Roles[2].InFlight)+"; no other decode serves: its requests fail until it is ready again [y/n · ! now, no drain]") {
		t.Fatalf("no outage warning:\n%s", plain(m))
	}
	runCmd(t, m, press(m, "!"))
	press(m, "up", "up", "R") // prefill-0: the only prefill
	if !strings.Contains(plain(m), "rolling restart of prefill-0 (the only instance)? ") || !strings.Contains(plain(m), "no other prefill serves") {
		t.Fatalf("R on a single instance:\n%s", plain(m))
	}
	runCmd(t, m, press(m, "y"))
	press(m, ":")
	typeText(m, "stop --now decode-1")
	press(m, "enter")
	if !strings.Contains(plain(m), "stop decode-1 now? ") || strings.Contains(plain(m), "! now") {
		t.Fatalf(":stop --now prompt:\n%s", plain(m))
	}
	runCmd(t, m, press(m, "y"))
	press(m, "s")
	runCmd(t, m, press(m, "y")) // s on prefill-0, drained
	want := []string{"restart --now decode-1", "rolling-restart prefill", "stop --now decode-1", "stop prefill-0"}
	if got := f.Calls(); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

// Pins outage: a kind with another routed, ready instance loses nothing.
func TestOutage(t *testing.T) {
	s := tuitest.Deployment(8, 1, 4, t0)
	for _, c := range []struct {
		kind string
		out  []string
		want bool
	}{
		{"decode", []string{"decode-1"}, false},                        // decode-2, -3 serve
		{"decode", []string{"decode-1", "decode-2", "decode-3"}, true}, // decode-0 is handshaking
		{"prefill", []string{"prefill-0"}, false},
		{"prefill", []string{"prefill-0", "prefill-1"}, true},
		{"", []string{"x"}, false},
	} {
		if got := outage(&s, c.kind, c.out) != ""; got != c.want {
			t.Errorf("outage(%s, %v) = %v, want %v", c.kind, c.out, got, c.want)
		}
	}
}

// An attaching dashboard shows the daemon's past at once: the first
// snapshot's History seeds the trends (two minutes of samples here, a
// full sparkline and the span in the heading), and live snapshots go on
// from there.
func TestTrendsFromDaemonHistory(t *testing.T) {
	t.Parallel()
	daemon := trend.New(time.Second, trend.DefaultCap)
	s := tuitest.Deployment(4, 1, 2, t0)
	for i := 120; i >= 1; i-- {
		x := s
		x.Time = t0.Add(-time.Duration(i) * time.Second)
		x.Gateway.ReqPerSec = float64(i % 10)
		daemon.Fold(x)
	}
	first := s
	first.History = daemon.History()
	m, f := newTestModel(t, 120, 40, first)
	out := plain(m)
	if !strings.Contains(out, "trends · last 2m · a sample each 1s · kept by the daemon") {
		t.Fatalf("no daemon history on attach:\n%s", out)
	}
	if m.snap.History != nil {
		t.Fatal("the dashboard keeps the history in its snapshot")
	}
	line := rowOf(t, strings.Split(out, "\n"), "  req/s    ")
	if n := strings.Count(line, "▁") + strings.Count(line, "▂") + strings.Count(line, "▃") + strings.Count(line, "▄") +
		strings.Count(line, "▅") + strings.Count(line, "▆") + strings.Count(line, "▇") + strings.Count(line, "█"); n < 80 {
		t.Fatalf("req/s sparkline has %d cells, want two minutes' worth:\n%s", n, line)
	}
	if !strings.Contains(line, "0.0–") {
		t.Fatalf("no range beside the sparkline: %q", line)
	}
	next := s
	next.Time = t0.Add(time.Second)
	f.Publish(next)
	m.setSnapshot(next)
	if got := m.trends.set.Len(); got != 122 {
		t.Fatalf("%d samples after one live snapshot, want 122", got)
	}
}

// GPU bars are coloured by load as nvitop does: green below 10%, yellow
// below 75% (memory 80%), red from there.
func TestGPULoadColours(t *testing.T) {
	for _, c := range []struct {
		pct   float64
		label string
		want  paint
	}{
		{0, "util", pGood}, {9.9, "util", pGood}, {10, "util", pBusy}, {74, "util", pBusy}, {75, "util", pBad}, {100, "util", pBad},
		{79, "mem", pBusy}, {80, "mem", pBad}, {5, "gpu0 mem", pGood},
	} {
		if got := loadPaint(c.pct, c.label); got != c.want {
			t.Errorf("loadPaint(%g, %s) = %d, want %d", c.pct, c.label, got, c.want)
		}
	}
	m, _ := newTestModel(t, 120, 40, tuitest.Deployment(4, 1, 4, t0)) // utils 20, 57, 94, 31%
	ps := m.overview.paints()
	screen := m.render()
	for _, want := range []string{ps[pBusy].wrap("██"), ps[pBad].wrap("█████████")} {
		if !strings.Contains(screen, want) {
			t.Errorf("no bar painted %q", want)
		}
	}
}

// A long question wraps onto more lines rather than being cut: at 80
// columns the outage warning and the keys are all on screen.
func TestConfirmWraps(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 80, 24, tuitest.Deployment(4, 1, 4, t0))
	press(m, "down", "down", "r")
	out := plain(m)
	checkFrame(t, out, 80, 24)
	joined := strings.Join(strings.Fields(out), " ")
	if !strings.Contains(joined, "no other decode serves: its requests fail until it is ready again [y/n · ! now, no drain]") || strings.Contains(out, "again […") {
		t.Fatalf("the question is cut:\n%s", out)
	}
}

// A failed role's reason is spelled out in full under the table whether
// or not it is selected; past four lines, one says how many more failed.
func TestFailedReasonsShown(t *testing.T) {
	t.Parallel()
	s := tuitest.Troubled(tuitest.Deployment(8, 2, 4, t0), t0, 2, -1, -1)
	s.Roles[5].State, s.Roles[5].Reason = snapshot.StateFailed, "exit 1 after 2s; restart budget spent (3 in 1m): RuntimeError: CUDA error: an illegal memory access was encountered"
	m, _ := newTestModel(t, 80, 24, s)
	out := plain(m)
	checkFrame(t, out, 80, 24)
	joined := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"↳ decode-1 failed: exit 1 after 3.2s; restart budget spent (3 in 1m)",
		"↳ decode-2 failed: exit 1 after 2s; restart budget spent (3 in 1m): RuntimeError: CUDA error: an illegal memory access was encountered",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q:\n%s", want, out)
		}
	}
	for i := 0; i < 8; i++ {
		s.Roles[i].State, s.Roles[i].Reason = snapshot.StateFailed, fmt.Sprintf("exit %d", i)
	}
	m, _ = newTestModel(t, 80, 24, s)
	if out := plain(m); !strings.Contains(out, "↳ 5 more failed: select one for why") {
		t.Fatalf("no count of the rest:\n%s", out)
	}
}

// At 80 columns a breaker's mark stays whole after the state, in its
// short form when the column is narrow.
func TestBreakerMarkFits(t *testing.T) {
	t.Parallel()
	s := drainingDeployment()
	s.Gateway.Breakers = []snapshot.BreakerStatus{{Role: "decode-2", State: snapshot.BreakerHalfOpen, Since: t0}}
	m, _ := newTestModel(t, 80, 24, s)
	row := rowOf(t, tableLines(t, m), "decode-2")
	if !strings.Contains(row, "ready · brk half-open") && !strings.Contains(row, "ready · breaker half-open") {
		t.Fatalf("breaker mark: %q", row)
	}
}

// The gateway line shows how requests split between the layouts when a
// deployment has more than one (the setting, then each one's share of
// the requests routed), and nothing of it when all go prefill → decode.
func TestOverviewLayoutSplit(t *testing.T) {
	t.Parallel()
	s := deployment()
	m, _ := newTestModel(t, 160, 40, s)
	if strings.Contains(plain(m), "layout ") {
		t.Fatalf("a PD deployment shows a layout split:\n%s", plain(m))
	}
	s.Gateway.Layouts = &snapshot.LayoutStatus{Disaggregation: "conditional", PD: 62, Aggregated: 38}
	m, _ = newTestModel(t, 160, 40, s)
	if !strings.Contains(plain(m), "layout conditional pd 62% agg 38%") {
		t.Fatalf("no layout split on the gateway line:\n%s", plain(m))
	}
	if got := layoutSplit(&snapshot.LayoutStatus{Disaggregation: "never"}); got != "layout never" {
		t.Fatalf("nothing routed yet: %q", got)
	}
	if got := layoutSplit(&snapshot.LayoutStatus{Disaggregation: "conditional", PD: 1, Aggregated: 2}); got != "layout conditional pd 33% agg 67%" {
		t.Fatalf("shares: %q", got)
	}
}

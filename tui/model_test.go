package tui

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

func deployment() snapshot.Snapshot { return tuitest.Deployment(8, 4, 4, t0) }

// r asks first; y runs Backend.Restart on the selected role in a command.
func TestRestartConfirmCallsBackend(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	press(m, "down")
	if cmd := press(m, "r"); cmd != nil {
		t.Fatal("r must only ask, not act")
	}
	if !strings.Contains(plain(m), "restart decode-0? "+inFlightText(m.snap.Roles[1].InFlight)+" [y/n · ! now, no drain]") {
		t.Fatalf("no confirm prompt on screen:\n%s", plain(m))
	}
	if len(f.Calls()) != 0 {
		t.Fatalf("backend called before confirming: %v", f.Calls())
	}
	runCmd(t, m, press(m, "y"))
	if got := f.Calls(); !slices.Equal(got, []string{"restart decode-0"}) {
		t.Fatalf("calls = %v", got)
	}
	// "done" only once the role is ready again with one more restart.
	if !strings.Contains(plain(m), "restart decode-0: waiting for it to be ready") {
		t.Fatalf("wait not shown:\n%s", plain(m))
	}
	s := m.snap
	s.Roles = append([]snapshot.RoleStatus(nil), s.Roles...)
	s.Roles[1].State, s.Roles[1].Restarts = snapshot.StateStarting, s.Roles[1].Restarts+1
	m.setSnapshot(s)
	if strings.Contains(plain(m), "done") {
		t.Fatal("done while the role is still starting")
	}
	s.Roles[1].State = snapshot.StateReady
	m.setSnapshot(s)
	if !strings.Contains(plain(m), "restart decode-0: done, ready again in") {
		t.Fatalf("result not shown:\n%s", plain(m))
	}
}

// n (or esc) cancels a confirm and nothing is called.
func TestRestartCancel(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 80, 24, deployment())
	press(m, "r")
	if cmd := press(m, "n"); cmd != nil {
		t.Fatal("cancel produced a command")
	}
	press(m, "r")
	if cmd := press(m, "esc"); cmd != nil {
		t.Fatal("esc produced a command")
	}
	if len(f.Calls()) != 0 {
		t.Fatalf("calls = %v", f.Calls())
	}
	if m.focus != pageOverview {
		t.Fatal("esc on a confirm must not navigate")
	}
}

// R asks for a rolling restart of the selected role's kind, naming every
// instance and the requests in flight, then runs it.
func TestRollingRestartConfirm(t *testing.T) {
	t.Parallel()
	s := deployment()
	m, f := newTestModel(t, 200, 24, s)
	press(m, "down") // decode-0
	var names []string
	inFlight := 0
	for _, r := range s.Roles {
		if r.Kind == "decode" {
			names = append(names, r.Name)
			inFlight += r.InFlight
		}
	}
	if cmd := press(m, "R"); cmd != nil {
		t.Fatal("R must only ask")
	}
	want := "rolling restart of " + strings.Join(names, ", ") + " (one at a time, each drained)? " + inFlightText(inFlight) + " [y/n · ! now, no drain]"
	if !strings.Contains(plain(m), want) {
		t.Fatalf("no prompt %q:\n%s", want, plain(m))
	}
	runCmd(t, m, press(m, "y"))
	if got := f.Calls(); !slices.Equal(got, []string{"rolling-restart decode"}) {
		t.Fatalf("calls = %v", got)
	}
}

// A draining role shows what is left and for how long; a stalled one why.
func TestDrainAndStallShown(t *testing.T) {
	t.Parallel()
	s := deployment()
	s.Roles[1].State = snapshot.StateDraining
	s.Roles[1].DrainInFlight = 4
	s.Roles[1].DrainDeadline = t0.Add(12 * time.Second)
	s.Roles[2].State = snapshot.StateStalled
	s.Roles[2].Reason = "process 4242 (ts-fake) stopped"
	m, _ := newTestModel(t, 160, 40, s)
	out := plain(m)
	if !strings.Contains(out, "draining · 4 in flight · ") || !strings.Contains(out, "s left") {
		t.Fatalf("drain not shown:\n%s", out)
	}
	if !strings.Contains(out, " stalled ") || !strings.Contains(out, "process 4242 (ts-fake) stopped") {
		t.Fatalf("stall not shown:\n%s", out)
	}
	r := s.Roles[1]
	if got := stateText(&r, t0); got != "draining · 4 in flight · 12s left" {
		t.Fatalf("stateText = %q", got)
	}
	if got := stateText(&r, t0.Add(time.Minute)); got != "draining · 4 in flight · 0s left" {
		t.Fatalf("past the deadline: %q", got)
	}
}

// s asks before stopping a running role (saying what is in flight) and
// starts a stopped one at once.
func TestStopStart(t *testing.T) {
	t.Parallel()
	s := deployment()
	s.Roles[1].State = snapshot.StateStopped
	m, f := newTestModel(t, 80, 24, s)
	// Stopping a serving role asks first; n keeps it.
	if cmd := press(m, "s"); cmd != nil || !strings.Contains(plain(m), "stop prefill-0? ") {
		t.Fatalf("s did not ask:\n%s", plain(m))
	}
	if strings.Contains(strings.Split(plain(m), "\n")[23], "q quit") {
		t.Fatal("the prompt's footer shows keys that do not work there")
	}
	press(m, "n")
	press(m, "s")
	runCmd(t, m, press(m, "y"))
	press(m, "down")
	runCmd(t, m, press(m, "s")) // a stopped role starts without asking
	if got := f.Calls(); !slices.Equal(got, []string{"stop prefill-0", "start decode-0"}) {
		t.Fatalf("calls = %v", got)
	}
}

// A message leaves the message line after a few seconds; one that says
// something is under way ("…") stays.
func TestFlashExpires(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 80, 24, deployment())
	now := t0
	tickAt := func(d time.Duration) {
		now = now.Add(d)
		m.Update(tickMsg(now))
	}
	m.flash.set("saved the full log to /tmp/x.log")
	tickAt(time.Second)
	tickAt(4 * time.Second)
	if m.flash.text == "" {
		t.Fatal("cleared before its time")
	}
	tickAt(time.Second)
	if m.flash.text != "" {
		t.Fatalf("still shown: %q", m.flash.text)
	}
	m.flash.set("restart decode-0…")
	tickAt(time.Second)
	tickAt(time.Minute)
	if m.flash.text == "" {
		t.Fatal("an under-way message was cleared")
	}
}

// The footer always ends with t, ? and q, at any width; page keys give
// way with "…".
func TestFooterKeepsHelpAndQuit(t *testing.T) {
	t.Parallel()
	for _, w := range []int{60, 80, 120, 200} {
		m, _ := newTestModel(t, w, 24, deployment())
		lines := strings.Split(plain(m), "\n")
		foot := strings.TrimRight(lines[len(lines)-1], " ")
		if !strings.HasSuffix(foot, "? help · q quit") {
			t.Errorf("width %d footer %q", w, foot)
		}
	}
}

// A failing control call says what failed.
func TestControlErrorShown(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	f.Err = errors.New("role is remote")
	press(m, "s")
	runCmd(t, m, press(m, "y"))
	if !strings.Contains(plain(m), "stop prefill-0 failed: role is remote") {
		t.Fatalf("error not shown:\n%s", plain(m))
	}
}

// q asks while roles run; y (or q again) quits; n stays.
func TestQuitConfirmWhileRunning(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 80, 24, deployment())
	if cmd := press(m, "q"); cmd != nil {
		t.Fatal("q quit without asking while roles run")
	}
	if !strings.Contains(plain(m), "quit tsd? this stops 8 running role(s) [y/n]") {
		t.Fatalf("no prompt:\n%s", plain(m))
	}
	press(m, "n")
	press(m, "q")
	cmd := press(m, "q")
	if cmd == nil {
		t.Fatal("q q did not quit")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Fatal("confirmed quit is not tea.Quit")
	}
}

// With nothing running, q quits at once.
func TestQuitNothingRunning(t *testing.T) {
	t.Parallel()
	s := deployment()
	for i := range s.Roles {
		s.Roles[i].State = snapshot.StateStopped
	}
	m, _ := newTestModel(t, 80, 24, s)
	cmd := press(m, "q")
	if cmd == nil {
		t.Fatal("q did nothing")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Fatal("q is not tea.Quit")
	}
}

// enter opens the inspector on the selected role; esc comes back.
func TestInspectAndBack(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 120, 40, deployment())
	press(m, "down", "down", "enter")
	if m.focus != pageInspector || m.inspector.role != "decode-1" {
		t.Fatalf("focus %v role %q", m.focus, m.inspector.role)
	}
	if !strings.Contains(plain(m), "crashed (exit code 137)") {
		t.Fatal("inspector lacks the restart reason")
	}
	press(m, "esc")
	if m.focus != pageOverview {
		t.Fatalf("esc went to %v", m.focus)
	}
}

// Opening logs subscribes to that role; leaving cancels the subscription.
func TestLogsSubscribeAndCancel(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	f.AppendLogs(tuitest.LogLines("prefill-0", 30, t0)...)
	f.AppendLogs(tuitest.LogLines("decode-0", 30, t0)...)
	runCmd(t, m, press(m, "l"))
	if m.focus != pageLogs || m.logs.source != "prefill-0" || m.logs.buf.n != 30 {
		t.Fatalf("focus %v source %q lines %d", m.focus, m.logs.source, m.logs.buf.n)
	}
	if f.LogSubscribers() != 1 {
		t.Fatalf("subscribers = %d", f.LogSubscribers())
	}
	// tab moves to the next source with a fresh subscription.
	runCmd(t, m, press(m, "tab"))
	if m.logs.source != "decode-0" || m.logs.buf.n != 30 || f.LogSubscribers() != 1 {
		t.Fatalf("after tab: source %q lines %d subs %d", m.logs.source, m.logs.buf.n, f.LogSubscribers())
	}
	press(m, "esc")
	if m.focus != pageOverview || f.LogSubscribers() != 0 {
		t.Fatalf("after esc: focus %v subs %d", m.focus, f.LogSubscribers())
	}
}

// A batch from a subscription that was replaced is ignored.
func TestLogsStaleBatchIgnored(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 80, 24, deployment())
	runCmd(t, m, press(m, "l"))
	old := m.logs.feed.gen
	runCmd(t, m, press(m, "tab"))
	m.Update(logBatchMsg{gen: old, batches: [][]snapshot.LogLine{tuitest.LogLines("prefill-0", 5, t0)}})
	if m.logs.buf.n != 0 {
		t.Fatalf("stale batch ingested: %d lines", m.logs.buf.n)
	}
}

// & sets a regexp filter, ! inverts it, an empty one clears it.
func TestLogsFilter(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	f.AppendLogs(tuitest.LogLines("prefill-0", 200, t0)...)
	runCmd(t, m, press(m, "l"))
	press(m, "&")
	typeText(m, "WARN(ING)?")
	press(m, "enter")
	if got := m.logs.buf.viewLen(); got != 4 {
		t.Fatalf("filtered view has %d lines, want 4", got)
	}
	press(m, "!")
	if got := m.logs.buf.viewLen(); got != 196 {
		t.Fatalf("inverted view has %d lines, want 196", got)
	}
	if !strings.Contains(plain(m), "filter /WARN(ING)?/ inverted 196/200") {
		t.Fatalf("status line:\n%s", plain(m))
	}
	press(m, "&")
	for range len("WARN(ING)?") {
		press(m, "backspace")
	}
	press(m, "enter")
	if got := m.logs.buf.viewLen(); got != 200 {
		t.Fatalf("cleared filter shows %d lines", got)
	}
	press(m, "&")
	typeText(m, "(")
	press(m, "enter")
	if !strings.Contains(plain(m), "bad filter") {
		t.Fatalf("bad regexp not reported:\n%s", plain(m))
	}
}

// / finds (newest first while following); n/N move and wrap around.
func TestLogsFindNextPrev(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	f.AppendLogs(tuitest.LogLines("prefill-0", 200, t0)...) // "model loaded" on lines 7, 57, 107, 157
	runCmd(t, m, press(m, "l"))
	press(m, "/")
	typeText(m, "Model Loaded") // capitals: case-sensitive, no match
	press(m, "enter")
	if m.logs.find.has || !strings.Contains(plain(m), "no match") {
		t.Fatal("case-sensitive find matched")
	}
	press(m, "/")
	typeText(m, "model loaded")
	press(m, "enter")
	want := func(abs uint64, idx int) {
		t.Helper()
		if !m.logs.find.has || m.logs.find.cur != abs || m.logs.find.idx != idx || m.logs.find.count != 4 {
			t.Fatalf("cur %d (has %v) idx %d/%d, want %d idx %d/4", m.logs.find.cur, m.logs.find.has, m.logs.find.idx, m.logs.find.count, abs, idx)
		}
		if !strings.Contains(plain(m), "» [prefill-0] INFO model loaded") {
			t.Fatalf("current match not on screen:\n%s", plain(m))
		}
	}
	want(157, 4)
	if m.logs.follow {
		t.Fatal("find left follow on")
	}
	press(m, "n")
	want(7, 1) // wrapped
	press(m, "n")
	want(57, 2)
	press(m, "N", "N")
	want(157, 4)
}

// While typing a find, q and other global keys are text.
func TestTypingDoesNotTriggerKeys(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 80, 24, deployment())
	runCmd(t, m, press(m, "l"))
	press(m, "/")
	if cmd := press(m, "q"); cmd != nil {
		t.Fatal("q while typing produced a command")
	}
	press(m, "t", "?")
	if m.logs.in.text != "qt?" || m.confirm != nil || m.focus != pageLogs {
		t.Fatalf("input %q confirm %v focus %v", m.logs.in.text, m.confirm != nil, m.focus)
	}
	press(m, "esc")
	if m.logs.input != inputNone || m.focus != pageLogs {
		t.Fatal("esc while typing must cancel typing only")
	}
	// ctrl+c is never text: it asks to quit even while typing.
	press(m, "/", "ctrl+c")
	if m.confirm == nil || !m.confirm.quitKey {
		t.Fatal("ctrl+c while typing did not ask to quit")
	}
}

// S saves the full log (merged or one role's) through the backend and
// says where.
func TestLogsSave(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 200, 40, tuitest.Deployment(2, 1, 1, t0))
	wd, _ := os.Getwd()
	runCmd(t, m, press(m, "l"))
	runCmd(t, m, press(m, "S"))
	want := filepath.Join(wd, "prefill-0-20261129-093000.log")
	if got := f.Calls(); !slices.Equal(got, []string{"save prefill-0 " + want}) {
		t.Fatalf("calls = %v", got)
	}
	if !strings.Contains(plain(m), "saved the full prefill-0 log to "+want) {
		t.Fatalf("path not shown:\n%s", plain(m))
	}
	runCmd(t, m, press(m, "L"))
	runCmd(t, m, press(m, "S"))
	want = filepath.Join(wd, "merged-20261129-093000.log")
	if got := f.Calls(); len(got) != 2 || got[1] != "save  "+want {
		t.Fatalf("calls = %v", got)
	}
	f.Err = errors.New("disk full")
	runCmd(t, m, press(m, "S"))
	if !strings.Contains(plain(m), "save merged log failed: disk full") {
		t.Fatalf("save error not shown:\n%s", plain(m))
	}
}

// t sends a test request and shows the reply and latency.
func TestTestRequest(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 120, 40, deployment())
	cmd := press(m, "t")
	if press(m, "t") != nil {
		t.Fatal("a second t while one runs started another")
	}
	runCmd(t, m, cmd)
	if got := f.Calls(); !slices.Equal(got, []string{"test"}) {
		t.Fatalf("calls = %v", got)
	}
	if !strings.Contains(plain(m), `test request ok in 42ms: "Hello from ts-fake"`) {
		t.Fatalf("result not shown:\n%s", plain(m))
	}
}

// ? toggles the help page; esc leaves it.
func TestHelpToggle(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 80, 24, deployment())
	press(m, "?")
	if m.focus != pageHelp {
		t.Fatal("? did not open help")
	}
	press(m, "?")
	if m.focus != pageOverview {
		t.Fatal("? did not close help")
	}
	press(m, "enter", "?", "esc")
	if m.focus != pageInspector {
		t.Fatalf("esc from help went to %v, want the inspector", m.focus)
	}
}

// A new snapshot replaces the old one and the selection stays in range.
func TestSnapshotShrinksSelection(t *testing.T) {
	t.Parallel()
	m, _ := newTestModel(t, 80, 24, deployment())
	press(m, "G")
	m.Update(snapMsg{s: tuitest.Deployment(3, 1, 1, t0)})
	if m.overview.selected != 2 {
		t.Fatalf("selected = %d", m.overview.selected)
	}
	checkFrame(t, m.render(), 80, 24)
}

// A burst of snapshots reaches the UI as one message holding the newest.
func TestSnapshotFeedCoalesces(t *testing.T) {
	t.Parallel()
	ch := make(chan snapshot.Snapshot, 100)
	for i := 1; i <= 100; i++ {
		ch <- snapshot.Snapshot{Seq: uint64(i)}
	}
	msg := waitSnap(ch, make(chan struct{}))()
	if s, ok := msg.(snapMsg); !ok || s.s.Seq != 100 {
		t.Fatalf("got %#v, want the newest snapshot", msg)
	}
	close(ch)
	if _, ok := waitSnap(ch, make(chan struct{}))().(snapClosedMsg); !ok {
		t.Fatal("closed stream not reported")
	}
	done := make(chan struct{})
	close(done)
	if msg := waitSnap(make(chan snapshot.Snapshot), done)(); msg != nil {
		t.Fatalf("after done: %#v", msg)
	}
}

// A log burst arrives as one message and never carries more lines than
// the view can hold.
func TestLogFeedBounded(t *testing.T) {
	t.Parallel()
	ch := make(chan []snapshot.LogLine, 100)
	for i := 0; i < 100; i++ {
		ch <- tuitest.LogLines("decode-0", 10, t0)
	}
	msg := waitLogs(3, ch, make(chan struct{}), 50)().(logBatchMsg)
	total := 0
	for _, b := range msg.batches {
		total += len(b)
	}
	if msg.gen != 3 || total > 60 || total+msg.dropped != 1000 {
		t.Fatalf("gen %d kept %d dropped %d", msg.gen, total, msg.dropped)
	}
}

// Feeding through Init: the snapshot subscription delivers published
// snapshots to the model.
func TestInitFeedsSnapshots(t *testing.T) {
	t.Parallel()
	f := tuitest.NewFake(deployment())
	m := New(f, Options{Now: func() time.Time { return t0 }})
	defer m.closeSubscriptions()
	_, next := m.Update(subscribeCmd(f, m.feed)())
	if !m.hasSnap || len(m.snap.Roles) != 8 {
		t.Fatal("initial snapshot not folded in")
	}
	f.Publish(tuitest.Deployment(2, 1, 1, t0))
	m.Update(next())
	if len(m.snap.Roles) != 2 {
		t.Fatalf("published snapshot not folded in: %d roles", len(m.snap.Roles))
	}
}

// Scrolling up stops following; scrolling back down to the end follows
// again; g/G jump to the top and back to following.
func TestLogsFollowScrolling(t *testing.T) {
	t.Parallel()
	m, f := newTestModel(t, 80, 24, deployment())
	f.AppendLogs(tuitest.LogLines("prefill-0", 100, t0)...)
	runCmd(t, m, press(m, "l"))
	if !m.logs.follow {
		t.Fatal("logs do not start following")
	}
	press(m, "k")
	if m.logs.follow {
		t.Fatal("k kept following")
	}
	press(m, "j")
	if !m.logs.follow {
		t.Fatal("j back to the end did not follow again")
	}
	press(m, "g")
	if m.logs.follow || m.logs.topIndex() != 0 {
		t.Fatalf("g: follow %v top %d", m.logs.follow, m.logs.topIndex())
	}
	press(m, "G")
	if !m.logs.follow {
		t.Fatal("G did not follow")
	}
	// New lines while not following leave the screen where it was.
	press(m, "f")
	if m.logs.follow {
		t.Fatal("f did not toggle following off")
	}
	press(m, "g")
	m.Update(logBatchMsg{gen: m.logs.feed.gen, batches: [][]snapshot.LogLine{tuitest.LogLines("prefill-0", 10, t0)}})
	if m.logs.topIndex() != 0 {
		t.Fatalf("screen moved to %d while not following", m.logs.topIndex())
	}
}

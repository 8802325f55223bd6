package tui

import (
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/tui/tuitest"
)

func newDetachModel(t *testing.T, opts Options) (*Model, *tuitest.Fake) {
	t.Helper()
	f := tuitest.NewFake(deployment())
	opts.Now = func() time.Time { return t0 }
	opts.Detach = true
	m := New(f, opts)
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 30})
	cur, ch, cancel := f.Subscribe()
	m.Update(snapSubscribedMsg{cur: cur, ch: ch, cancel: cancel})
	t.Cleanup(m.closeSubscriptions)
	return m, f
}

func isQuit(cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	_, ok := cmd().(tea.QuitMsg)
	return ok
}

// Attached to a daemon, q asks and detaches by default (enter, d or q
// again), calling nothing on the backend: the deployment keeps running.
// y is no answer: detach and stop are two, and neither is "yes".
func TestDetachQuitDefaultDetaches(t *testing.T) {
	t.Parallel()
	for _, answer := range []string{"enter", "d", "q"} {
		m, f := newDetachModel(t, Options{})
		if cmd := press(m, "q"); cmd != nil {
			t.Fatal("q acted without asking")
		}
		if !strings.Contains(plain(m), "quit: d detach, 8 running role(s) keep running · s stop them all [enter = d]") {
			t.Fatalf("no detach prompt:\n%s", plain(m))
		}
		if cmd := press(m, "y"); cmd != nil || m.confirm == nil || !strings.Contains(m.flash.text, "d detaches") {
			t.Fatalf("y acted or closed the prompt (flash %q)", m.flash.text)
		}
		if !isQuit(press(m, answer)) {
			t.Fatalf("%s did not detach", answer)
		}
		if len(f.Calls()) != 0 {
			t.Fatalf("detach called the backend: %v", f.Calls())
		}
	}
}

// s in the quit prompt stops the whole deployment, then quits; n cancels.
func TestDetachQuitStopAll(t *testing.T) {
	t.Parallel()
	m, f := newDetachModel(t, Options{})
	press(m, "q")
	press(m, "n")
	if len(f.Calls()) != 0 || m.confirm != nil {
		t.Fatal("n did not cancel")
	}
	press(m, "q")
	cmd := press(m, "s")
	if cmd == nil {
		t.Fatal("s did nothing")
	}
	if next := runCmd(t, m, cmd); !isQuit(next) {
		t.Fatal("stop did not quit")
	}
	if !slices.Equal(f.Calls(), []string{"stop-deployment"}) || !m.out.Stopped {
		t.Fatalf("calls %v, stopChosen %v", f.Calls(), m.out.Stopped)
	}
}

// With StopOnQuit (make demo) the same keys mean the same things: d
// detaches, s stops; only the default (enter, q again) is stop, and the
// prompt says so. y still means nothing.
func TestStopOnQuitPrompt(t *testing.T) {
	t.Parallel()
	m, f := newDetachModel(t, Options{StopOnQuit: true})
	press(m, "q")
	if !strings.Contains(plain(m), "quit: s stop all 8 running role(s) · d detach, they keep running [enter = s]") {
		t.Fatalf("no stop-on-quit prompt:\n%s", plain(m))
	}
	if cmd := press(m, "y"); cmd != nil || m.confirm == nil {
		t.Fatal("y answered the stop-on-quit prompt")
	}
	if !isQuit(press(m, "d")) || len(f.Calls()) != 0 {
		t.Fatalf("d did not detach: %v", f.Calls())
	}
	for _, answer := range []string{"s", "enter", "q"} {
		m, f := newDetachModel(t, Options{StopOnQuit: true})
		press(m, "q")
		if next := runCmd(t, m, press(m, answer)); !isQuit(next) || !slices.Equal(f.Calls(), []string{"stop-deployment"}) {
			t.Fatalf("%s did not stop and quit: %v", answer, f.Calls())
		}
	}
}

// A read-only dashboard (tsd attach --readonly) has no restart, stop or
// start: the keys are gone from the help bar, which says read-only, the
// commands refuse, and q detaches at once.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	m, f := newDetachModel(t, Options{ReadOnly: true})
	foot := strings.Split(plain(m), "\n")
	help := foot[len(foot)-1]
	if !strings.Contains(help, "read-only") || strings.Contains(help, "restart") || strings.Contains(help, "stop") {
		t.Fatalf("help bar: %q", help)
	}
	press(m, "down")
	for _, k := range []string{"r", "s", "R"} {
		if cmd := press(m, k); cmd != nil || m.confirm != nil {
			t.Fatalf("%s acted on a read-only dashboard", k)
		}
	}
	for _, line := range []string{"restart decode-0", "stop decode-0", "start decode-0", "restart --now decode-0"} {
		press(m, ":")
		typeText(m, line)
		if cmd := press(m, "enter"); cmd != nil || m.confirm != nil || !strings.Contains(m.flash.text, "read-only") {
			t.Fatalf(":%s on a read-only dashboard: flash %q", line, m.flash.text)
		}
	}
	if len(f.Calls()) != 0 {
		t.Fatalf("calls %v", f.Calls())
	}
	if !isQuit(press(m, "q")) {
		t.Fatal("q did not detach at once")
	}
}

// When the daemon's stream ends under an attached dashboard, it quits.
func TestDetachDaemonGoneQuits(t *testing.T) {
	t.Parallel()
	m, _ := newDetachModel(t, Options{})
	_, cmd := m.Update(snapClosedMsg{})
	if !isQuit(cmd) || !m.out.DaemonGone {
		t.Fatal("stream end did not quit the attached dashboard")
	}
}

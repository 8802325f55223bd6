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

// Attached to a daemon, q asks and detaches by default (enter, y or q
// again), calling nothing on the backend: the deployment keeps running.
func TestDetachQuitDefaultDetaches(t *testing.T) {
	t.Parallel()
	for _, answer := range []string{"enter", "y", "q"} {
		m, f := newDetachModel(t, Options{})
		if cmd := press(m, "q"); cmd != nil {
			t.Fatal("q acted without asking")
		}
		if !strings.Contains(plain(m), "detach? 8 running role(s) keep running [y/n · s stop them all]") {
			t.Fatalf("no detach prompt:\n%s", plain(m))
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
	if len(f.Calls()) != 0 || m.confirmAction != nil {
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
	if !slices.Equal(f.Calls(), []string{"stop-deployment"}) || !m.stopChosen {
		t.Fatalf("calls %v, stopChosen %v", f.Calls(), m.stopChosen)
	}
}

// With StopOnQuit (make demo) the prompt reads as before and y stops;
// d detaches instead.
func TestStopOnQuitPrompt(t *testing.T) {
	t.Parallel()
	m, f := newDetachModel(t, Options{StopOnQuit: true})
	press(m, "q")
	if !strings.Contains(plain(m), "quit tsd? this stops 8 running role(s) [y/n · d detach]") {
		t.Fatalf("no stop-on-quit prompt:\n%s", plain(m))
	}
	if !isQuit(press(m, "d")) || len(f.Calls()) != 0 {
		t.Fatalf("d did not detach: %v", f.Calls())
	}
	press(m, "q")
	if next := runCmd(t, m, press(m, "y")); !isQuit(next) || !slices.Equal(f.Calls(), []string{"stop-deployment"}) {
		t.Fatalf("y did not stop and quit: %v", f.Calls())
	}
}

// When the daemon's stream ends under an attached dashboard, it quits.
func TestDetachDaemonGoneQuits(t *testing.T) {
	t.Parallel()
	m, _ := newDetachModel(t, Options{})
	_, cmd := m.Update(snapClosedMsg{})
	if !isQuit(cmd) || !m.daemonGone {
		t.Fatal("stream end did not quit the attached dashboard")
	}
}

package tui

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current render")

// t0 is the fixed clock every screen test renders at.
var t0 = time.Date(2026, 11, 29, 9, 30, 0, 0, time.UTC)

// newTestModel builds a dashboard at w×h on a fake backend holding s, with
// the snapshot already folded in (no feed goroutines are started).
func newTestModel(t testing.TB, w, h int, s snapshot.Snapshot) (*Model, *tuitest.Fake) {
	t.Helper()
	f := tuitest.NewFake(s)
	m := New(f, Options{Now: func() time.Time { return t0 }})
	m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	cur, ch, cancel := f.Subscribe()
	m.Update(snapSubscribedMsg{cur: cur, ch: ch, cancel: cancel})
	t.Cleanup(m.closeSubscriptions)
	return m, f
}

// role is the overview's selected role (a group's first member for a
// closed group's summary row).
func (p *overviewPage) role() (snapshot.RoleStatus, bool) {
	rs := p.m.snap.Roles
	if p.selected < 0 || p.selected >= len(rs) {
		return snapshot.RoleStatus{}, false
	}
	return rs[p.selected], true
}

// press sends one key and returns the command it produced.
func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		_, cmd = m.Update(keyMsg(k))
	}
	return cmd
}

func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "left":
		return tea.KeyPressMsg{Code: tea.KeyLeft}
	case "right":
		return tea.KeyPressMsg{Code: tea.KeyRight}
	case "tab":
		return tea.KeyPressMsg{Code: tea.KeyTab}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "pgup":
		return tea.KeyPressMsg{Code: tea.KeyPgUp}
	case "pgdown":
		return tea.KeyPressMsg{Code: tea.KeyPgDown}
	case "home":
		return tea.KeyPressMsg{Code: tea.KeyHome}
	case "end":
		return tea.KeyPressMsg{Code: tea.KeyEnd}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	case "ctrl+u":
		return tea.KeyPressMsg{Code: 'u', Mod: tea.ModCtrl}
	case "ctrl+w":
		return tea.KeyPressMsg{Code: 'w', Mod: tea.ModCtrl}
	case "alt+backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace, Mod: tea.ModAlt}
	case "shift+tab":
		return tea.KeyPressMsg{Code: tea.KeyTab, Mod: tea.ModShift}
	case " ":
		return tea.KeyPressMsg{Code: tea.KeySpace, Text: " "}
	}
	r := []rune(k)[0]
	msg := tea.KeyPressMsg{Code: r, Text: k}
	if r >= 'A' && r <= 'Z' {
		msg.Code, msg.ShiftedCode, msg.Mod = r+('a'-'A'), r, tea.ModShift
	}
	return msg
}

// typeText types s into whatever reads text.
func typeText(m *Model, s string) {
	for _, r := range s {
		m.Update(keyMsg(string(r)))
	}
}

// runCmd executes a command that does not block (control calls,
// subscriptions) and folds its message back in.
func runCmd(t testing.TB, m *Model, cmd tea.Cmd) tea.Cmd {
	t.Helper()
	if cmd == nil {
		t.Fatal("expected a command, got nil")
	}
	msg := cmd()
	_, next := m.Update(msg)
	return next
}

// teaSize is the terminal's size message.
func teaSize(w, h int) tea.WindowSizeMsg { return tea.WindowSizeMsg{Width: w, Height: h} }

// batchMsgs runs a command (a batch: each of its commands) and returns
// the messages that came back.
func batchMsgs(cmd tea.Cmd) []tea.Msg {
	if cmd == nil {
		return nil
	}
	msg := cmd()
	if b, ok := msg.(tea.BatchMsg); ok {
		var out []tea.Msg
		for _, c := range b {
			out = append(out, batchMsgs(c)...)
		}
		return out
	}
	if msg == nil {
		return nil
	}
	return []tea.Msg{msg}
}

// plain is the screen as a colourless terminal shows it.
func plain(m *Model) string { return ansi.Strip(m.render()) }

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test ./tui -update to create it): %v", err)
	}
	if string(want) != got {
		t.Errorf("screen %s differs from %s (rerun with -update if intended)\n--- got ---\n%s\n--- want ---\n%s", name, path, got, want)
	}
}

// checkFrame asserts the screen is exactly w×h cells at most.
func checkFrame(t *testing.T, s string, w, h int) {
	t.Helper()
	lines := strings.Split(s, "\n")
	if len(lines) != h {
		t.Errorf("screen has %d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if lw := ansi.StringWidth(l); lw > w {
			t.Errorf("line %d is %d cells wide, more than %d: %q", i, lw, w, l)
		}
	}
}

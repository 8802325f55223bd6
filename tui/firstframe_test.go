package tui

import (
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/tui/tuitest"
)

// Pins: no frame is drawn before the terminal says its size. A frame at
// New's stand-in 80×24 on a 200-column terminal showed the trends cut to
// a third; the first frame drawn is at the terminal's width.
func TestNoFrameBeforeTheTerminalSize(t *testing.T) {
	t.Parallel()
	f := tuitest.NewFake(tuitest.Deployment(2, 1, 1, t0))
	m := New(f, Options{Now: func() time.Time { return t0 }})
	if v := m.View(); v.Content != "" {
		t.Fatalf("a frame before the size:\n%s", v.Content)
	}
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	v := m.View()
	if v.Content == "" {
		t.Fatal("no frame after the size")
	}
	if !strings.Contains(v.Content, "\n") || !v.AltScreen {
		t.Errorf("first sized frame: alt %v\n%s", v.AltScreen, v.Content)
	}
}

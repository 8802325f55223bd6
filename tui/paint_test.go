package tui

import (
	"testing"

	"github.com/charmbracelet/x/ansi"
)

// A painter wraps text exactly as its style renders it.
func TestPainterMatchesRender(t *testing.T) {
	st := DefaultStyles()
	for _, s := range []struct {
		name string
		p    paint
	}{{"good", pGood}, {"busy", pBusy}, {"bad", pBad}, {"warn", pWarn}, {"faint", pFaint}, {"header", pHeader}, {"selected", pSelected}, {"title", pTitle}} {
		m, _ := newTestModel(t, 80, 24, deployment())
		got := m.overview.paints()[s.p].wrap("exit 1 after 3s")
		want := map[paint]string{
			pGood: st.Good.Render("exit 1 after 3s"), pBusy: st.Busy.Render("exit 1 after 3s"),
			pBad: st.Bad.Render("exit 1 after 3s"), pWarn: st.Warn.Render("exit 1 after 3s"),
			pFaint: st.Faint.Render("exit 1 after 3s"), pHeader: st.Header.Render("exit 1 after 3s"),
			pSelected: st.Selected.Render("exit 1 after 3s"), pTitle: st.Title.Render("exit 1 after 3s"),
		}[s.p]
		if got != want {
			t.Errorf("%s: %q, want %q", s.name, got, want)
		}
	}
}

// width agrees with ansi.StringWidth, fast path or not.
func TestWidth(t *testing.T) {
	for _, s := range []string{
		"", "decode-0", "\x1b[32mready\x1b[m", "▸ − decode ×8", "████░░░░ 5/11 weights",
		"⣿⣀⡇ braille", "12°C · 3…", "日本語", "e\u0301", "tab\there", "\x1b]8;;x\x07link\x1b]8;;\x07", "🙂 ok",
	} {
		if got, want := width(s), ansi.StringWidth(s); got != want {
			t.Errorf("width(%q) = %d, want %d", s, got, want)
		}
	}
}

package tui

import (
	"strings"
	"unicode/utf8"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

// paint names one of the table's cell colours. The roles table colours
// hundreds of cells a frame; lipgloss's Render (margins, borders, width
// checks per call) was most of the frame time, so each colour's escape
// sequences are taken once and wrapped around the cell text directly.
type paint uint8

const (
	pPlain paint = iota
	pGood
	pBusy
	pBad
	pWarn
	pFaint
	pBarFilled
	pBarEmpty
	pHeader
	pSelected
	pTitle
	numPaints
)

// painter is a style's opening and closing sequences.
type painter struct{ pre, post string }

func (p painter) wrap(s string) string { return p.pre + s + p.post }

func painterOf(st lipgloss.Style) painter {
	r := st.Render("\x00")
	i := strings.IndexByte(r, 0)
	if i < 0 {
		return painter{}
	}
	return painter{pre: r[:i], post: r[i+1:]}
}

// paints are the overview's painters, built from the styles on first use.
func (p *overviewPage) paints() *[numPaints]painter {
	if p.painters == nil {
		st := p.m.c.Styles
		p.painters = &[numPaints]painter{
			pPlain: {}, pGood: painterOf(st.Good), pBusy: painterOf(st.Busy),
			pBad: painterOf(st.Bad), pWarn: painterOf(st.Warn), pFaint: painterOf(st.Faint),
			pBarFilled: painterOf(st.BarFilled), pBarEmpty: painterOf(st.BarEmpty),
			pHeader: painterOf(st.Header), pSelected: painterOf(st.Selected), pTitle: painterOf(st.Title),
		}
	}
	return p.painters
}

// statePaint is stateStyle as a paint.
func statePaint(state string) paint {
	switch state {
	case snapshot.StateReady, snapshot.RankRegistered:
		return pGood
	case snapshot.StateStarting, snapshot.StateHandshaking, snapshot.StateDraining, snapshot.StateStopping,
		snapshot.StateBackoff, snapshot.RankHello, snapshot.RankInitSent, snapshot.RankWaiting:
		return pBusy
	case snapshot.StateCrashed, snapshot.StateFailed, snapshot.StateStalled, snapshot.RankDisconnected:
		return pBad
	case snapshot.StateRemote:
		return pWarn
	}
	return pFaint
}

// width is ansi.StringWidth with a fast path for what the dashboard
// draws most: ASCII, CSI colour sequences, and the one-cell block, box
// and braille characters of bars and charts. Anything else goes to the
// full grapheme-aware count.
func width(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == 0x1b:
			if i+1 < len(s) && s[i+1] == '[' {
				j := i + 2
				for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
					j++
				}
				i = j + 1
				continue
			}
			return ansi.StringWidth(s)
		case c < 0x20 || c == 0x7f:
			return ansi.StringWidth(s)
		case c < 0x80:
			n++
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			// Box drawing, blocks, geometric shapes, arrows, braille,
			// the middle dot, ×, −, –, …, °: one cell each, no combining.
			if !(r >= 0x2500 && r <= 0x25ff || r >= 0x2800 && r <= 0x28ff || r >= 0x2190 && r <= 0x21ff ||
				r == '·' || r == '×' || r == '−' || r == '–' || r == '…' || r == '°' || r == '▸') {
				return ansi.StringWidth(s)
			}
			n++
			i += size
		}
	}
	return n
}

// bar is Styles.bar with the cached painters, its filled part in fill.
func (p *overviewPage) bar(pct float64, w int, fill paint) string {
	if w < 1 {
		return ""
	}
	pct = max(0, min(pct, 100))
	n := int(pct/100*float64(w) + 0.5)
	ps := p.paints()
	return ps[fill].wrap(strings.Repeat("█", n)) + ps[pBarEmpty].wrap(strings.Repeat("░", w-n))
}

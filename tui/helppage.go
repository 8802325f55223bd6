package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

// helpPage lists every binding, generated from the one keymap.
type helpPage struct {
	m      *Model
	w, h   int
	offset int // first line shown when the page is taller than the window
}

func (p *helpPage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *helpPage) Capturing() bool  { return false }

func (p *helpPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	return []key.Binding{k.Back, k.Up, k.Down}
}

func (p *helpPage) Update(msg tea.Msg) tea.Cmd {
	if k, ok := msg.(tea.KeyPressMsg); ok {
		switch {
		case key.Matches(k, p.m.c.Keys.Up):
			p.offset = max(p.offset-1, 0)
		case key.Matches(k, p.m.c.Keys.Down):
			p.offset++
		}
	}
	return nil
}

func (p *helpPage) View() string {
	st := p.m.c.Styles
	secs := p.m.c.Keys.helpSections()
	// Each section is a column of "key  description" lines; columns are
	// laid side by side while they fit, else stacked.
	var cols [][]string
	for _, s := range secs {
		kw := 0
		for _, b := range s.bindings {
			kw = max(kw, len([]rune(b.Help().Key)))
		}
		col := []string{st.Title.Render(s.title)}
		for _, b := range s.bindings {
			h := b.Help()
			col = append(col, st.HelpKey.Render(fit(h.Key, kw))+"  "+st.HelpDesc.Render(h.Desc))
		}
		cols = append(cols, col)
	}
	widths := make([]int, len(cols))
	total := 0
	for i, c := range cols {
		for _, l := range c {
			widths[i] = max(widths[i], textWidthANSI(l))
		}
		total += widths[i] + 3
	}
	var lines []string
	if total <= p.w {
		rows := 0
		for _, c := range cols {
			rows = max(rows, len(c))
		}
		for r := 0; r < rows; r++ {
			var b strings.Builder
			for i, c := range cols {
				cell := ""
				if r < len(c) {
					cell = c[r]
				}
				b.WriteString(fit(cell, widths[i]) + "   ")
			}
			lines = append(lines, strings.TrimRight(b.String(), " "))
		}
	} else {
		// Two columns: global+overview+inspector on the left, logs on the right.
		left := append(append(append([]string{}, cols[0]...), ""), cols[1]...)
		left = append(append(left, ""), cols[2]...)
		right := cols[3]
		lw := 0
		for _, l := range left {
			lw = max(lw, textWidthANSI(l))
		}
		for r := 0; r < max(len(left), len(right)); r++ {
			l, rr := "", ""
			if r < len(left) {
				l = left[r]
			}
			if r < len(right) {
				rr = right[r]
			}
			lines = append(lines, strings.TrimRight(fit(l, lw)+"   "+rr, " "))
		}
	}
	lines = append(lines, "")
	for _, l := range wrapParts("", "", []string{"find (/) is plain text, case-insensitive unless it has capitals;",
		"filter (&) is a Go regexp, ! inverts it, an empty one clears it;", "esc cancels typing."}, " ", p.w) {
		lines = append(lines, st.Faint.Render(l))
	}
	if len(lines) <= p.h {
		p.offset = 0
		return screen(lines, p.w, p.h)
	}
	// Taller than the window: scroll, and say there is more.
	p.offset = min(p.offset, len(lines)-p.h+1)
	shown := append([]string{}, lines[p.offset:min(p.offset+p.h-1, len(lines))]...)
	more := fmt.Sprintf("lines %d-%d of %d · ↑/↓ scroll", p.offset+1, p.offset+len(shown), len(lines))
	return screen(append(shown, st.Faint.Render(more)), p.w, p.h)
}

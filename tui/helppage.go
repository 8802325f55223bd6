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

// helpColumns lays the sections out side by side in as many columns as
// the width allows, stacking sections in order within a column so the
// columns come out about as tall as each other.
func helpColumns(secs [][]string, w int) []string {
	widthOf := func(ls []string) int {
		n := 0
		for _, l := range ls {
			n = max(n, textWidthANSI(l))
		}
		return n
	}
	total := 0
	for _, s := range secs {
		total += len(s) + 1
	}
	var groups [][]string
	for n := len(secs); n >= 1; n-- {
		// Fill each column up to an even share of the lines, in order.
		target := (total + n - 1) / n
		groups = groups[:0]
		var cur []string
		for i, s := range secs {
			left := len(secs) - i       // sections not placed yet, this one included
			cols := n - len(groups) - 1 // columns after this one
			if len(cur) > 0 && len(groups) < n-1 && (len(cur)+len(s) > target || left <= cols) {
				groups = append(groups, cur)
				cur = nil
			}
			if len(cur) > 0 {
				cur = append(cur, "")
			}
			cur = append(cur, s...)
		}
		groups = append(groups, cur)
		width := 0
		for _, g := range groups {
			width += widthOf(g) + 3
		}
		if width-3 <= w || n == 1 {
			break
		}
	}
	widths := make([]int, len(groups))
	rows := 0
	for i, g := range groups {
		widths[i] = widthOf(g)
		rows = max(rows, len(g))
	}
	var lines []string
	for r := 0; r < rows; r++ {
		var b strings.Builder
		for i, g := range groups {
			cell := ""
			if r < len(g) {
				cell = g[r]
			}
			b.WriteString(fit(cell, widths[i]) + "   ")
		}
		lines = append(lines, strings.TrimRight(b.String(), " "))
	}
	return lines
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
	lines := helpColumns(cols, p.w)
	lines = append(lines, "")
	for _, l := range wrapParts("", "", []string{"on the overview / filters the roles by a plain substring;", "in the logs find (/) is plain text, case-insensitive unless it has capitals;",
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

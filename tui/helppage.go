package tui

import (
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

// helpPage lists every binding, generated from the one keymap, and every
// `:` verb, generated from the `:` grammar (verbs.Dashboard): what it
// says is what the keys and the line do.
type helpPage struct {
	m      *Model
	w, h   int
	offset int // first line shown when the page is taller than the window
}

func (p *helpPage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *helpPage) Capturing() bool  { return false }

// open starts the page at its top: it is read from the beginning.
func (p *helpPage) open() { p.offset = 0 }

func (p *helpPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	return []key.Binding{k.Back, k.Up, k.Down, k.PageDown, k.Bottom}
}

func (p *helpPage) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	keys := p.m.c.Keys
	page := max(p.h-1, 1)
	switch {
	case key.Matches(k, keys.Up):
		p.offset = max(p.offset-1, 0)
	case key.Matches(k, keys.Down):
		p.offset++
	case key.Matches(k, keys.PageUp):
		p.offset = max(p.offset-page, 0)
	case key.Matches(k, keys.PageDown):
		p.offset += page
	case key.Matches(k, keys.Top):
		p.offset = 0
	case key.Matches(k, keys.Bottom):
		p.offset = 1 << 30 // View clamps it to the last screenful
	}
	return nil
}

// helpMinColumn is the narrowest a key column gets (a key, two spaces and
// a description's first words); helpMinVerbColumn a verb column's.
const (
	helpMinColumn     = 36
	helpMinVerbColumn = 55
	helpGap           = 3
)

// helpColumns lays the sections out side by side in as many columns of
// at least minCol cells as w holds: whole sections, in order, split where
// the tallest column is lowest. Every line is cut to its column.
func helpColumns(secs [][]string, w, minCol int) []string {
	n := max(1, min((w+helpGap)/(minCol+helpGap), len(secs)))
	cw := (w - helpGap*(n-1)) / n
	var groups [][]string
	for _, g := range splitEven(secs, n) {
		var col []string
		for i, s := range g {
			if i > 0 {
				col = append(col, "")
			}
			col = append(col, s...)
		}
		groups = append(groups, col)
	}
	return sideBySide(groups, cw)
}

// splitEven splits secs, in order, into at most n runs whose tallest
// (lines plus a blank between sections) is as low as it can be.
func splitEven(secs [][]string, n int) [][][]string {
	height := func(run [][]string) int {
		h := 0
		for i, s := range run {
			if i > 0 {
				h++
			}
			h += len(s)
		}
		return h
	}
	// best[i][k]: the lowest tallest run splitting secs[i:] into k runs.
	memo := map[[2]int]int{}
	var best func(i, k int) int
	best = func(i, k int) int {
		if i == len(secs) {
			return 0
		}
		if k == 1 {
			return height(secs[i:])
		}
		key := [2]int{i, k}
		if v, ok := memo[key]; ok {
			return v
		}
		v := 1 << 30
		for j := i + 1; j <= len(secs); j++ {
			v = min(v, max(height(secs[i:j]), best(j, k-1)))
		}
		memo[key] = v
		return v
	}
	var out [][][]string
	for i, k := 0, n; i < len(secs); k-- {
		j := i + 1
		for ; j < len(secs) && k > 1; j++ {
			if max(height(secs[i:j]), best(j, k-1)) == best(i, k) {
				break
			}
		}
		if k == 1 {
			j = len(secs)
		}
		out = append(out, secs[i:j])
		i = j
	}
	return out
}

// sideBySide puts columns of lines next to each other, cw cells each.
func sideBySide(groups [][]string, cw int) []string {
	rows := 0
	for _, g := range groups {
		rows = max(rows, len(g))
	}
	lines := make([]string, 0, rows)
	for r := 0; r < rows; r++ {
		var b strings.Builder
		for i, g := range groups {
			cell := ""
			if r < len(g) {
				cell = g[r]
			}
			if i > 0 {
				b.WriteString(strings.Repeat(" ", helpGap))
			}
			b.WriteString(fit(cell, cw))
		}
		lines = append(lines, strings.TrimRight(b.String(), " "))
	}
	return lines
}

// helpLines are the page's lines at width w: the key sections side by
// side, the `:` verbs under them, then how typed text matches.
func (p *helpPage) helpLines() []string {
	st := p.m.c.Styles
	rowsOf := func(rows [][2]string) []string {
		kw := 0
		for _, r := range rows {
			kw = max(kw, len([]rune(r[0])))
		}
		out := make([]string, 0, len(rows))
		for _, r := range rows {
			out = append(out, st.HelpKey.Render(fit(r[0], kw))+"  "+st.HelpDesc.Render(r[1]))
		}
		return out
	}
	var cols [][]string
	for _, s := range helpSections(p.m.c.Keys) {
		var rows [][2]string
		for _, b := range s.bindings {
			h := b.Help()
			desc := h.Desc
			if !b.Enabled() {
				desc += " (off: read-only)"
			}
			rows = append(rows, [2]string{h.Key, desc})
		}
		cols = append(cols, append([]string{st.Title.Render(s.title)}, rowsOf(rows)...))
	}
	lines := helpColumns(cols, p.w, helpMinColumn)
	// The `:` verbs, from the grammar the line parses: each verb with
	// what it takes (tab completes it, and its flags) and its help, in
	// columns of their own under the keys.
	var rows [][2]string
	for _, v := range dashboardHelp() {
		rows = append(rows, [2]string{v.synopsis, v.help})
	}
	vl := rowsOf(rows)
	n := max(1, (p.w+helpGap)/(helpMinVerbColumn+helpGap))
	per := (len(vl) + n - 1) / n
	var vcols [][]string
	for i := 0; i < len(vl); i += per {
		vcols = append(vcols, vl[i:min(i+per, len(vl))])
	}
	lines = append(lines, "", st.Title.Render(": verbs")+st.Faint.Render(" · tab completes a verb, its flags and its roles; ↑/↓ recall"))
	lines = append(lines, sideBySide(vcols, (p.w-helpGap*(len(vcols)-1))/len(vcols))...)
	for _, l := range wrapParts("", "", []string{"/ filters the overview's roles by substring;", "in the logs / finds text (any case unless it has capitals),",
		"& filters by Go regexp (! inverts, empty clears);", "esc cancels typing"}, " ", p.w) {
		lines = append(lines, st.Faint.Render(l))
	}
	return lines
}

func (p *helpPage) View() string {
	return scrolled(p.helpLines(), &p.offset, p.w, p.h, p.m.c.Styles.Faint, "↑/↓ pgup/pgdn g/G")
}

package tui

import "sort"

// colFit is what the table layout knows of one column this frame: how
// wide its widest cell is in each of its forms, and what it is worth.
type colFit struct {
	// priority 0: never dropped; larger numbers give way first.
	priority int
	// widths[i] is the widest cell (the heading included) in form i,
	// fullest first; at least one.
	widths []int
	// shrinkAt[i] is the priority at which the column gives up form i for
	// form i+1 (missing: the column's own priority). At one priority,
	// shorter forms come before dropped columns.
	shrinkAt []int
	// fill: the column takes what the others leave (REASON), at least
	// minFill cells.
	fill    bool
	minFill int
}

// colLayout is the layout's answer for one column.
type colLayout struct {
	shown bool
	width int
	form  int // the form whose widest cell set the width
}

// fitColumns lays a table out in width cells (gutter included) from the
// text its rows hold now: each column is as wide as its widest cell, and
// while that does not fit, the lowest-priority concession is made: a
// column's next shorter form, or dropping the column. Column widths
// remember nothing between frames, so columns widen and shrink back with
// their text. A fill column gets the rest, at least its minFill while it
// fits.
//
// set, when given, is the columns to show (chooseColumns chose them once
// for this width): no column is dropped or added, only shorter forms
// taken, and what still does not fit is cut from the widest columns (a
// cell cut shows "…"), so columns never come and go while a cell's text
// changes.
func fitColumns(cols []colFit, width, gutter int, set []bool) []colLayout {
	out := make([]colLayout, len(cols))
	type concession struct {
		priority int
		drop     bool
		col      int
	}
	var cs []concession
	for i, c := range cols {
		out[i].shown = set == nil || set[i]
		for f := 0; f+1 < len(c.widths); f++ {
			p := c.priority
			if f < len(c.shrinkAt) {
				p = c.shrinkAt[f]
			}
			if p > 0 {
				cs = append(cs, concession{priority: p, col: i})
			}
		}
		if c.priority > 0 && set == nil {
			cs = append(cs, concession{priority: c.priority, drop: true, col: i})
		}
	}
	// Highest priority number first; at one priority shorter forms before
	// drops, and the rightmost column first (the table reads from the left).
	sort.SliceStable(cs, func(a, b int) bool {
		x, y := cs[a], cs[b]
		if x.priority != y.priority {
			return x.priority > y.priority
		}
		if x.drop != y.drop {
			return !x.drop
		}
		if x.drop {
			return x.col > y.col
		}
		return false // shrinks keep their order: form 0→1 before 1→2
	})
	total := func() int {
		t := gutter
		n := 0
		for i, c := range cols {
			if !out[i].shown {
				continue
			}
			if n > 0 {
				t++ // the space between columns
			}
			n++
			if c.fill {
				t += c.minFill
			} else {
				t += c.widths[out[i].form]
			}
		}
		return t
	}
	for _, c := range cs {
		if total() <= width {
			break
		}
		o := &out[c.col]
		switch {
		case !o.shown:
		case c.drop:
			o.shown = false
		case o.form+1 < len(cols[c.col].widths):
			o.form++
		}
	}
	used := gutter
	n := 0
	for i, c := range cols {
		if !out[i].shown {
			continue
		}
		if n > 0 {
			used++
		}
		n++
		if !c.fill {
			out[i].width = c.widths[out[i].form]
			used += out[i].width
		}
	}
	if set != nil {
		used -= cutWidest(cols, out, used+minFills(cols, out)-width)
	}
	for i, c := range cols {
		if out[i].shown && c.fill {
			out[i].width = max(width-used, 0)
			used += out[i].width
		}
	}
	return out
}

// minFills is what the shown fill columns keep at least.
func minFills(cols []colFit, out []colLayout) int {
	n := 0
	for i, c := range cols {
		if out[i].shown && c.fill {
			n += c.minFill
		}
	}
	return n
}

// cutWidest takes over cells from the widest shown columns (not the fill,
// which has its least already) one at a time, down to cutFloor each, and
// returns how many it took.
func cutWidest(cols []colFit, out []colLayout, over int) int {
	taken := 0
	for ; taken < over; taken++ {
		w := -1
		for i, c := range cols {
			if out[i].shown && !c.fill && out[i].width > cutFloor && (w < 0 || out[i].width > out[w].width) {
				w = i
			}
		}
		if w < 0 {
			break
		}
		out[w].width--
	}
	return taken
}

// cutFloor is the narrowest a cut column gets: room for a letter or two
// and the "…".
const cutFloor = 3

// chooseColumns picks which columns a table shows at width from each
// column's nominal widths (a column's least: its shortest form, with room
// reserved where the text is known to grow), as fitColumns would drop
// them.
func chooseColumns(nominal []colFit, width, gutter int) []bool {
	ls := fitColumns(nominal, width, gutter, nil)
	set := make([]bool, len(ls))
	for i, l := range ls {
		set[i] = l.shown
	}
	return set
}

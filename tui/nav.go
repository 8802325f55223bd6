package tui

// nav is where the dashboard is: the focused page and the way back (esc),
// as its own model so the root only asks it.
type nav struct {
	focus pageID
	back  []pageID
}

// push focuses to; it reports whether the focus changed.
func (n *nav) push(to pageID) bool {
	if to == n.focus {
		return false
	}
	n.back = append(n.back, n.focus)
	n.focus = to
	return true
}

// pop returns to the page before (the overview at the bottom) and says
// which page was left.
func (n *nav) pop() (left pageID) {
	left = n.focus
	if len(n.back) == 0 {
		n.focus = pageOverview
		return left
	}
	n.focus = n.back[len(n.back)-1]
	n.back = n.back[:len(n.back)-1]
	return left
}

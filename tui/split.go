package tui

import (
	tea "charm.land/bubbletea/v2"
)

// splitLogLines bounds the split view's log buffer: it shows a screen's
// tail, and l opens the whole log.
const splitLogLines = 2000

// splitView is the overview's split (x, :split): the roles table with the
// selected role's live log under it, as process-compose lays it out. The
// overview owns it; the log follows the selection.
type splitView struct {
	on  bool
	log *logsPage
}

// toggleSplit is x (and :split).
func (p *overviewPage) toggleSplit() tea.Cmd {
	s := &p.split
	s.on = !s.on
	if !s.on {
		s.log.close()
		s.log.source = ""
		p.m.flash.set("split view off")
		return nil
	}
	p.m.flash.set("split view: the selected role's log follows the selection (x closes it, l opens the whole log)")
	return p.splitLogCmd()
}

// splitRole is the role whose log the split view shows: the selected
// instance (a rank row: its instance); "" for a group's summary row.
func (p *overviewPage) splitRole() string {
	d, ok := p.current()
	if !ok || d.kind == rowGroup {
		return ""
	}
	return p.m.snap.Roles[d.role].Name
}

// splitLogCmd subscribes the split view to the selected role's log when
// the selection moved to another role (nil when nothing changes).
func (p *overviewPage) splitLogCmd() tea.Cmd {
	s := &p.split
	if !s.on {
		return nil
	}
	role := p.splitRole()
	if role == s.log.source {
		return nil
	}
	if role == "" {
		s.log.close()
		s.log.source = ""
		s.log.buf.reset()
		return nil
	}
	return s.log.open(role)
}

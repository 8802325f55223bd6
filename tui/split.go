package tui

import (
	tea "charm.land/bubbletea/v2"
)

// splitLogLines bounds the split view's log buffer: it shows a screen's
// tail, and l opens the whole log.
const splitLogLines = 2000

// logPageOf is the log view a subscription generation belongs to.
func (m *Model) logPageOf(gen int) *logsPage {
	if gen == m.splitLog.gen {
		return m.splitLog
	}
	return m.logs
}

// toggleSplit is x (and :split): the roles table with the selected
// role's live log under it, as process-compose lays it out.
func (m *Model) toggleSplit() {
	m.split = !m.split
	if !m.split {
		m.splitLog.close()
		m.splitLog.source = ""
		m.flash = "split view off"
		return
	}
	m.flash = "split view: the selected role's log follows the selection (x closes it, l opens the whole log)"
}

// splitRole is the role whose log the split view shows: the selected
// instance (a rank row: its instance); "" for a group's summary row.
func (m *Model) splitRole() string {
	d, ok := m.overview.current()
	if !ok || d.kind == rowGroup {
		return ""
	}
	return m.snap.Roles[d.role].Name
}

// splitLogCmd subscribes the split view to the selected role's log when
// the selection moved to another role (nil when nothing changes).
func (m *Model) splitLogCmd() tea.Cmd {
	if !m.split {
		return nil
	}
	role := m.splitRole()
	if role == m.splitLog.source {
		return nil
	}
	if role == "" {
		m.splitLog.close()
		m.splitLog.source = ""
		m.splitLog.buf.reset()
		return nil
	}
	return m.splitLog.open(role)
}

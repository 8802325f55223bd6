package tui

import (
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/verbs"
)

// runCommand does what a `:` line says. Whatever acts on the deployment
// asks first, as its key does: a typed line is as easy to get wrong as a
// key.
func (m *Model) runCommand(line string) tea.Cmd {
	c, err := parseCommand(line, m.targets())
	if err != nil {
		m.flash.set(err.Error())
		return nil
	}
	r, _ := roleNamed(&m.snap, c.arg)
	p := m.prompts()
	switch c.verb {
	case "restart":
		switch {
		case c.group || c.rolling:
			if c.group {
				m.ask("restart "+c.arg, p.rollingGroup(c.arg))
			} else {
				m.ask("restart "+c.arg, p.rollingKind(c.arg))
			}
			if c.now && m.confirm != nil {
				m.confirm = m.confirm.nowOnly(m.c.Keys.Yes)
			}
		default:
			m.ask("restart "+c.arg, p.restart(r))
			if c.now && m.confirm != nil {
				m.confirm = m.confirm.nowOnly(m.c.Keys.Yes)
			}
		}
	case "stop":
		m.ask("stop "+c.arg, p.stop(r))
		if c.now && m.confirm != nil {
			m.confirm = m.confirm.nowOnly(m.c.Keys.Yes)
		}
	case "start":
		if m.refuseReadOnly("start " + c.arg) {
			return nil
		}
		return m.startCmd(c.arg)
	case "scale":
		m.ask("scale "+c.arg, p.scale(c))
	case "signal":
		m.ask("signal "+c.arg, p.signal(r, c.signal))
	case "apply":
		if m.refuseReadOnly("apply a profile") {
			return nil
		}
		return m.previewApply(c.arg)
	case "ctx":
		return m.switchTo(c.arg)
	case "logs":
		return m.navigate(pageLogs, c.arg)
	case "inspect", "describe":
		for i, r := range m.snap.Roles {
			if r.Name == c.arg {
				m.overview.selectRole(i)
			}
		}
		if c.verb == "describe" {
			return m.navigate(pageDescribe, c.arg)
		}
		return m.navigate(pageInspector, c.arg)
	case "sort":
		m.setSort(m.overview.sort.set(c.arg, c.desc))
	case "split":
		return m.overview.toggleSplit()
	case "help":
		return m.navigate(pageHelp, "")
	case "events":
		return m.navigate(pageEvents, "")
	case "planner":
		return m.navigate(pagePlanner, "")
	case "quit":
		return m.askQuit()
	}
	return nil
}

// roleNamed is the role instance called name on s.
func roleNamed(s *snapshot.Snapshot, name string) (snapshot.RoleStatus, bool) {
	for _, r := range s.Roles {
		if r.Name == name {
			return r, true
		}
	}
	return snapshot.RoleStatus{}, false
}

// roleKey handles the keys that act on one role; the overview, the
// inspector and the describe view share it.
func roleKey(m *Model, k tea.KeyPressMsg, r snapshot.RoleStatus) tea.Cmd {
	keys := m.c.Keys
	name := r.Name
	p := m.prompts()
	switch {
	case key.Matches(k, keys.Inspect):
		return m.navigate(pageInspector, name)
	case key.Matches(k, keys.Logs):
		return m.navigate(pageLogs, name)
	case key.Matches(k, keys.Describe):
		return m.navigate(pageDescribe, name)
	case key.Matches(k, keys.Restart):
		m.ask("restart "+name, p.restart(r))
	case key.Matches(k, keys.StopStart):
		if running(r.State) {
			m.ask("stop "+name, p.stop(r))
			return nil
		}
		return m.startCmd(name)
	case key.Matches(k, keys.RestartAll):
		m.ask("rolling restart of "+r.Kind, p.rollingKind(r.Kind))
	case key.Matches(k, keys.Signal):
		// K opens the `:` line on the signal verb, naming the role and
		// TERM: tab offers the other signals, enter asks before sending.
		m.cmd.open("signal " + name + " " + verbs.Signals[0])
	}
	return nil
}

package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
)

type (
	// deploymentsMsg lists the deployments :ctx may switch to; show puts
	// the list on the message line (:ctx alone), else it only feeds Tab.
	deploymentsMsg struct {
		names []string
		err   error
		show  bool
	}
	// connectedMsg is a :ctx switch's connection to another deployment.
	connectedMsg struct {
		name string
		b    Backend
		err  error
	}
)

// switchTimeout bounds connecting to another deployment.
const switchTimeout = 10 * time.Second

// listDeployments asks the backend for the deployments running here (the
// registry: a few small files), in a command; nil when it cannot switch.
func (m *Model) listDeployments() tea.Cmd { return m.listDeploymentsShow(false) }

func (m *Model) listDeploymentsShow(show bool) tea.Cmd {
	sw, ok := m.b.(Switcher)
	if !ok {
		if show {
			m.flash.set("this dashboard's backend cannot switch deployments (tsd attach NAME can)")
		}
		return nil
	}
	return func() tea.Msg {
		names, err := sw.Deployments()
		return deploymentsMsg{names: names, err: err, show: show}
	}
}

// deployments keeps the list for Tab and, for :ctx alone, shows it.
func (m *Model) deployments(msg deploymentsMsg) tea.Cmd {
	if msg.err == nil {
		m.cmd.deployments = msg.names
	}
	if !msg.show {
		return nil
	}
	if msg.err != nil {
		m.flash.set("cannot list the deployments: " + msg.err.Error())
		return nil
	}
	parts := make([]string, 0, len(msg.names))
	for _, n := range msg.names {
		if n == m.snap.Name {
			n += " (this one)"
		}
		parts = append(parts, n)
	}
	if len(parts) == 0 {
		m.flash.set("no deployment is running here")
		return nil
	}
	m.flash.set("deployments: " + strings.Join(parts, " · ") + " — :ctx NAME switches")
	return nil
}

// switchTo is :ctx [NAME]: alone it lists the deployments; with a name it
// connects to that one and, once connected, shows it instead.
func (m *Model) switchTo(name string) tea.Cmd {
	if name == "" {
		return m.listDeploymentsShow(true)
	}
	sw, ok := m.b.(Switcher)
	switch {
	case !ok:
		m.flash.set("this dashboard's backend cannot switch deployments (tsd attach NAME can)")
		return nil
	case name == m.snap.Name:
		m.flash.set("already on " + name)
		return nil
	}
	m.flash.set("connecting to " + name + "…")
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), switchTimeout)
		defer cancel()
		b, err := sw.Switch(ctx, name)
		return connectedMsg{name: name, b: b, err: err}
	}
}

// switched puts the dashboard on the deployment :ctx connected to: the old
// streams end, every page starts afresh (the table keeps its order), and
// the new deployment's snapshots feed it.
func (m *Model) switched(msg connectedMsg) tea.Cmd {
	if msg.err != nil {
		m.flash.set(fmt.Sprintf("ctx %s failed: %v", msg.name, msg.err))
		return nil
	}
	m.closeSubscriptions()
	if c, ok := m.b.(interface{ Close() }); ok {
		c.Close()
	}
	m.b = msg.b
	m.feed = newSnapFeed()
	m.trends = newTrends()
	m.raw, m.snap, m.hasSnap = snapshot.Snapshot{}, snapshot.Snapshot{}, false
	m.pages = newPages(m, m.overview.sort)
	m.nav = nav{}
	m.confirm, m.await = nil, nil
	m.setSize(m.c.Width, m.c.Height)
	m.out.Deployment = msg.name
	m.flash.set("switched to " + msg.name)
	return subscribeCmd(m.b, m.feed)
}

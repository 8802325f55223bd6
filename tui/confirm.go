package tui

import (
	"context"
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
)

// A confirm prompt is a question on the message line and the keys that
// answer it. Every key means one thing in every prompt: y does what the
// question asks, ! does it without the drain (the CLI's --now), d
// detaches, s stops every role; n and esc cancel. Enter takes the
// prompt's default, which the prompt names.
type confirmPrompt struct {
	text    string
	answers []answer
	def     int  // the answer enter takes (-1: none)
	quitKey bool // q (or ctrl+c) again takes the default (else the first answer)
	// hint is what a key that means nothing here says (the quit prompt's
	// y: detach and stop are two answers, neither is "yes").
	hint string
}

type answer struct {
	b    key.Binding
	what string // the message while it runs ("restart decode-0…")
	cmd  tea.Cmd
}

// ask shows a y/n question; y runs cmd.
func (m *Model) ask(text, what string, cmd tea.Cmd) *confirmPrompt {
	m.confirm = &confirmPrompt{text: text, def: -1, answers: []answer{{b: m.c.Keys.Yes, what: what, cmd: cmd}}}
	return m.confirm
}

// orNow adds the ! answer: the same action without the drain.
func (c *confirmPrompt) orNow(b key.Binding, what string, cmd tea.Cmd) *confirmPrompt {
	c.answers = append(c.answers, answer{b: b, what: what, cmd: cmd})
	return c
}

// confirmKey answers the open prompt with k.
func (m *Model) confirmKey(k tea.KeyPressMsg) tea.Cmd {
	c := m.confirm
	take := func(a answer) tea.Cmd {
		m.confirm = nil
		m.flash = a.what + "…"
		return a.cmd
	}
	for _, a := range c.answers {
		if key.Matches(k, a.b) {
			return take(a)
		}
	}
	switch {
	case c.def >= 0 && k.String() == "enter":
		return take(c.answers[c.def])
	case c.quitKey && key.Matches(k, m.c.Keys.Quit):
		return take(c.answers[max(c.def, 0)])
	case key.Matches(k, m.c.Keys.No):
		m.confirm = nil
		m.flash = "cancelled"
	case c.hint != "":
		m.flash = c.hint
	}
	return nil
}

// confirmHelp is the footer while a prompt is open: its answers, then n.
func (m *Model) confirmHelp() string {
	var bs []key.Binding
	for _, a := range m.confirm.answers {
		bs = append(bs, a.b)
	}
	bs = append(bs, m.c.Keys.No)
	return m.helpBar.ShortHelpView(shortBindings(bs))
}

// inFlightText says how many requests a restart or stop would drain.
func inFlightText(n int) string {
	switch n {
	case 0:
		return "no request in flight"
	case 1:
		return "1 request in flight drains first"
	}
	return fmt.Sprintf("%d requests in flight drain first", n)
}

// outage says what taking the instances named out of service costs when
// no other instance of their kind would serve meanwhile ("" when another
// one does): a single-instance role restarted is an outage, not a blip.
// Remote instances count as serving while they are routed.
func outage(s *snapshot.Snapshot, kind string, out []string) string {
	if kind == "" {
		return ""
	}
	for _, r := range s.Roles {
		if r.Kind != kind || contains(out, r.Name) {
			continue
		}
		if r.Routed && r.State == snapshot.StateReady {
			return ""
		}
	}
	return fmt.Sprintf("no other %s serves: its requests fail until it is ready again", kind)
}

// sentence joins non-empty parts into one prompt: "a; b; c".
func sentence(parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "; ")
}

// restartCmd restarts a role and reports back once the backend accepted
// it (the model then waits for the role to be ready again).
func restartCmd(b Backend, name string, now bool) tea.Cmd {
	what := "restart " + name
	if now {
		what += " --now"
	}
	return func() tea.Msg {
		err := b.RestartNow(name, now)
		msg := controlDoneMsg{what: what, err: err}
		if err == nil {
			msg.restarted = name
		}
		return msg
	}
}

// askRestart is r (and :restart): the question says what drains, and
// whether it is an outage; ! restarts without the drain.
func (m *Model) askRestart(r snapshot.RoleStatus) {
	if m.refuseReadOnly("restart " + r.Name) {
		return
	}
	name := r.Name
	q := fmt.Sprintf("restart %s? %s [y/n · ! now, no drain]", name,
		sentence(inFlightText(r.InFlight), outage(&m.snap, r.Kind, []string{name})))
	m.ask(q, "restart "+name, restartCmd(m.b, name, false)).
		orNow(m.c.Keys.Now, "restart "+name+" now", restartCmd(m.b, name, true))
}

// askStop is s on a running role (and :stop).
func (m *Model) askStop(r snapshot.RoleStatus) {
	if m.refuseReadOnly("stop " + r.Name) {
		return
	}
	name, b := r.Name, m.b
	// Stopping a serving role loses its capacity (and, with real weights,
	// minutes to bring it back): ask first.
	q := fmt.Sprintf("stop %s? %s [y/n · ! now, no drain]", name,
		sentence(inFlightText(r.InFlight), outage(&m.snap, r.Kind, []string{name})))
	m.ask(q, "stop "+name, control("stop "+name, func() error { return b.StopNow(name, false) })).
		orNow(m.c.Keys.Now, "stop "+name+" now", control("stop "+name+" --now", func() error { return b.StopNow(name, true) }))
}

// rollingAsk asks for a rolling restart of target (a kind, or a replica
// group), whose instances are names: one at a time, each ready again
// before the next, so the others carry the traffic. With one instance
// that is an outage, and the question says so.
func (m *Model) rollingAsk(target, kind string, names []string, inFlight int) {
	if m.refuseReadOnly("rolling restart of " + target) {
		return
	}
	if len(names) == 0 {
		m.flash = target + " runs elsewhere; tsd cannot restart it"
		return
	}
	b := m.b
	what := "rolling restart of " + strings.Join(names, ", ")
	how := "one at a time, each drained"
	if len(names) == 1 {
		how = "the only instance"
	}
	// One at a time, so it is an outage only while an instance restarts
	// with no other one of its kind serving.
	note := ""
	for _, n := range names {
		if note = outage(&m.snap, kind, []string{n}); note != "" {
			break
		}
	}
	q := fmt.Sprintf("%s (%s)? %s [y/n · ! now, no drain]", what, how, sentence(inFlightText(inFlight), note))
	m.ask(q, what, control(what, func() error { return b.RollingRestart(context.Background(), target, false, nil) })).
		orNow(m.c.Keys.Now, what+" now", control(what+" --now", func() error { return b.RollingRestart(context.Background(), target, true, nil) }))
}

// rollingKind is R: a rolling restart of every local role of r's kind.
func (m *Model) rollingKind(r snapshot.RoleStatus) {
	var names []string
	inFlight := 0
	for _, o := range m.snap.Roles {
		if o.Kind == r.Kind && !o.Remote {
			names = append(names, o.Name)
			inFlight += o.InFlight
		}
	}
	if len(names) == 0 {
		m.flash = r.Name + " runs elsewhere; tsd cannot restart it"
		return
	}
	m.rollingAsk(r.Kind, r.Kind, names, inFlight)
}

// rollingGroup is :restart GROUP: a rolling restart of one replica group.
func (m *Model) rollingGroup(group string) {
	var names []string
	kind := ""
	inFlight := 0
	for _, o := range m.snap.Roles {
		if o.Group == group && !o.Remote {
			names = append(names, o.Name)
			inFlight += o.InFlight
			kind = o.Kind
		}
	}
	m.rollingAsk(group, kind, names, inFlight)
}

// refuseReadOnly says so when a read-only dashboard is asked to act.
func (m *Model) refuseReadOnly(what string) bool {
	if !m.opts.ReadOnly {
		return false
	}
	m.flash = "read-only dashboard (tsd attach --readonly): cannot " + what
	return true
}

// runningRoles counts roles whose processes run (what quitting stops).
func (m *Model) runningRoles() int {
	n := 0
	for _, r := range m.snap.Roles {
		if running(r.State) {
			n++
		}
	}
	return n
}

// askQuit is q. Without a daemon (the dashboard runs the deployment) y
// stops everything, the only thing quitting can mean. Attached to a
// daemon, the answers are d (detach: the deployment keeps running) and s
// (stop every role and the daemon), the same keys whatever the default;
// --stop-on-quit only changes which one enter takes. A read-only
// dashboard detaches at once: it cannot stop anything.
func (m *Model) askQuit() tea.Cmd {
	n := m.runningRoles()
	keys := m.c.Keys
	switch {
	case m.opts.ReadOnly:
		return tea.Quit
	case !m.opts.Detach:
		if n == 0 {
			return tea.Quit
		}
		m.ask(fmt.Sprintf("quit tsd? this stops %d running role(s) [y/n]", n), "quitting", tea.Quit).quitKey = true
		return nil
	}
	detach := answer{b: keys.Detach, what: "detaching", cmd: tea.Quit}
	stop := answer{b: keys.StopAll, what: "stopping the deployment", cmd: m.stopDeploymentCmd()}
	c := &confirmPrompt{quitKey: true, answers: []answer{detach, stop},
		hint: "d detaches (the roles keep running), s stops every role"}
	if m.opts.StopOnQuit {
		c.def = 1
		c.text = fmt.Sprintf("quit: s stop all %d running role(s) · d detach, they keep running [enter = s]", n)
	} else {
		c.def = 0
		c.text = fmt.Sprintf("quit: d detach, %d running role(s) keep running · s stop them all [enter = d]", n)
	}
	m.confirm = c
	return nil
}

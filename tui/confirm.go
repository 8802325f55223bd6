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

// orNow adds the ! answer: the same action without the drain.
func (c *confirmPrompt) orNow(b key.Binding, what string, cmd tea.Cmd) *confirmPrompt {
	c.answers = append(c.answers, answer{b: b, what: what, cmd: cmd})
	return c
}

// nowOnly turns a restart or stop prompt into its --now form: y does
// what ! would (a typed --now was the answer to the drain question).
func (c *confirmPrompt) nowOnly(yes key.Binding) *confirmPrompt {
	if len(c.answers) < 2 {
		return c
	}
	now := c.answers[1]
	now.b = yes
	text := strings.Replace(c.text, "? ", " now? ", 1)
	text = strings.Replace(text, " [y/n · ! now, no drain]", " [y/n]", 1)
	text = strings.Replace(text, "drains first", "ends at once", 1)
	text = strings.Replace(text, "drain first", "end at once", 1)
	return &confirmPrompt{text: text, def: -1, answers: []answer{now}}
}

// asked is what a prompt builder answers: the prompt to open, or a note
// saying why there is nothing to ask.
type asked struct {
	c    *confirmPrompt
	note string
}

// ask opens a prompt that acts on the deployment: refused (and said so)
// on a read-only dashboard; without a prompt it only says the note.
func (m *Model) ask(what string, a asked) {
	if m.refuseReadOnly(what) {
		return
	}
	if a.c == nil {
		m.flash.set(a.note)
		return
	}
	m.confirm = a.c
}

// confirmKey answers the open prompt with k.
func (m *Model) confirmKey(k tea.KeyPressMsg) tea.Cmd {
	c := m.confirm
	take := func(a answer) tea.Cmd {
		m.confirm = nil
		m.flash.set(a.what + "…")
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
		m.flash.set("cancelled")
	case c.hint != "":
		m.flash.set(c.hint)
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
	return m.bar.bar.ShortHelpView(shortBindings(bs))
}

// refuseReadOnly says so when a read-only dashboard is asked to act.
func (m *Model) refuseReadOnly(what string) bool {
	if !m.opts.ReadOnly {
		return false
	}
	m.flash.set("read-only dashboard (tsd attach --readonly): cannot " + what)
	return true
}

// prompts builds the questions the control keys and verbs ask, from what
// is on screen; the model opens what they return (Model.ask). A nil
// prompt comes with a note saying why there is nothing to ask.
type prompts struct {
	s    *snapshot.Snapshot
	keys *KeyMap
	b    Backend
}

func (m *Model) prompts() prompts { return prompts{s: &m.snap, keys: &m.c.Keys, b: m.b} }

// yesNo is a y/n question; y runs cmd.
func (p prompts) yesNo(text, what string, cmd tea.Cmd) *confirmPrompt {
	return &confirmPrompt{text: text, def: -1, answers: []answer{{b: p.keys.Yes, what: what, cmd: cmd}}}
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
		msg := controlDoneMsg{what: "restart " + name, err: err}
		if err != nil {
			msg.what = what
		} else {
			msg.ready = name
		}
		return msg
	}
}

// restart is r (and :restart): the question says what drains, and
// whether it is an outage; ! restarts without the drain.
func (p prompts) restart(r snapshot.RoleStatus) asked {
	name := r.Name
	q := fmt.Sprintf("restart %s? %s [y/n · ! now, no drain]", name,
		sentence(inFlightText(r.InFlight), outage(p.s, r.Kind, []string{name})))
	return asked{c: p.yesNo(q, "restart "+name, restartCmd(p.b, name, false)).
		orNow(p.keys.Now, "restart "+name+" now", restartCmd(p.b, name, true))}
}

// stop is s on a running role (and :stop). Stopping a serving role loses
// its capacity (and, with real weights, minutes to bring it back).
func (p prompts) stop(r snapshot.RoleStatus) asked {
	name, b := r.Name, p.b
	q := fmt.Sprintf("stop %s? %s [y/n · ! now, no drain]", name,
		sentence(inFlightText(r.InFlight), outage(p.s, r.Kind, []string{name})))
	return asked{c: p.yesNo(q, "stop "+name, control("stop "+name, func() error { return b.StopNow(name, false) })).
		orNow(p.keys.Now, "stop "+name+" now", control("stop "+name+" --now", func() error { return b.StopNow(name, true) }))}
}

// rolling asks for a rolling restart of target (a kind, or a replica
// group), whose instances are names: one at a time, each ready again
// before the next, so the others carry the traffic. With one instance
// that is an outage, and the question says so.
func (p prompts) rolling(target, kind string, names []string, inFlight int) asked {
	if len(names) == 0 {
		return asked{note: target + " runs elsewhere; tsd cannot restart it"}
	}
	b := p.b
	what := "rolling restart of " + strings.Join(names, ", ")
	how := "one at a time, each drained"
	if len(names) == 1 {
		how = "the only instance"
	}
	// One at a time, so it is an outage only while an instance restarts
	// with no other one of its kind serving.
	note := ""
	for _, n := range names {
		if note = outage(p.s, kind, []string{n}); note != "" {
			break
		}
	}
	q := fmt.Sprintf("%s (%s)? %s [y/n · ! now, no drain]", what, how, sentence(inFlightText(inFlight), note))
	return asked{c: p.yesNo(q, what, control(what, func() error { return b.RollingRestart(context.Background(), target, false, nil) })).
		orNow(p.keys.Now, what+" now", control(what+" --now", func() error { return b.RollingRestart(context.Background(), target, true, nil) }))}
}

// rollingOf is R (every local role of r's kind, or :restart --rolling
// KIND) and :restart GROUP (one replica group): the instances match.
func (p prompts) rollingOf(target string, match func(r *snapshot.RoleStatus) bool) asked {
	var names []string
	kind := ""
	inFlight := 0
	for i := range p.s.Roles {
		o := &p.s.Roles[i]
		if match(o) && !o.Remote {
			names = append(names, o.Name)
			inFlight += o.InFlight
			kind = o.Kind
		}
	}
	return p.rolling(target, kind, names, inFlight)
}

func (p prompts) rollingKind(kind string) asked {
	return p.rollingOf(kind, func(r *snapshot.RoleStatus) bool { return r.Kind == kind })
}

func (p prompts) rollingGroup(group string) asked {
	return p.rollingOf(group, func(r *snapshot.RoleStatus) bool { return r.Group == group })
}

// signal is K (and :signal): the question names the signal, the role and
// its process group, since a signal is as final as the engine makes it.
func (p prompts) signal(r snapshot.RoleStatus, sig string) asked {
	sg, ok := p.b.(Signaler)
	switch {
	case !ok:
		return asked{note: "this dashboard's backend cannot send signals"}
	case r.Remote:
		return asked{note: r.Name + " runs elsewhere; tsd cannot signal it"}
	case r.PID <= 0 || !running(r.State):
		return asked{note: r.Name + " has no process to signal (" + r.State + ")"}
	}
	name := r.Name
	what := "SIG" + sig + " to " + name
	q := fmt.Sprintf("send SIG%s to %s (process group %d)? %s [y/n]", sig, name, r.PID, signalNote(sig))
	return asked{c: p.yesNo(q, "send "+what, control("send "+what, func() error { return sg.Signal(name, sig) }))}
}

// signalNote says what a signal usually does to an engine.
func signalNote(sig string) string {
	switch sig {
	case "KILL":
		return "it ends at once, nothing drains; tsd restarts it by its policy"
	case "TERM", "INT", "QUIT", "HUP":
		return "it may end, nothing drains; tsd restarts it by its policy"
	case "STOP":
		return "it pauses: requests hang and its stall check may fire; CONT resumes it"
	}
	return "what it does is the engine's"
}

// runningRoles counts roles whose processes run (what quitting stops).
func runningRoles(s *snapshot.Snapshot) int {
	n := 0
	for _, r := range s.Roles {
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
	n := runningRoles(&m.snap)
	keys := m.c.Keys
	switch {
	case m.opts.ReadOnly:
		return tea.Quit
	case !m.opts.Detach:
		if n == 0 {
			return tea.Quit
		}
		c := m.prompts().yesNo(fmt.Sprintf("quit tsd? this stops %d running role(s) [y/n]", n), "quitting", tea.Quit)
		c.quitKey = true
		m.confirm = c
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

package tui

import (
	"errors"
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

// Describer is a Backend that can say how a role was planned (the
// describe view, d): its argv, env (secrets masked by the daemon), ports,
// GPUs and restart policy, as `tsd plan` shows them.
type Describer interface {
	Describe(role string) (snapshot.RoleSpec, error)
}

type describedMsg struct {
	role string
	spec snapshot.RoleSpec
	err  error
}

// describePage is k9s's describe for one role: everything its plan says,
// scrollable. The role's live state stays on the overview and the
// inspector; this is what it was started with.
type describePage struct {
	m       *Model
	w, h    int
	role    string
	spec    *snapshot.RoleSpec
	err     error
	loading bool
	offset  int
}

func (p *describePage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *describePage) Capturing() bool  { return false }

func (p *describePage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	return []key.Binding{k.Back, k.Up, k.Down, k.PageDown, k.Logs, k.Inspect, k.Restart, k.StopStart}
}

// open fetches role's plan from the backend (a command: the daemon
// answers over its control socket).
func (p *describePage) open(role string) tea.Cmd {
	p.role, p.spec, p.err, p.offset, p.loading = role, nil, nil, 0, true
	d, ok := p.m.b.(Describer)
	if !ok {
		p.loading = false
		p.err = errors.New("this dashboard's backend cannot describe roles")
		return nil
	}
	return func() tea.Msg {
		spec, err := d.Describe(role)
		return describedMsg{role: role, spec: spec, err: err}
	}
}

func (p *describePage) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case describedMsg:
		if msg.role != p.role {
			return nil // an answer for a role no longer shown
		}
		p.loading = false
		if msg.err != nil {
			p.err = msg.err
			return nil
		}
		p.spec = &msg.spec
		return nil
	case tea.KeyPressMsg:
		keys := p.m.c.Keys
		switch {
		case key.Matches(msg, keys.Up):
			p.offset = max(p.offset-1, 0)
			return nil
		case key.Matches(msg, keys.Down):
			p.offset++
			return nil
		case key.Matches(msg, keys.PageUp):
			p.offset = max(p.offset-p.h, 0)
			return nil
		case key.Matches(msg, keys.PageDown):
			p.offset += p.h
			return nil
		case key.Matches(msg, keys.Top):
			p.offset = 0
			return nil
		case key.Matches(msg, keys.Describe):
			return nil
		}
		for _, r := range p.m.snap.Roles {
			if r.Name == p.role {
				return roleKey(p.m, msg, r)
			}
		}
	}
	return nil
}

func (p *describePage) View() string {
	return scrolled(p.lines(), &p.offset, p.w, p.h, p.m.c.Styles.Faint, "↑/↓ pgup/pgdn")
}

func (p *describePage) lines() []string {
	st := p.m.c.Styles
	head := st.Title.Render("describe " + p.role)
	switch {
	case p.loading:
		return []string{head, st.Faint.Render("  asking the daemon…")}
	case p.err != nil:
		return []string{head, st.Bad.Render("  " + p.err.Error())}
	case p.spec == nil:
		return []string{head}
	}
	return describeLines(p.spec, st, p.w)
}

// describeLines renders a role's plan in w cells: its identity, the
// command line as `tsd plan` prints it, the argv one flag a line, the
// env, the ports, and the restart policy. Nothing is cut: long values
// wrap.
func describeLines(r *snapshot.RoleSpec, st Styles, w int) []string {
	where := "started by tsd"
	switch {
	case r.Launcher == "slurm":
		where = "a Slurm job step"
	case !r.Local:
		where = "runs on " + r.Host + " (not started by tsd)"
	}
	gpus := "GPUs " + orDash(strings.Join(r.GPUs, ","))
	head := []string{st.Title.Render("describe " + r.Name), orDash(r.Kind), where, gpus, fmt.Sprintf("tp %d", r.TP), fmt.Sprintf("dp %d", r.DP)}
	if r.Group != "" && r.Group != r.Name {
		head = append(head, "replica of "+r.Group)
	}
	out := wrapParts("", "  ", head, " · ", w)
	section := func(name string) {
		out = append(out, "", st.Title.Render(name))
	}
	wrapped := func(indent, more, text string) {
		out = append(out, wrapText(indent, more, text, w)...)
	}
	section("command line (secrets masked)")
	wrapped("  ", "    ", r.CommandLine)

	section("argv")
	for _, a := range argvLines(r.Argv) {
		wrapped("  ", "      ", a)
	}

	section("env")
	kw := 0
	for _, e := range r.Env {
		kw = max(kw, len(e.Name))
	}
	kw = min(kw, 32)
	for _, e := range r.Env {
		wrapped("  ", "  "+strings.Repeat(" ", kw+2), fit(e.Name, max(kw, len(e.Name)))+"  "+e.Value)
	}
	if len(r.Env) == 0 {
		out = append(out, st.Faint.Render("  none added"))
	}

	section("ports")
	row := func(k, v string) {
		if v != "" {
			wrapped("  ", "               ", fit(k, 13)+v)
		}
	}
	row("worker", r.Worker)
	row("handshake", r.Handshake)
	cluster := ""
	if len(r.PortCluster) > 0 {
		cluster = " (port cluster " + compactPorts(r.PortCluster) + ")"
	}
	row("dist-init", r.DistInitAddr+cluster)
	row("bootstrap", r.Bootstrap)
	row("log", r.LogFile)

	section("restart policy")
	rp := r.Restart
	parts := []string{"policy " + orDash(rp.Policy), "backoff " + rp.Backoff + " up to " + rp.MaxBackoff,
		"reset after " + rp.ResetAfter, fmt.Sprintf("budget %d in %s", rp.BudgetCount, rp.BudgetWindow),
		"stop grace " + rp.StopGrace, "drain " + rp.DrainTimeout}
	if r.StallAction != "" {
		parts = append(parts, "on stall "+r.StallAction)
	}
	out = append(out, wrapParts("  ", "  ", parts, " · ", w)...)
	return out
}

// argvLines groups a command's words one flag a line with its values
// ("--model /models/x"); the command itself comes first.
func argvLines(argv []string) []string {
	var out []string
	cur := ""
	for i, a := range argv {
		flag := strings.HasPrefix(a, "-") && len(a) > 1
		switch {
		case i == 0:
			cur = a
		case flag:
			out = append(out, cur)
			cur = a
		default:
			cur += " " + a // a flag's value, or the command's own words ("ts serve")
		}
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}

// wrapText breaks text into lines of at most w cells, the first after
// indent and the rest after more, cutting at spaces where it can and
// inside a word only when a word is longer than a line.
func wrapText(indent, more, text string, w int) []string {
	if w <= len(more)+1 {
		return []string{indent + text}
	}
	var out []string
	line := indent
	lead := indent
	for _, word := range strings.Split(text, " ") {
		for {
			room := w - ansi.StringWidth(line)
			sep := 1
			if line == lead {
				sep = 0
			}
			ww := ansi.StringWidth(word)
			if ww+sep <= room {
				if sep == 1 {
					line += " "
				}
				line += word
				break
			}
			if line != lead {
				out = append(out, line)
				line, lead = more, more
				continue
			}
			// A word longer than a whole line: cut it.
			cut := max(room, 1)
			line += ansi.Truncate(word, cut, "")
			word = ansi.TruncateLeft(word, cut, "")
			out = append(out, line)
			line, lead = more, more
			if word == "" {
				break
			}
		}
	}
	if line != lead || len(out) == 0 {
		out = append(out, line)
	}
	return out
}

// compactPorts prints a port list with runs collapsed: 12579,12580,12582-12585.
func compactPorts(ps []int) string {
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, itoa(ps[i])+"-"+itoa(ps[j]))
		} else {
			parts = append(parts, itoa(ps[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
)

// eventsPage is every event the daemon keeps (the overview shows the
// newest few), scrollable and filtered by a plain substring (case-blind).
type eventsPage struct {
	m      *Model
	w, h   int
	top    int // first shown, counting filtered events from the oldest
	follow bool

	filter    string
	inputting bool
	input     lineInput
}

func newEventsPage(m *Model) *eventsPage { return &eventsPage{m: m, follow: true} }

func (p *eventsPage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *eventsPage) Capturing() bool  { return p.inputting }

func (p *eventsPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	if p.inputting {
		return []key.Binding{
			key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply")),
			key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel")),
		}
	}
	return []key.Binding{k.Back, k.Up, k.Down, k.Top, k.Bottom, k.Filter}
}

// shown is the filtered events, oldest first.
func (p *eventsPage) shown() []snapshot.Event {
	ev := p.m.snap.Events
	if p.filter == "" {
		return ev
	}
	q := strings.ToLower(p.filter)
	var out []snapshot.Event
	for _, e := range ev {
		if strings.Contains(strings.ToLower(e.Role+" "+e.Message), q) {
			out = append(out, e)
		}
	}
	return out
}

func (p *eventsPage) rows() int { return max(p.h-1, 1) }

func (p *eventsPage) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	if p.inputting {
		switch k.Code {
		case tea.KeyEscape:
			p.inputting = false
		case tea.KeyEnter:
			p.inputting, p.filter, p.follow = false, strings.TrimSpace(p.input.text), true
		default:
			p.input.edit(k)
		}
		return nil
	}
	keys := p.m.c.Keys
	n := len(p.shown())
	last := max(0, n-p.rows())
	if p.follow {
		p.top = last
	}
	switch {
	case key.Matches(k, keys.Up):
		p.top, p.follow = max(0, p.top-1), false
	case key.Matches(k, keys.Down):
		p.top = min(last, p.top+1)
		p.follow = p.top == last
	case key.Matches(k, keys.PageUp):
		p.top, p.follow = max(0, p.top-p.rows()), false
	case key.Matches(k, keys.PageDown):
		p.top = min(last, p.top+p.rows())
		p.follow = p.top == last
	case key.Matches(k, keys.Top):
		p.top, p.follow = 0, false
	case key.Matches(k, keys.Bottom):
		p.follow = true
	case key.Matches(k, keys.Filter):
		p.inputting, p.input = true, lineInput{text: p.filter}
	}
	return nil
}

func (p *eventsPage) View() string {
	st := p.m.c.Styles
	ev := p.shown()
	rows := p.rows()
	last := max(0, len(ev)-rows)
	if p.follow || p.top > last {
		p.top = last
	}
	head := st.Title.Render("events") + fmt.Sprintf(" · %d of %d kept", len(ev), len(p.m.snap.Events))
	if p.filter != "" {
		head += fmt.Sprintf(" · filter %q", p.filter)
	}
	out := []string{head}
	for _, e := range ev[p.top:min(len(ev), p.top+rows)] {
		who := e.Role
		if who == "" {
			who = "tsd"
		}
		// A line too long for the page is cut with "…", so a cut reads
		// as one (the whole message is in the logs and tsd status).
		line := cutLine("  "+e.Time.Format("15:04:05")+" "+fit(who, 14)+" "+e.Message, p.w)
		if lineLevel(" "+e.Message+" ") == levelError || strings.Contains(e.Message, "failed") || strings.Contains(e.Message, "crashed") {
			line = st.Bad.Render(line)
		}
		out = append(out, line)
	}
	if len(ev) == 0 {
		msg := "  no events yet"
		if p.filter != "" {
			msg = "  no event matches the filter"
		}
		out = append(out, st.Faint.Render(msg))
	}
	if p.inputting {
		for len(out) < p.h-1 {
			out = append(out, "")
		}
		out = append(out[:p.h-1], st.Prompt.Render("filter: ")+fitInput(p.input.text, max(p.w-8, 1)))
	}
	return screen(out, p.w, p.h)
}

package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

type (
	// applyPlannedMsg is an :apply's dry run.
	applyPlannedMsg struct {
		profile string
		preview ApplyPreview
		err     error
	}
	// applyProgressMsg is one step of a running apply, or its end.
	applyProgressMsg struct {
		line string
		done bool
		err  error
		next tea.Cmd // waits for the one after
	}
)

// applyPage is :apply: the dry run's diff first (what starts, stops or
// restarts, and why), a confirm naming the revisions, then the apply's
// steps as they happen. Nothing changes until y.
type applyPage struct {
	m       *Model
	w, h    int
	profile string
	preview *ApplyPreview
	err     error
	steps   []string // what the running apply said so far
	offset  int
}

func (p *applyPage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *applyPage) Capturing() bool  { return false }

func (p *applyPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	return []key.Binding{k.Back, k.Up, k.Down, k.PageDown}
}

// previewApply is :apply PROFILE: ask the backend for the dry run, and
// show the page while it answers.
func (m *Model) previewApply(profile string) tea.Cmd {
	ap, ok := m.b.(Applier)
	if !ok {
		m.flash.set("this dashboard's backend cannot apply a profile; use tsd apply")
		return nil
	}
	p := m.apply
	p.profile, p.preview, p.err, p.steps, p.offset = profile, nil, nil, nil, 0
	cmd := m.navigate(pageApply, "")
	m.flash.set("reading " + orDefault(profile, "the running profile") + " for a dry run…")
	return tea.Batch(cmd, func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), applyPlanTimeout)
		defer cancel()
		pv, err := ap.PlanApply(ctx, profile)
		return applyPlannedMsg{profile: profile, preview: pv, err: err}
	})
}

// applyPlanTimeout bounds the dry run (the daemon plans; nothing starts).
const applyPlanTimeout = 30 * time.Second

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (p *applyPage) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case applyPlannedMsg:
		if msg.profile != p.profile || p.m.focus != pageApply {
			return nil // an answer for a page no longer shown
		}
		p.err = msg.err
		if msg.err != nil {
			p.m.flash.set("apply: dry run failed (nothing changed)")
			return nil
		}
		p.preview = &msg.preview
		if !msg.preview.Changes {
			p.m.flash.set("apply: nothing to change")
			return nil
		}
		p.m.flash.set("")
		p.m.ask("apply "+orDefault(p.profile, "the profile"), p.confirm())
		return nil
	case applyProgressMsg:
		switch {
		case msg.err != nil:
			p.steps = append(p.steps, "error: "+msg.err.Error())
			p.m.flash.set("apply failed: " + msg.err.Error())
		case msg.done:
			p.steps = append(p.steps, "done")
			to := ""
			if p.preview != nil {
				to = " runs revision " + p.preview.To
			}
			p.m.flash.set("apply: done, " + orDefault(p.m.snap.Name, "the deployment") + to)
		default:
			p.steps = append(p.steps, msg.line)
			p.m.flash.set("apply: " + msg.line + "…")
		}
		return msg.next
	case tea.KeyPressMsg:
		keys := p.m.c.Keys
		switch {
		case key.Matches(msg, keys.Up):
			p.offset = max(p.offset-1, 0)
		case key.Matches(msg, keys.Down):
			p.offset++
		case key.Matches(msg, keys.PageUp):
			p.offset = max(p.offset-p.h, 0)
		case key.Matches(msg, keys.PageDown):
			p.offset += p.h
		case key.Matches(msg, keys.Top):
			p.offset = 0
		case key.Matches(msg, keys.Bottom):
			p.offset = 1 << 30
		}
	}
	return nil
}

// confirm is the question after the diff: y applies it (expecting the
// revision the diff was made from, so an edit in between is refused).
func (p *applyPage) confirm() asked {
	pv := *p.preview
	ap, _ := p.m.b.(Applier)
	name := orDefault(p.m.snap.Name, "the deployment")
	what := fmt.Sprintf("apply revision %s to %s", pv.To, name)
	q := fmt.Sprintf("apply revision %s → %s to %s (%s)? the diff is above [y/n]", orDefault(pv.From, "?"), pv.To, name, pv.Summary)
	profile := p.profile
	return asked{c: p.m.prompts().yesNo(q, what, applyCmd(ap, profile, pv.To))}
}

// applyCmd runs the apply in its own goroutine and hands its steps to
// the page one message at a time.
func applyCmd(ap Applier, profile, expect string) tea.Cmd {
	return func() tea.Msg {
		ch := make(chan applyProgressMsg, 64)
		go func() {
			err := ap.Apply(context.Background(), profile, expect, func(l string) {
				ch <- applyProgressMsg{line: l}
			})
			ch <- applyProgressMsg{done: true, err: err}
			close(ch)
		}()
		return nextApplyStep(ch)()
	}
}

func nextApplyStep(ch <-chan applyProgressMsg) tea.Cmd {
	return func() tea.Msg {
		msg, ok := <-ch
		if !ok {
			return nil
		}
		if !msg.done {
			msg.next = nextApplyStep(ch)
		}
		return msg
	}
}

func (p *applyPage) View() string {
	return scrolled(p.lines(), &p.offset, p.w, p.h, p.m.c.Styles.Faint, "↑/↓ pgup/pgdn")
}

func (p *applyPage) lines() []string {
	st := p.m.c.Styles
	head := st.Title.Render("apply " + orDefault(p.profile, "the running profile"))
	switch {
	case p.err != nil:
		var msg string
		if errors.Is(p.err, context.DeadlineExceeded) {
			msg = "the daemon did not answer the dry run in time"
		} else {
			msg = p.err.Error()
		}
		out := []string{head}
		for _, l := range strings.Split(msg, "\n") {
			for _, w := range wrapText("  ", "    ", l, p.w) {
				out = append(out, st.Bad.Render(w))
			}
		}
		return append(out, "", st.Faint.Render("  nothing changed · esc goes back"))
	case p.preview == nil:
		return []string{head, st.Faint.Render("  asking the daemon for a dry run…")}
	}
	pv := p.preview
	out := []string{head + " · " + fmt.Sprintf("revision %s → %s (%s)", orDefault(pv.From, "(a plan file)"), pv.To, pv.Summary)}
	for _, l := range pv.Lines {
		out = append(out, wrapText("  ", "    ", l, p.w)...)
	}
	if len(pv.Steps) > 0 && pv.Changes {
		out = append(out, "", st.Title.Render("steps"))
		for i, s := range pv.Steps {
			out = append(out, wrapText(fmt.Sprintf("  %d. ", i+1), "     ", s, p.w)...)
		}
	}
	for _, w := range pv.Warnings {
		for _, l := range wrapText("  ", "    ", "warning: "+w, p.w) {
			out = append(out, st.Warn.Render(l))
		}
	}
	if !pv.Changes {
		out = append(out, "", st.Faint.Render("  nothing to change"))
	}
	if len(p.steps) > 0 {
		out = append(out, "", st.Title.Render("applying"))
		for _, s := range p.steps {
			out = append(out, wrapText("  ", "    ", s, p.w)...)
		}
	}
	return out
}

package tui

import (
	"strings"

	tea "charm.land/bubbletea/v2"
)

// cmdLine is the `:` line as its own model (k9s's cmd_buff): the text
// being typed, the history ↑/↓ walk, and what Tab offers. The root model
// opens it, routes every key to it while it is open, and runs the line
// enter hands back; the line never acts on the deployment itself.
type cmdLine struct {
	active bool
	in     lineInput
	hist   history
	tab    tabCycle
	// deployments are the names :ctx completes, as the backend last
	// listed them (asked each time the line opens).
	deployments []string
}

// cmdOutcome is what one key did on the line.
type cmdOutcome struct {
	run  string // enter: the line to run (already in the history)
	ran  bool
	note string // a message for the flash ("nothing to complete")
}

// open starts a line with text already typed (K puts ":signal ROLE TERM").
func (c *cmdLine) open(text string) {
	c.active, c.in = true, lineInput{text: text}
	c.hist.reset()
	c.tab = tabCycle{at: -1}
}

// key edits the line: enter runs it, esc (or backspace on nothing)
// closes it, up and down walk the history, tab completes the word being
// typed (again: the next candidate) against tg.
func (c *cmdLine) key(k tea.KeyPressMsg, tg commandTarget) cmdOutcome {
	switch k.String() {
	case "esc":
		c.active = false
		return cmdOutcome{}
	case "enter":
		c.active = false
		line := strings.TrimSpace(c.in.text)
		c.hist.push(line)
		return cmdOutcome{run: line, ran: true}
	case "up", "down":
		c.in.text = c.hist.walk(c.in.text, k.String() == "up")
		c.tab.cands = nil
		return cmdOutcome{}
	case "tab", "shift+tab":
		if !c.tab.next(&c.in, k.String() == "shift+tab", tg) {
			return cmdOutcome{note: "nothing to complete"}
		}
		return cmdOutcome{}
	case "backspace":
		if c.in.text == "" {
			c.active = false // backspace on an empty line closes it, as vim's does
			return cmdOutcome{}
		}
	}
	if c.in.edit(k) {
		c.tab = tabCycle{at: -1}
	}
	return cmdOutcome{}
}

// view is the line as the message line draws it, w cells.
func (c *cmdLine) view(st Styles, w int) string {
	return st.Prompt.Render(":") + fitInput(c.in.text, max(w-1, 0))
}

// help is the footer while the line is open: what Tab offered (the one
// it put in place marked), else the keys and the verbs.
func (c *cmdLine) help(st Styles, w int) string {
	if len(c.tab.cands) > 1 {
		parts := make([]string, len(c.tab.cands))
		for i, cand := range c.tab.cands {
			if i == c.tab.at {
				cand = st.HelpKey.Render("[" + cand + "]")
			}
			parts[i] = cand
		}
		return fit(st.HelpDesc.Render("tab: ")+strings.Join(parts, " "), w)
	}
	return fit(st.HelpDesc.Render("enter run · esc cancel · tab complete · ↑/↓ history · ctrl+u/ctrl+w erase · verbs: "+strings.Join(dashboardVerbs(), " ")), w)
}

// cmdHistMax bounds the : command history.
const cmdHistMax = 50

// history is the lines run, oldest first, and where ↑/↓ stand in them.
type history struct {
	lines []string
	at    int    // the entry shown (len(lines): the line being typed)
	draft string // the line being typed while the history is browsed
}

func (h *history) reset() { h.at, h.draft = len(h.lines), "" }

// push keeps a line that was run (not twice in a row).
func (h *history) push(line string) {
	if line == "" || len(h.lines) > 0 && h.lines[len(h.lines)-1] == line {
		return
	}
	h.lines = append(h.lines, line)
	if len(h.lines) > cmdHistMax {
		h.lines = h.lines[len(h.lines)-cmdHistMax:]
	}
}

// walk is the text after ↑ (back) or ↓ from cur: the oldest entry stays
// put, and ↓ past the newest brings back what was being typed.
func (h *history) walk(cur string, back bool) string {
	switch {
	case back && h.at > 0:
		if h.at == len(h.lines) {
			h.draft = cur
		}
		h.at--
		return h.lines[h.at]
	case !back && h.at < len(h.lines):
		h.at++
		if h.at == len(h.lines) {
			return h.draft
		}
		return h.lines[h.at]
	}
	return cur
}

// tabCycle is what Tab offered last and which of it is in place.
type tabCycle struct {
	cands []string
	at    int    // the candidate Tab cycled to (-1: none yet)
	base  string // the line before cycling began
}

// next completes in: the first tab grows the word to what every
// candidate shares; with several left, each next tab puts the next one
// in its place (back: the previous). It reports whether anything fit.
func (t *tabCycle) next(in *lineInput, back bool, tg commandTarget) bool {
	if len(t.cands) > 1 {
		n := len(t.cands)
		switch {
		case t.at < 0 && back:
			t.at = n - 1
		case t.at < 0:
			t.at = 0
		case back:
			t.at = (t.at + n - 1) % n
		default:
			t.at = (t.at + 1) % n
		}
		typing, _ := completions(t.base, tg)
		in.text = strings.TrimSuffix(t.base, typing) + t.cands[t.at]
		return true
	}
	out, cands := completeLine(in.text, tg)
	in.text = out
	t.cands, t.at, t.base = cands, -1, out
	return len(cands) > 0
}

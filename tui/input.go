package tui

import (
	"strings"
	"unicode"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
)

// lineInput is the text of a prompt being typed (the : command line, the
// overview's and the events' filters, the logs' find and filter). Every
// prompt edits the same way, as a shell line does: backspace, ctrl+u
// (erase the line), ctrl+w and alt+backspace (erase the word before the
// cursor). The cursor stays at the end.
type lineInput struct {
	text string
}

// edit applies one key to the text; it reports whether the key was an
// edit (enter, esc, tab and arrows are the prompt's own).
func (in *lineInput) edit(k tea.KeyPressMsg) bool {
	switch k.String() {
	case "backspace", "ctrl+h":
		if r := []rune(in.text); len(r) > 0 {
			in.text = string(r[:len(r)-1])
		}
		return true
	case "ctrl+u":
		in.text = ""
		return true
	case "ctrl+w", "alt+backspace":
		in.text = eraseWord(in.text)
		return true
	case "space":
		in.text += " "
		return true
	}
	if k.Text != "" && k.Mod&^tea.ModShift == 0 {
		in.text += k.Text
		return true
	}
	return false
}

// eraseWord drops the last word of s and the spaces after it, as a
// shell's ctrl+w does (words end at spaces).
func eraseWord(s string) string {
	s = strings.TrimRightFunc(s, unicode.IsSpace)
	i := strings.LastIndexFunc(s, unicode.IsSpace)
	return s[:i+1]
}

// fitInput draws typed text and the cursor in w cells: when the text is
// longer, its end (where the cursor is) stays in view.
func fitInput(text string, w int) string { return fit(inputTail(text, w), w) }

// inputTail is typed text and the cursor in at most w cells, unpadded.
func inputTail(text string, w int) string {
	s := text + "█"
	if sw := width(s); sw > w && w > 1 {
		s = "…" + ansi.TruncateLeft(s, sw-w+1, "")
	}
	return s
}

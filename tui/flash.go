package tui

import (
	"strings"
	"time"
)

// flashLife is how long a message stays in the message line. One that
// ends in "…" says something is under way and stays until its result
// replaces it.
const flashLife = 5 * time.Second

// flash is the message line's text as its own model (k9s's flash): set by
// whoever has news, gone flashLife after the clock first saw it, and gone
// when the page changes, since most news is about the page it came from.
// News of something under way ("restart decode-0: waiting…") is about
// the deployment, so it stays until its result replaces it.
type flash struct {
	text string
	seen string    // the text as the last tick saw it
	at   time.Time // when that tick first saw it
}

func (f *flash) set(s string) { f.text = s }

// pageChanged clears what belonged to the page left.
func (f *flash) pageChanged() {
	if !f.underWay() {
		f.text = ""
	}
}

func (f *flash) underWay() bool { return strings.HasSuffix(f.text, "…") }

// tick expires a message shown for flashLife; it watches the text on
// each tick, so setting it needs no clock.
func (f *flash) tick(now time.Time) {
	if f.text != f.seen {
		f.seen, f.at = f.text, now
		return
	}
	if f.text != "" && !f.underWay() && now.Sub(f.at) >= flashLife {
		f.text, f.seen = "", ""
	}
}

package tui

import (
	"strings"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// maxForms bounds how many forms one table cell may offer.
const maxForms = 5

// cell is one roles-table cell this frame: its text in every form it may
// take, fullest first, and its colour. Each shorter form abbreviates words
// and drops decoration, never a number, so the layout can narrow a column
// without cutting a countdown, a count or a progress figure.
type cell struct {
	forms [maxForms]string
	n     int
	paint paint
}

func (c *cell) set(s string, p paint) { c.forms[0], c.n, c.paint = s, 1, p }

// add appends the next shorter form. Forms of one column line up by
// level across rows (level 1 of every STATE cell abbreviates phrases,
// level 3 the state word), so a form may repeat the one before.
func (c *cell) add(s string) {
	if c.n == maxForms {
		return
	}
	c.forms[c.n] = s
	c.n++
}

// form is the fullest form that fits w cells, else the shortest.
func (c *cell) form(w int) string {
	for i := 0; i < c.n; i++ {
		if width(c.forms[i]) <= w {
			return c.forms[i]
		}
	}
	if c.n == 0 {
		return ""
	}
	return c.forms[c.n-1]
}

// stateShort are the state words' short forms (a narrow STATE column).
var stateShort = map[string]string{
	snapshot.StateStarting:    "start",
	snapshot.StateHandshaking: "hshake",
	snapshot.StateDraining:    "drain",
	snapshot.StateStopping:    "stop",
}

// phaseShort are the startup milestones' short forms (supervisor
// milestone.go names them).
var phaseShort = map[string]string{
	"parsing args":       "args",
	"spawning ranks":     "spawn",
	"init distributed":   "dist init",
	"loading weights":    "weights",
	"weights loaded":     "weights done",
	"graph capture":      "graphs",
	"scheduler ready":    "scheduler",
	"embedding cache":    "embed cache",
	"dialing gateway":    "dialing",
	"handshake complete": "handshake done",
}

func shortPhase(p string) string {
	if s, ok := phaseShort[p]; ok {
		return s
	}
	if rest, ok := strings.CutPrefix(p, "waiting for "); ok {
		return "wait " + rest // "waiting for INIT (42s)" keeps its seconds
	}
	return p
}

func shortState(s string) string {
	if x, ok := stateShort[s]; ok {
		return x
	}
	return s
}

// stateText is the state word, always printed, with the startup phase;
// a draining role says how much is left and for how long (a stalled
// one's why is in the REASON column). It is the fullest of stateForms.
func stateText(r *snapshot.RoleStatus, now time.Time) string {
	var c cell
	stateForms(r, now, &c)
	return c.forms[0]
}

// stateForms fills c with the STATE cell's forms, fullest first, by
// level: 0 in full; 1 shorter phrases ("retry in", a half bar, the
// phase's short name); 2 no decoration ("infl", no bar); 3 the state
// word's short form ("drain", "start", "hshake").
func stateForms(r *snapshot.RoleStatus, now time.Time, c *cell) {
	s := r.State
	if s == "" {
		s = "unknown"
	}
	c.n, c.paint = 0, statePaint(r.State)
	switch {
	case r.State == snapshot.StateDraining && !r.DrainDeadline.IsZero():
		n := itoa(r.DrainInFlight)
		left := humanDuration(max(r.DrainDeadline.Sub(now), 0).Round(time.Second))
		c.add(s + " · " + n + " in flight · " + left + " left")
		c.add(s + " · " + n + " in flight · " + left)
		c.add(s + " · " + n + " infl · " + left)
		c.add(shortState(s) + " · " + n + " infl · " + left)
	case r.State == snapshot.StateBackoff && !r.NextTryAt.IsZero():
		cd := countdown(r.NextTryAt, now)
		c.add(s + " · next try in " + cd)
		c.add(s + " · retry in " + cd)
		c.add(s + " · " + cd)
		c.add(s + " · " + cd)
	case r.Progress != nil && (r.State == snapshot.StateStarting || r.State == snapshot.StateHandshaking):
		name, count := progressParts(r.Progress)
		c.add(s + " " + progressBar(r.Progress.Frac, progressBarW) + " " + count + " " + name)
		c.add(s + " " + progressBar(r.Progress.Frac, progressBarW/2) + " " + count + " " + name)
		c.add(s + " " + count + " " + name)
		c.add(shortState(s) + " " + count + " " + name)
	case r.Phase != "" && r.State != snapshot.StateReady:
		c.add(s + " · " + r.Phase)
		c.add(s + " · " + shortPhase(r.Phase))
		c.add(s + " · " + shortPhase(r.Phase))
		c.add(shortState(s) + " · " + shortPhase(r.Phase))
	default:
		c.add(s)
	}
}

// progressBarW is the width of a startup progress bar in the STATE cell.
const progressBarW = 8

// progressParts names a startup step briefly and gives the engine's own
// count through it ("5/11"), else a percentage.
func progressParts(p *snapshot.Progress) (name, count string) {
	name = p.Phase
	switch name {
	case "loading weights":
		name = "weights"
	case "graph capture":
		name = "graphs"
	}
	count = p.Text
	if count == "" {
		count = itoa(int(p.Frac*100+0.5)) + "%"
	}
	return name, count
}

func progressBar(frac float64, w int) string {
	n := int(frac*float64(w) + 0.5)
	n = max(0, min(n, w))
	return strings.Repeat("█", n) + strings.Repeat("░", w-n)
}

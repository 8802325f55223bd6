package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
	"golang.org/x/sys/unix"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

// Progress while a verb waits (tsd up -d, tsd restart --wait and
// --rolling): with real weights a start takes minutes. On a terminal the
// roles' phases and the engines' progress bars (weights, CUDA graphs) are
// a block redrawn in place, as docker compose draws its services; off a
// terminal there is one plain line per phase change and never a redraw.
// Both are fed by the snapshot stream of the control socket, as the
// dashboard's remote backend is.

// progressView prints what the waited-on roles are doing. Not safe for
// concurrent use: one goroutine feeds it.
type progressView struct {
	w     io.Writer
	tty   bool
	width int               // the terminal's columns (tty)
	only  map[string]bool   // the roles to show (nil: every role)
	last  map[string]string // plain: the phase line last printed per role
	clock map[string]span   // how long each role's start has taken
	drawn int               // tty: lines of the block on screen
	cur   snapshot.Snapshot
	// head, when set, is a line above the roles (a stop's drain): its
	// text, and a key that changes when a plain line is worth printing.
	head     func(s snapshot.Snapshot, now time.Time) (text, key string)
	lastHead string
}

func newProgressView(w io.Writer, tty bool, roles []string) *progressView {
	v := &progressView{w: w, tty: tty, width: 80, last: map[string]string{}, clock: map[string]span{}}
	if len(roles) > 0 {
		v.only = map[string]bool{}
		for _, r := range roles {
			v.only[r] = true
		}
	}
	if f, ok := w.(*os.File); ok && tty {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			v.width = int(ws.Col)
		}
	}
	return v
}

// prime records roles' current phases as already told: a verb that just
// asked for a change does not print the state it started from.
func (v *progressView) prime(roles []snapshot.RoleStatus) {
	for _, r := range roles {
		if r.Name != "" && (v.only == nil || v.only[r.Name]) {
			v.last[r.Name] = phaseKey(r)
		}
	}
}

// shown is the roles of s the view follows, in plan order.
func (v *progressView) shown(s snapshot.Snapshot) []snapshot.RoleStatus {
	var out []snapshot.RoleStatus
	for _, r := range s.Roles {
		if v.only == nil || v.only[r.Name] {
			out = append(out, r)
		}
	}
	return out
}

// update folds in a snapshot: plain lines for what changed, or (tty) the
// block redrawn.
func (v *progressView) update(s snapshot.Snapshot, now time.Time) {
	if len(s.Roles) == 0 {
		return // nothing streamed yet
	}
	v.cur = s
	for _, r := range v.shown(s) {
		v.clock[r.Name] = v.clock[r.Name].next(r.State, now)
	}
	if !v.tty {
		if v.head != nil {
			if text, key := v.head(s, now); key != v.lastHead {
				v.lastHead = key
				if text != "" {
					fmt.Fprintln(v.w, text)
				}
			}
		}
		for _, l := range phaseChanges(v.last, v.shown(s)) {
			fmt.Fprintln(v.w, l)
		}
		return
	}
	v.redraw(now)
}

// say prints one line of the verb's own (a rolling restart's step) above
// the block.
func (v *progressView) say(line string, now time.Time) {
	if !v.tty {
		fmt.Fprintln(v.w, line)
		return
	}
	v.clear()
	fmt.Fprintln(v.w, line)
	if len(v.cur.Roles) > 0 {
		v.redraw(now)
	}
}

// stepHooks change how follow shows an operation; the zero value is an
// apply's and a rolling restart's.
type stepHooks struct {
	// line shows a step line while the operation runs. nil: the view
	// first catches up with the daemon's current snapshot, since the
	// daemon wrote the line after the snapshot that prompted it ("decode-0
	// ready again"), so the phase lines come before the step they led to.
	line func(string)
	// queued shows a step line still queued when the operation ended
	// (nil: as it is).
	queued func(string)
	// snap sees each streamed snapshot before the view takes it (nil:
	// none).
	snap func(snapshot.Snapshot)
}

// follow shows a long operation (an apply, a rolling restart, a whole
// stop) as it goes, until done brings its end: its step lines (steps,
// which the operation writes from its own goroutine), its roles' phases
// from cl's snapshot stream (without the stream, the step lines alone)
// and, each second, the view's clocks. The step lines queued by the end
// are shown before it returns the operation's error.
func (v *progressView) follow(ctx context.Context, cl *supervisor.ControlClient, steps <-chan string, done <-chan error, h stepHooks) error {
	line, queued := h.line, h.queued
	if line == nil {
		line = func(l string) {
			if s, err := cl.Status(ctx); err == nil {
				v.update(s, time.Now())
			}
			v.say(l, time.Now())
		}
	}
	if queued == nil {
		queued = func(l string) { v.say(l, time.Now()) }
	}
	snaps := (<-chan snapshot.Snapshot)(nil)
	if _, ch, err := cl.Watch(ctx); err == nil {
		snaps = ch
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case l := <-steps:
			line(l)
		case s, ok := <-snaps:
			if !ok {
				snaps = nil
				continue
			}
			if h.snap != nil {
				h.snap(s)
			}
			v.update(s, time.Now())
		case t := <-tick.C:
			v.update(v.cur, t)
		case err := <-done:
			// The operation returns after its last step line: all of
			// them are queued by now.
			for {
				select {
				case l := <-steps:
					queued(l)
					continue
				default:
				}
				break
			}
			return err
		}
	}
}

// clear moves to the block's first line and erases it.
func (v *progressView) clear() {
	if v.drawn > 0 {
		fmt.Fprintf(v.w, "\x1b[%dA\x1b[J", v.drawn)
		v.drawn = 0
	}
}

func (v *progressView) redraw(now time.Time) {
	lines := progressBlock(v.shown(v.cur), v.clock, now)
	if v.head != nil {
		if text, _ := v.head(v.cur, now); text != "" {
			lines = append([]string{text}, lines...)
		}
	}
	var b strings.Builder
	if v.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.drawn)
	}
	for _, l := range lines {
		// A wrapped line would break the count of lines to go back up.
		b.WriteString("\x1b[2K" + ansi.Truncate(l, v.width-1, "…") + "\n")
	}
	b.WriteString("\x1b[J")
	_, _ = io.WriteString(v.w, b.String())
	v.drawn = len(lines)
}

// span is how long a role's start took or has taken so far: from when it
// was first seen on its way (not ready) to when it settled (ready,
// failed, stopped). A role ready all along has none.
type span struct{ from, to time.Time }

func settled(state string) bool {
	return state == snapshot.StateReady || state == snapshot.StateFailed || state == snapshot.StateStopped
}

// next is the span after seeing the role in state at now.
func (s span) next(state string, now time.Time) span {
	switch {
	case !settled(state) && (s.from.IsZero() || !s.to.IsZero()):
		return span{from: now} // on its way (again)
	case settled(state) && !s.from.IsZero() && s.to.IsZero():
		s.to = now
	}
	return s
}

// took is the span's length at now ("" when it has none).
func (s span) took(now time.Time) string {
	if s.from.IsZero() {
		return ""
	}
	end := now
	if !s.to.IsZero() {
		end = s.to
	}
	return supervisor.HumanDuration(end.Sub(s.from).Round(100 * time.Millisecond))
}

// phaseKey is what a plain line is printed for: the state and the
// startup phase (not the progress within it).
func phaseKey(r snapshot.RoleStatus) string {
	s := r.State
	// The phase is a startup milestone: it says something only while the
	// role starts (a stopping role still carries its last one, "ready").
	if r.Phase != "" && r.Phase != r.State && (r.State == snapshot.StateStarting || r.State == snapshot.StateHandshaking) {
		s += " · " + r.Phase
	}
	if r.State == snapshot.StateFailed && r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}

// phaseChanges is the plain lines for the roles whose phase changed since
// last (which it updates): "decode: starting · loading weights".
func phaseChanges(last map[string]string, roles []snapshot.RoleStatus) []string {
	var out []string
	for _, r := range roles {
		k := phaseKey(r)
		if last[r.Name] == k {
			continue
		}
		last[r.Name] = k
		out = append(out, r.Name+": "+k)
	}
	return out
}

// progressBarWidth is the width of a progress bar in the block.
const progressBarWidth = 20

// progressBlock is the terminal block: one line per role with a mark, its
// state and phase, the engine's progress bar while it reports one, and
// how long its start has taken.
//
//	⠿ prefill   starting · loading weights  ████████░░░░░░░░░░░░ 2/5   4s
//	✔ decode    ready                                                  6s
func progressBlock(roles []snapshot.RoleStatus, clock map[string]span, now time.Time) []string {
	nameW, stateW := 0, 0
	texts := make([]string, len(roles))
	for i, r := range roles {
		nameW = max(nameW, len(r.Name))
		texts[i] = phaseKey(r)
		if r.State == snapshot.StateFailed {
			texts[i] = r.State // the reason goes at the end of the line
		}
		stateW = max(stateW, ansi.StringWidth(texts[i]))
	}
	out := make([]string, len(roles))
	for i, r := range roles {
		mark := "⠿"
		switch r.State {
		case snapshot.StateReady:
			mark = "✔"
		case snapshot.StateFailed:
			mark = "✘"
		case snapshot.StateStopped:
			mark = "-"
		}
		bar := strings.Repeat(" ", progressBarWidth+6)
		if p := r.Progress; p != nil && r.State != snapshot.StateReady {
			n := max(0, min(int(p.Frac*progressBarWidth+0.5), progressBarWidth))
			text := p.Text
			if text == "" {
				text = fmt.Sprintf("%d%%", int(p.Frac*100+0.5))
			}
			bar = fmt.Sprintf("%s%s %-5s", strings.Repeat("█", n), strings.Repeat("░", progressBarWidth-n), text)
		}
		line := fmt.Sprintf("%s %-*s  %-*s  %s %6s", mark, nameW, r.Name, stateW, texts[i], bar, clock[r.Name].took(now))
		if r.State == snapshot.StateFailed && r.Reason != "" {
			line += "  " + r.Reason
		}
		out[i] = strings.TrimRight(line, " ")
	}
	return out
}

// drainHead is a stop's drain line while the gateway drains: "draining: 3
// requests in flight, 27s left"; its key changes with the count.
func drainHead(s snapshot.Snapshot, now time.Time) (text, key string) {
	st := s.Stopping
	if st == nil || st.Phase != snapshot.StopDraining {
		return "", ""
	}
	left := max(st.Deadline.Sub(now), 0).Round(time.Second)
	inflight := fmt.Sprintf("%d requests", st.InFlight)
	if st.InFlight == 1 {
		inflight = "1 request"
	}
	return fmt.Sprintf("draining: %s in flight, %s left", inflight, supervisor.HumanDuration(left)), fmt.Sprint(st.InFlight)
}

package tui

import (
	"fmt"
	"strings"
	"time"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

// Common is what every page shares: the window size it was given, the
// styles, the one keymap and the clock (soft-serve's component contract).
type Common struct {
	Width, Height int
	Styles        Styles
	Keys          KeyMap
	Now           func() time.Time
}

// Styles are the dashboard's colours. Every styled word is also readable
// without colour: state words are always printed, colour only adds to them.
type Styles struct {
	Title     lipgloss.Style
	Header    lipgloss.Style // table headings
	Selected  lipgloss.Style // the selected row
	Faint     lipgloss.Style
	Good      lipgloss.Style
	Busy      lipgloss.Style
	Bad       lipgloss.Style
	Warn      lipgloss.Style
	Match     lipgloss.Style // a find match in the logs
	CurMatch  lipgloss.Style // the current find match
	Prompt    lipgloss.Style // confirm questions and input lines
	HelpKey   lipgloss.Style
	HelpDesc  lipgloss.Style
	BarFilled lipgloss.Style
	BarEmpty  lipgloss.Style
}

// DefaultStyles uses the 16 basic ANSI colours so the terminal's theme
// decides the exact shades.
func DefaultStyles() Styles {
	s := lipgloss.NewStyle()
	return Styles{
		Title:     s.Bold(true),
		Header:    s.Bold(true),
		Selected:  s.Reverse(true),
		Faint:     s.Faint(true),
		Good:      s.Foreground(lipgloss.Green),
		Busy:      s.Foreground(lipgloss.Yellow),
		Bad:       s.Foreground(lipgloss.Red).Bold(true),
		Warn:      s.Foreground(lipgloss.Magenta),
		Match:     s.Reverse(true),
		CurMatch:  s.Reverse(true).Bold(true).Underline(true),
		Prompt:    s.Bold(true).Foreground(lipgloss.Yellow),
		HelpKey:   s.Bold(true),
		HelpDesc:  s.Faint(true),
		BarFilled: s.Foreground(lipgloss.Cyan),
		BarEmpty:  s.Faint(true),
	}
}

// stateStyle picks the colour for a role or rank state word.
func (s Styles) stateStyle(state string) lipgloss.Style {
	switch state {
	case snapshot.StateReady, snapshot.RankRegistered:
		return s.Good
	case snapshot.StateStarting, snapshot.StateHandshaking, snapshot.StateDraining, snapshot.StateStopping,
		snapshot.StateBackoff, snapshot.RankHello, snapshot.RankInitSent, snapshot.RankWaiting:
		return s.Busy
	case snapshot.StateCrashed, snapshot.StateFailed, snapshot.StateStalled, snapshot.RankDisconnected:
		return s.Bad
	case snapshot.StateRemote:
		return s.Warn
	}
	return s.Faint
}

// running reports whether a role's process is (or is about to be) alive,
// i.e. whether quitting would stop something.
func running(state string) bool {
	switch state {
	case snapshot.StateStopped, snapshot.StateFailed, snapshot.StatePlanned, snapshot.StateRemote, "":
		return false
	}
	return true
}

// alive reports whether a role's process exists now: running, and not
// between a death and the next try.
func alive(state string) bool {
	return running(state) && state != snapshot.StateBackoff && state != snapshot.StateCrashed
}

// serving reports whether a role may be serving requests now: its rates
// and latencies mean something. A remote role serves while it is routed.
func serving(state string) bool {
	return alive(state) || state == snapshot.StateRemote
}

// fit truncates s to w cells and pads it with spaces to exactly w cells.
func fit(s string, w int) string {
	if w <= 0 {
		return ""
	}
	sw := width(s)
	if sw > w {
		s = ansi.Truncate(s, w, "…")
		sw = width(s)
	}
	if sw < w {
		s += strings.Repeat(" ", w-sw)
	}
	return s
}

// cutLine cuts s to w cells with "…" when it is longer (unpadded).
func cutLine(s string, w int) string {
	if len(s) > w && width(s) > w {
		return ansi.Truncate(s, w, "…")
	}
	return s
}

// fitRight is fit with the text aligned right.
func fitRight(s string, w int) string {
	if w <= 0 {
		return ""
	}
	sw := width(s)
	if sw > w {
		return ansi.Truncate(s, w, "…")
	}
	return strings.Repeat(" ", w-sw) + s
}

// scrolled is a page of lines on a w×h screen (screen), scrolled to
// *offset when they are taller than the window: then the last row says,
// faint, which lines show and how to scroll (keys: "↑/↓ pgup/pgdn"), and
// *offset is kept where a screenful still shows (0 when all fit).
func scrolled(lines []string, offset *int, w, h int, faint lipgloss.Style, keys string) string {
	if len(lines) <= h {
		*offset = 0
		return screen(lines, w, h)
	}
	*offset = max(0, min(*offset, len(lines)-h+1))
	shown := append([]string{}, lines[*offset:min(*offset+h-1, len(lines))]...)
	more := fmt.Sprintf("lines %d-%d of %d · %s scroll", *offset+1, *offset+len(shown), len(lines), keys)
	return screen(append(shown, faint.Render(more)), w, h)
}

// screen assembles exactly h lines of at most w cells each, so a page never
// scrolls the terminal or leaves stale text behind.
func screen(lines []string, w, h int) string {
	var b strings.Builder
	for i := 0; i < h; i++ {
		if i > 0 {
			b.WriteByte('\n')
		}
		if i < len(lines) {
			l := lines[i]
			// Bytes never count fewer than cells: short lines skip the count.
			if len(l) > w && width(l) > w {
				l = ansi.Truncate(l, w, "")
			}
			b.WriteString(l)
		}
	}
	return b.String()
}

// humanBytes prints sizes in binary units, the way nvidia-smi and top do.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return itoa(int(n)) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v := float64(n) / unit
	i := 0
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	if v >= 100 {
		return ftoa(v, 0) + " " + units[i]
	}
	return ftoa(v, 1) + " " + units[i]
}

// humanDuration prints an uptime or a time left to the second, in the one
// duration style of every view (snapshot.FormatDuration): "42s", "3m7s",
// "2h5m", "3d4h".
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return snapshot.FormatDuration(d.Truncate(time.Second))
}

// wrapParts joins parts with sep into lines of at most w cells, starting a
// new line (after indent) instead of cutting a part in two.
func wrapParts(first, indent string, parts []string, sep string, w int) []string {
	var lines []string
	cur := first
	curW := ansi.StringWidth(first)
	sepW := ansi.StringWidth(sep)
	empty := true
	for _, part := range parts {
		pw := ansi.StringWidth(part)
		if !empty && curW+sepW+pw > w {
			lines = append(lines, cur)
			cur, curW, empty = indent, ansi.StringWidth(indent), true
		}
		if !empty {
			cur += sep
			curW += sepW
		}
		cur += part
		curW += pw
		empty = false
	}
	return append(lines, cur)
}

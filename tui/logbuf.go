package tui

import (
	"regexp"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

// logEntry is one line as the log page shows it: escapes stripped and
// tabs expanded once, at ingestion, so rendering never redoes it.
type logEntry struct {
	time  time.Time
	role  string
	text  string
	note  bool
	level logLevel
	width int // display cells of text
}

// logBuf is the log page's bounded view buffer: a ring addressed by
// absolute line numbers, plus the ascending list of line numbers that pass
// the filter, kept up to date as lines arrive and fall out.
type logBuf struct {
	max   int
	ring  []logEntry
	start int    // ring index of the oldest line
	n     int    // lines held
	first uint64 // absolute number of the oldest line held

	filter  *regexp.Regexp
	inverse bool
	idx     []uint64 // absolute numbers passing the filter; idx[head:] are live
	head    int
}

func newLogBuf(max int) *logBuf {
	if max < 1 {
		max = 1
	}
	return &logBuf{max: max}
}

// end is one past the newest absolute line number.
func (b *logBuf) end() uint64 { return b.first + uint64(b.n) }

func (b *logBuf) entry(abs uint64) *logEntry {
	return &b.ring[(b.start+int(abs-b.first))%len(b.ring)]
}

func (b *logBuf) add(l snapshot.LogLine) {
	e := logEntry{time: l.Time, role: l.Role, text: sanitize(l.Text), note: l.Note}
	e.width = textWidth(e.text)
	e.level = lineLevel(e.text)
	if e.note && e.level == levelNone {
		e.level = noteLevel(e.text)
	}
	if b.n == b.max {
		b.start = (b.start + 1) % len(b.ring)
		b.first++
		b.n--
		b.trimIdx()
	}
	abs := b.end()
	if len(b.ring) < b.max && b.n == len(b.ring) {
		b.ring = append(b.ring, e)
	} else {
		b.ring[(b.start+b.n)%len(b.ring)] = e
	}
	b.n++
	if b.filter != nil && b.pass(&e) {
		b.idx = append(b.idx, abs)
	}
}

func (b *logBuf) trimIdx() {
	for b.head < len(b.idx) && b.idx[b.head] < b.first {
		b.head++
	}
	if b.head > 1024 && b.head*2 > len(b.idx) {
		b.idx = append(b.idx[:0], b.idx[b.head:]...)
		b.head = 0
	}
}

func (b *logBuf) pass(e *logEntry) bool {
	return b.filter.MatchString(e.text) != b.inverse
}

// setFilter replaces the filter (nil: none) and rebuilds the index once.
func (b *logBuf) setFilter(re *regexp.Regexp, inverse bool) {
	b.filter, b.inverse = re, inverse
	b.idx, b.head = b.idx[:0], 0
	if re == nil {
		b.idx = nil
		return
	}
	for a := b.first; a < b.end(); a++ {
		if b.pass(b.entry(a)) {
			b.idx = append(b.idx, a)
		}
	}
}

func (b *logBuf) reset() {
	b.ring, b.start, b.n, b.first = b.ring[:0], 0, 0, 0
	b.idx, b.head = b.idx[:0], 0
}

// The view is what the page scrolls through: every line, or only those
// passing the filter. Positions are 0..viewLen()-1.
func (b *logBuf) viewLen() int {
	if b.filter != nil {
		return len(b.idx) - b.head
	}
	return b.n
}

func (b *logBuf) viewAt(i int) uint64 {
	if b.filter != nil {
		return b.idx[b.head+i]
	}
	return b.first + uint64(i)
}

// viewIndex is the position of the first viewed line numbered >= abs.
func (b *logBuf) viewIndex(abs uint64) int {
	if b.filter == nil {
		if abs < b.first {
			return 0
		}
		return int(min(abs, b.end()) - b.first)
	}
	live := b.idx[b.head:]
	lo, hi := 0, len(live)
	for lo < hi {
		m := (lo + hi) / 2
		if live[m] < abs {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// sanitize makes a captured line safe to place on screen: engine loggers
// colour their output, and a stray escape or carriage return would move
// the cursor and corrupt the dashboard.
func sanitize(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	if strings.IndexByte(s, 0x1b) >= 0 {
		s = ansi.Strip(s)
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	col := 0
	for _, r := range s {
		switch {
		case r == '\t':
			n := 4 - col%4
			b.WriteString("    "[:n])
			col += n
		case r < 0x20 || r == 0x7f:
			// dropped: \r, bells, other controls
		default:
			b.WriteRune(r)
			col++
		}
	}
	return b.String()
}

// textWidth is the display width, with a fast path for ASCII.
func textWidth(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return ansi.StringWidth(s)
		}
	}
	return len(s)
}

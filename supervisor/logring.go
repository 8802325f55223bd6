package supervisor

import (
	"sync"

	"github.com/tsd-project/tsd/snapshot"
)

// LogLine is one line of a role's output (or a note tsd added to it); the
// same type the dashboard consumes.
type LogLine = snapshot.LogLine

// Default log capture bounds.
const (
	DefaultLogLines = 10000
	DefaultLogBytes = 32 << 20
	MaxLineBytes    = 64 << 10 // longer lines are split, never fatal
)

// logRing is one role's bounded in-memory log. The pipe reader appends and
// never waits: subscribers are only poked through buffered channels and
// pull what they missed themselves (k9s's model, docs/architecture.md §S3).
type logRing struct {
	// name says what the ring's lines are written as now: the gateway's
	// log source its fixed name, an instance its name in the roster (a
	// rename changes only the roster; lines already written keep the
	// name they were written under).
	name     func() string
	maxLines int
	maxBytes int

	mu    sync.Mutex
	buf   []LogLine // circular, len == maxLines once grown
	start int       // index of the oldest line
	n     int
	bytes int
	next  uint64 // Seq of the next line appended
	subs  map[chan struct{}]struct{}
}

func newLogRing(role string, maxLines, maxBytes int) *logRing {
	return newNamedRing(func() string { return role }, maxLines, maxBytes)
}

// newNamedRing is a ring whose lines carry what name says when written.
func newNamedRing(name func() string, maxLines, maxBytes int) *logRing {
	if maxLines <= 0 {
		maxLines = DefaultLogLines
	}
	if maxBytes <= 0 {
		maxBytes = DefaultLogBytes
	}
	return &logRing{name: name, maxLines: maxLines, maxBytes: maxBytes, next: 1, subs: map[chan struct{}]struct{}{}}
}

// append adds lines (their Seq and Role are set here) and pokes subscribers.
func (r *logRing) append(lines []LogLine) {
	if len(lines) == 0 {
		return
	}
	role := r.name()
	r.mu.Lock()
	for _, l := range lines {
		l.Seq = r.next
		l.Role = role
		r.next++
		if r.n == len(r.buf) && len(r.buf) < r.maxLines {
			if r.start != 0 { // keep the slice in order before growing it
				nb := make([]LogLine, 0, len(r.buf)*2)
				nb = append(nb, r.buf[r.start:]...)
				r.buf = append(nb, r.buf[:r.start]...)
				r.start = 0
			}
			r.buf = append(r.buf, l)
			r.n++
		} else if r.n < len(r.buf) {
			r.buf[(r.start+r.n)%len(r.buf)] = l
			r.n++
		} else {
			r.bytes -= len(r.buf[r.start].Text)
			r.buf[r.start] = l
			r.start = (r.start + 1) % len(r.buf)
		}
		r.bytes += len(l.Text)
		for r.bytes > r.maxBytes && r.n > 1 {
			r.bytes -= len(r.buf[r.start].Text)
			r.buf[r.start] = LogLine{}
			r.start = (r.start + 1) % len(r.buf)
			r.n--
		}
	}
	for ch := range r.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
}

// since returns up to max lines with Seq ≥ seq, the Seq to ask for next, and
// how many lines between seq and the first returned fell out of the ring.
func (r *logRing) since(seq uint64, max int) (lines []LogLine, next uint64, dropped uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return nil, r.next, 0
	}
	oldest := r.buf[r.start].Seq
	if seq < oldest {
		if seq > 0 {
			dropped = oldest - seq
		}
		seq = oldest
	}
	if seq >= r.next {
		return nil, r.next, dropped
	}
	k := int(r.next - seq)
	if max > 0 && k > max {
		k = max
	}
	lines = make([]LogLine, k)
	off := int(seq - oldest)
	for i := 0; i < k; i++ {
		lines[i] = r.buf[(r.start+off+i)%len(r.buf)]
	}
	return lines, seq + uint64(k), dropped
}

// all copies the whole ring, oldest first.
func (r *logRing) all() []LogLine {
	l, _, _ := r.since(0, 0)
	return l
}

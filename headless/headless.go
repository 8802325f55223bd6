// Package headless is the plain-text view of a running deployment: what
// `tsd up --headless` prints, and what a daemon writes to its output
// file. Every role's log lines carry the role's name as a prefix, with
// tsd's own notes and the deployment-wide events beside them, one whole
// line at a time. Colour only on a terminal; elsewhere the engines' own
// escapes are stripped too. Like the dashboard it renders what the
// supervisor streams and owns nothing else (docs/architecture.md §1).
package headless

import (
	"bufio"
	"fmt"
	"io"
	"sync"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

// Source is what the printer reads of a deployment (a
// *supervisor.Supervisor).
type Source interface {
	// Roles are the role instances, in the plan's order (their colours).
	Roles() []string
	// SubscribeLogs("") is every role's ring, then new lines in batches.
	SubscribeLogs(role string) (backlog []supervisor.LogLine, batches <-chan []supervisor.LogLine, cancel func(), err error)
	// Subscribe's updates close when the deployment's run is over.
	Subscribe() (current snapshot.Snapshot, updates <-chan snapshot.Snapshot, cancel func())
	// Logs is one role's whole ring: the lines no batch carried yet are
	// printed from it at the end.
	Logs(role string) ([]supervisor.LogLine, error)
}

// Options shape the output.
type Options struct {
	// Colour paints each role's prefix its own colour and tsd's lines
	// bold (a terminal); false strips the engines' escapes instead.
	Colour bool
	// NotesOnly prints tsd's own lines and the events alone: a daemon's
	// output file lives as long as the deployment (days), and the
	// engines' lines are in their own rotated log files.
	NotesOnly bool
}

// Printer writes a deployment's lines to one writer. Event may be called
// before Follow; the lines are written by Follow's goroutine.
type Printer struct {
	opts   Options
	events chan snapshot.Event

	mu      sync.Mutex // the writer and the state below
	w       *bufio.Writer
	width   int
	printed map[string]uint64 // last Seq printed per role
}

var roleColours = []string{"36", "33", "35", "32", "34", "91", "96", "93"}

// New returns a Printer writing to w.
func New(w io.Writer, opts Options) *Printer {
	return &Printer{opts: opts, w: bufio.NewWriterSize(w, 64<<10), events: make(chan snapshot.Event, 1024), printed: map[string]uint64{}}
}

// Event hears the supervisor's events (its OnEvent). It runs on the
// supervisor's publisher goroutine, so it never blocks: an event the
// printer cannot take now is dropped. A role's state changes also come
// as notes in the role's log, in order with its output, so only
// deployment-wide events are printed from here.
func (p *Printer) Event(e snapshot.Event) {
	if e.Role != "" {
		return
	}
	select {
	case p.events <- e:
	default:
	}
}

// Follow prints every role's lines and the events until src's run is
// over (its snapshot updates close), then the events and the lines still
// in the rings that no batch carried yet; the returned channel closes
// then.
func (p *Printer) Follow(src Source) <-chan struct{} {
	idx := map[string]int{}
	p.mu.Lock()
	for i, r := range src.Roles() {
		idx[r] = i
		p.width = max(p.width, len(r))
	}
	p.width = max(p.width, len("tsd"))
	p.mu.Unlock()
	done := make(chan struct{})
	backlog, batches, cancelLogs, err := src.SubscribeLogs("")
	if err != nil {
		close(done)
		return done
	}
	_, snaps, cancelSnaps := src.Subscribe()
	go func() {
		defer close(done)
		defer cancelLogs()
		defer cancelSnaps()
		p.lines(backlog, idx)
		for {
			select {
			case b := <-batches:
				p.lines(b, idx)
			case e := <-p.events:
				p.printEvent(e, idx)
			case _, ok := <-snaps:
				if !ok {
					p.finish(src, idx)
					return
				}
			}
		}
	}()
	return done
}

// finish prints what is left once the run is over: the queued events,
// then each role's lines that no batch carried.
func (p *Printer) finish(src Source, idx map[string]int) {
	for drained := false; !drained; {
		select {
		case e := <-p.events:
			p.printEvent(e, idx)
		default:
			drained = true
		}
	}
	for _, r := range src.Roles() {
		all, _ := src.Logs(r)
		p.mu.Lock()
		last := p.printed[r]
		p.mu.Unlock()
		var rest []supervisor.LogLine
		for _, l := range all {
			if l.Seq > last {
				rest = append(rest, l)
			}
		}
		p.lines(rest, idx)
	}
}

func (p *Printer) prefix(role string, idx int) string {
	s := fmt.Sprintf("%-*s | ", p.width, role)
	if p.opts.Colour && idx >= 0 {
		return "\x1b[" + roleColours[idx%len(roleColours)] + "m" + s + "\x1b[0m"
	}
	return s
}

func (p *Printer) lines(ls []supervisor.LogLine, idx map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range ls {
		i, ok := idx[l.Role]
		if !ok {
			i = -1
		}
		if l.Seq > p.printed[l.Role] {
			p.printed[l.Role] = l.Seq
		}
		if p.opts.NotesOnly && !l.Note {
			continue
		}
		text := l.Text
		switch {
		case !p.opts.Colour:
			text = supervisor.StripANSI(text)
		case l.Note:
			text = "\x1b[1m" + text + "\x1b[0m" // tsd's own lines stand out
		}
		p.w.WriteString(p.prefix(l.Role, i))
		p.w.WriteString(text)
		p.w.WriteByte('\n')
	}
	p.w.Flush()
}

func (p *Printer) printEvent(e snapshot.Event, idx map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	role := e.Role
	if role == "" {
		role = "tsd"
	}
	i, ok := idx[e.Role]
	if !ok {
		i = -1
	}
	msg := "== " + e.Message
	if p.opts.Colour {
		msg = "\x1b[1m" + msg + "\x1b[0m"
	}
	p.w.WriteString(p.prefix(role, i))
	p.w.WriteString(msg)
	p.w.WriteByte('\n')
	p.w.Flush()
}

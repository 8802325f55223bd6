package front

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/internal/freelist"
)

// sseWriteTimeout bounds writing one event: a client that stops reading
// must not hold a generation (and its engine slots) for ever.
const sseWriteTimeout = 30 * time.Second

// ssePendingMax bounds the events held for one flush: past it they are
// written through (still unflushed) rather than held.
const ssePendingMax = 32 << 10

// pendingBufs is a free list of the streams' pending buffers: a
// stream's buffer grows to its largest burst, and a fresh one per
// request was most of a streamed token's bytes allocated at high
// concurrency. What it can hold stays small: pendingBufsKept buffers of
// at most 2*ssePendingMax bytes (4 MiB).
var pendingBufs = freelist.New[[]byte](pendingBufsKept)

const pendingBufsKept = 64

// SSE writes server-sent events; only the handler goroutine touches it.
// Once a write fails it stays failed (Failed) and writes nothing more.
//
// Events written between two flushes are gathered in one buffer and go
// to the ResponseWriter in one Write at Flush: a burst of outputs that
// piled up while the writer was busy costs one Write and one Flush, with
// the same bytes as one Write each.
type SSE struct {
	w       http.ResponseWriter
	f       http.Flusher
	rc      *http.ResponseController
	started bool
	failed  bool
	buf     []byte
	pending []byte // framed events not yet handed to w; nil until the first Write and after the end
	dl      writeDeadline
}

// NewSSE prepares an event stream on w; nothing is sent until the first event.
func NewSSE(w http.ResponseWriter) *SSE {
	f, _ := w.(http.Flusher)
	s := &SSE{w: w, f: f, rc: http.NewResponseController(w), started: Started(w)}
	s.dl.timeout = sseWriteTimeout
	return s
}

// Start sends the headers (200, text/event-stream) if not yet sent.
func (s *SSE) Start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	s.w.WriteHeader(http.StatusOK)
}

// Started reports whether the stream's headers are out.
func (s *SSE) Started() bool { return s.started }

// Failed reports a write that failed (the client is gone).
func (s *SSE) Failed() bool { return s.failed }

// Send writes v as one data event; false when the client is gone.
func (s *SSE) Send(v any) bool {
	data, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return s.Raw(data)
}

// Raw writes data (one JSON document) as one data event.
func (s *SSE) Raw(data []byte) bool { return s.Event("", data) }

// Event writes data as one event named name (the Responses stream names
// each event by its type; chat streams send unnamed data events only)
// and flushes.
func (s *SSE) Event(name string, data []byte) bool {
	if !s.WriteEvent(name, data) {
		return false
	}
	s.Flush()
	return !s.failed
}

// WriteEvent is Event without the flush.
func (s *SSE) WriteEvent(name string, data []byte) bool {
	if s.failed {
		return false
	}
	s.buf = s.buf[:0]
	if name != "" {
		s.buf = append(append(append(s.buf, "event: "...), name...), '\n')
	}
	s.buf = append(append(append(s.buf, "data: "...), data...), '\n', '\n')
	return s.Write(s.buf)
}

// Write adds one event already framed ("data: ...\n\n", e.g. from an
// allocation-free chunk encoder) without flushing: a burst of events
// ready at once costs one write and one flush (Flush), not one each.
// The bytes are copied: the caller may reuse event at once. Every Write
// must be followed by a Flush (Event, Done and Fail flush).
func (s *SSE) Write(event []byte) bool {
	if s.failed {
		return false
	}
	s.Start()
	if s.pending == nil {
		var ok bool
		if s.pending, ok = pendingBufs.Get(); !ok {
			s.pending = make([]byte, 0, 4<<10)
		}
	}
	s.pending = append(s.pending, event...)
	if len(s.pending) >= ssePendingMax {
		return s.drain()
	}
	return true
}

// drain hands the pending events to w in one Write.
func (s *SSE) drain() bool {
	if len(s.pending) == 0 {
		return !s.failed
	}
	if s.dl.due() {
		_ = s.rc.SetWriteDeadline(s.dl.next(time.Now()))
	}
	_, err := s.w.Write(s.pending)
	s.pending = s.pending[:0]
	if err != nil {
		s.fail()
		return false
	}
	return true
}

func (s *SSE) fail() {
	s.failed = true
	s.end()
}

// end releases what the stream held: the renewal timer, the pending
// buffer (nothing is pending: the last Flush wrote it, or the stream
// failed).
func (s *SSE) end() {
	s.dl.stop()
	if s.pending != nil {
		if cap(s.pending) <= 2*ssePendingMax {
			pendingBufs.Put(s.pending[:0])
		}
		s.pending = nil
	}
}

// Flush pushes what Write left pending to the client.
func (s *SSE) Flush() {
	if s.failed || !s.started {
		return
	}
	if !s.drain() {
		return
	}
	if s.f != nil {
		s.f.Flush()
	}
}

// Fail ends a stream on an error: a plain error response while nothing
// was sent yet, else an error event (the one error shape) after the
// events already out.
func (s *SSE) Fail(e *Error) {
	if !s.started {
		// Started stays false: the answer is an error response, no stream.
		WriteError(s.w, e)
		s.fail()
		return
	}
	s.Send(e.JSON())
	s.end()
}

// Done writes the closing data: [DONE].
func (s *SSE) Done() {
	s.Raw([]byte("[DONE]"))
	s.end()
}

// writeDeadline keeps a stream's connection write deadline ahead of its
// writes without reading the clock and re-arming the connection's timer
// on every write (per token, time.Now and SetWriteDeadline were ~7 % of
// a streamed token's CPU). The deadline is set slack (a quarter of the
// timeout) longer than the timeout, and a timer marks it due for renewal
// once that slack has passed: a write then finds at least the timeout
// ahead of it (at most five quarters), as when it was set per write, and
// the clock is read about four times per timeout, not per token.
type writeDeadline struct {
	timeout time.Duration
	stale   atomic.Bool // the slack has passed since the deadline was set
	timer   *time.Timer // nil until the first write
}

// due reports whether the deadline must be (re)set before a write.
func (d *writeDeadline) due() bool { return d.timer == nil || d.stale.Load() }

// next is the deadline to set at now; it arms the renewal.
func (d *writeDeadline) next(now time.Time) time.Time {
	slack := d.timeout / 4
	d.stale.Store(false)
	if d.timer == nil {
		d.timer = time.AfterFunc(slack, func() { d.stale.Store(true) })
	} else {
		d.timer.Reset(slack)
	}
	return now.Add(d.timeout + slack)
}

// stop ends the renewals (the stream is over).
func (d *writeDeadline) stop() {
	if d.timer != nil {
		d.timer.Stop()
	}
}

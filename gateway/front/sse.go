package front

import (
	"encoding/json"
	"net/http"
	"time"
)

// sseWriteTimeout bounds writing one event: a client that stops reading
// must not hold a generation (and its engine slots) for ever.
const sseWriteTimeout = 30 * time.Second

// ssePendingMax bounds the events held for one flush: past it they are
// written through (still unflushed) rather than held.
const ssePendingMax = 32 << 10

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
	pending []byte // framed events not yet handed to w
}

// NewSSE prepares an event stream on w; nothing is sent until the first event.
func NewSSE(w http.ResponseWriter) *SSE {
	f, _ := w.(http.Flusher)
	return &SSE{w: w, f: f, rc: http.NewResponseController(w), started: Started(w)}
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
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	_, err := s.w.Write(s.pending)
	s.pending = s.pending[:0]
	if err != nil {
		s.fail()
		return false
	}
	return true
}

func (s *SSE) fail() { s.failed = true }

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
}

// Done writes the closing data: [DONE].
func (s *SSE) Done() {
	s.Raw([]byte("[DONE]"))
}

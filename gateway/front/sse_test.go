package front

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// recWriter records what an SSE hands its ResponseWriter: each Write,
// each Flush and each write deadline.
type recWriter struct {
	h         http.Header
	status    int
	writes    [][]byte
	flushes   int
	deadlines []time.Time
	err       error // what Write returns, once set
}

func (w *recWriter) Header() http.Header { return w.h }
func (w *recWriter) WriteHeader(s int)   { w.status = s }
func (w *recWriter) Write(b []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.writes = append(w.writes, append([]byte(nil), b...))
	return len(b), nil
}
func (w *recWriter) Flush() { w.flushes++ }
func (w *recWriter) SetWriteDeadline(t time.Time) error {
	w.deadlines = append(w.deadlines, t)
	return nil
}

func newRecWriter() *recWriter { return &recWriter{h: http.Header{}} }

// Events written between two flushes reach the ResponseWriter as one
// Write of exactly their bytes, then one Flush; Event, Raw and Done frame
// as before and flush.
func TestSSEFoldsPendingEvents(t *testing.T) {
	t.Parallel()
	w := newRecWriter()
	s := NewSSE(w)
	buf := []byte("data: {\"a\":1}\n\n")
	s.Write(buf)
	copy(buf, "XXXXXXXXXX") // the writer copied: the caller may reuse its buffer
	s.Write([]byte("data: {\"b\":2}\n\n"))
	s.WriteEvent("named", []byte(`{"c":3}`))
	if len(w.writes) != 0 || w.flushes != 0 {
		t.Fatalf("before Flush: %d writes, %d flushes, want none", len(w.writes), w.flushes)
	}
	if w.status != http.StatusOK || !strings.HasPrefix(w.h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("headers: status %d, content type %q", w.status, w.h.Get("Content-Type"))
	}
	s.Flush()
	want := "data: {\"a\":1}\n\ndata: {\"b\":2}\n\nevent: named\ndata: {\"c\":3}\n\n"
	if len(w.writes) != 1 || string(w.writes[0]) != want || w.flushes != 1 {
		t.Fatalf("flush: writes %q, %d flushes; want one write %q and one flush", w.writes, w.flushes, want)
	}
	s.Flush() // nothing pending: no empty Write
	if len(w.writes) != 1 || w.flushes != 2 {
		t.Fatalf("empty flush: %d writes, %d flushes", len(w.writes), w.flushes)
	}
	s.Write([]byte("data: {\"d\":4}\n\n"))
	s.Done()
	if got := string(w.writes[1]); got != "data: {\"d\":4}\n\ndata: [DONE]\n\n" || w.flushes != 3 {
		t.Fatalf("Done: write %q, %d flushes", got, w.flushes)
	}
}

// Pending events past the bound are written through, unflushed.
func TestSSEPendingBounded(t *testing.T) {
	t.Parallel()
	w := newRecWriter()
	s := NewSSE(w)
	ev := append(append([]byte("data: "), bytes.Repeat([]byte("x"), 1000)...), "\n\n"...)
	var total int
	for total < 2*ssePendingMax {
		s.Write(ev)
		total += len(ev)
	}
	if len(w.writes) == 0 || w.flushes != 0 {
		t.Fatalf("%d bytes pending: %d writes, %d flushes; want writes through, no flush", total, len(w.writes), w.flushes)
	}
	s.Flush()
	var got int
	for _, b := range w.writes {
		got += len(b)
	}
	if got != total {
		t.Fatalf("wrote %d bytes, want %d", got, total)
	}
}

// A write that fails at Flush leaves the stream failed: nothing more is
// written and Write reports it.
func TestSSEFailsAtFlush(t *testing.T) {
	t.Parallel()
	w := newRecWriter()
	s := NewSSE(w)
	w.err = fmt.Errorf("broken pipe")
	if !s.Write([]byte("data: 1\n\n")) {
		t.Fatal("a pending write failed before any I/O")
	}
	s.Flush()
	if !s.Failed() || w.flushes != 0 {
		t.Fatalf("failed %v, %d flushes", s.Failed(), w.flushes)
	}
	if s.Write([]byte("data: 2\n\n")) || s.Raw([]byte("3")) {
		t.Fatal("wrote after the failure")
	}
}

// The write deadline is set before the first write, at least the
// timeout ahead, and not again until its renewal is due; then again at
// least the timeout ahead of that write.
func TestSSEWriteDeadlineRenewal(t *testing.T) {
	t.Parallel()
	w := newRecWriter()
	s := NewSSE(w)
	before := time.Now()
	for range 100 {
		s.Write([]byte("data: {}\n\n"))
		s.Flush()
	}
	if len(w.deadlines) != 1 {
		t.Fatalf("%d deadlines over 100 flushes, want 1", len(w.deadlines))
	}
	if d := w.deadlines[0]; d.Before(before.Add(sseWriteTimeout)) || d.After(time.Now().Add(sseWriteTimeout*5/4)) {
		t.Fatalf("deadline %v after %v: want between the timeout and 5/4 of it ahead", d.Sub(before), sseWriteTimeout)
	}
	s.dl.stale.Store(true) // what the renewal timer does a quarter of the timeout later
	at := time.Now()
	s.Write([]byte("data: {}\n\n"))
	s.Flush()
	s.Flush()
	if len(w.deadlines) != 2 || w.deadlines[1].Before(at.Add(sseWriteTimeout)) {
		t.Fatalf("renewal: deadlines %v, want a second one at least %v after %v", w.deadlines, sseWriteTimeout, at)
	}
	if s.dl.stale.Load() {
		t.Fatal("renewal left the deadline due")
	}
	s.Done()
	if s.dl.timer.Stop() {
		t.Fatal("Done left the renewal timer running")
	}
}

// The renewal table: when a write must set the deadline first.
func TestWriteDeadlineDue(t *testing.T) {
	t.Parallel()
	var d writeDeadline
	d.timeout = time.Hour
	if !d.due() {
		t.Fatal("a stream's first write does not set a deadline")
	}
	now := time.Now()
	if got := d.next(now); !got.Equal(now.Add(time.Hour + 15*time.Minute)) {
		t.Fatalf("next = %v, want now + 5/4 of the timeout", got.Sub(now))
	}
	if d.due() {
		t.Fatal("due right after being set")
	}
	d.stale.Store(true)
	if !d.due() {
		t.Fatal("not due after the slack passed")
	}
	d.stop()
}

// Slow-client protection: a client that stops reading is cut off once
// its socket buffers are full and the write deadline passes, and the
// handler learns it (Failed), so its generation can end.
func TestSSESlowClientCutOff(t *testing.T) {
	t.Parallel()
	failed := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := NewSSE(w)
		s.dl.timeout = 200 * time.Millisecond
		ev := append(append([]byte("data: \""), bytes.Repeat([]byte("x"), 16<<10)...), "\"\n\n"...)
		n := 0
		for !s.Failed() {
			s.Write(ev)
			s.Flush()
			n++
		}
		failed <- n
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("response %v: %v", resp, err)
	}
	// Read nothing more: the server's writes fill the socket and block.
	select {
	case n := <-failed:
		if n == 0 {
			t.Fatal("failed before writing anything")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a client that stopped reading was not cut off")
	}
}

// A stream's pending buffer, grown by a burst, goes to the next stream
// once the first is done, and carries nothing of it over: the second
// writes exactly its own events. Not parallel: the free list is emptied
// first so that the first stream's buffer is the one taken.
func TestSSEPendingBufferReused(t *testing.T) {
	for {
		if _, ok := pendingBufs.Get(); !ok {
			break
		}
	}
	event := []byte("data: " + strings.Repeat("x", 92) + "\n\n")
	first := NewSSE(newRecWriter())
	for range 100 {
		first.Write(event)
	}
	first.Flush()
	grown := cap(first.pending)
	first.Done()
	kept, ok := pendingBufs.Get()
	if _, more := pendingBufs.Get(); grown < 100*len(event) || !ok || more || cap(kept) != grown {
		t.Fatalf("after a burst: capacity %d; a buffer kept %v (of %d bytes), a second %v; want ≥ %d, kept alone", grown, ok, cap(kept), more, 100*len(event))
	}
	pendingBufs.Put(kept) // for the next stream to take
	w := newRecWriter()
	second := NewSSE(w)
	second.Write([]byte("data: {\"n\":2}\n\n"))
	if cap(second.pending) != grown {
		t.Fatalf("the next stream's buffer holds %d bytes, want the grown %d", cap(second.pending), grown)
	}
	second.Done()
	if got := string(bytes.Join(w.writes, nil)); got != "data: {\"n\":2}\n\ndata: [DONE]\n\n" {
		t.Fatalf("the next stream wrote %q", got)
	}
}

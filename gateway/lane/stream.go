package lane

import (
	"context"
	"io"
	"sync"

	"github.com/tsd-project/tsd/internal/freelist"
)

// Stream is one request leg on one engine rank: the outputs of its rid,
// in order, ending with a terminal output or an error.
type Stream struct {
	w        *Worker
	RID      string
	Identity int

	mu    sync.Mutex
	items []Output
	head  int // next item to return
	err   error
	ended bool // terminal output queued, or failed
	wake  chan struct{}

	owed bool // counted in its rank's owed output; guarded by the stream table's mu
	// tokens is the stream's weight in its rank's in-flight tokens (Weigh);
	// guarded by the stream table's mu.
	tokens int
}

func newStream(w *Worker, rid string, identity int) *Stream {
	return &Stream{w: w, RID: rid, Identity: identity, wake: make(chan struct{}, 1)}
}

// Weigh counts n tokens in the stream's rank's in-flight tokens
// (RankLoad.InFlightTokens) until the stream ends: the load routing
// weighs (gateway/routing). A stream that already ended weighs nothing.
func (s *Stream) Weigh(n int) { s.w.streams.weigh(s, n) }

// Worker is the worker the stream runs on.
func (s *Stream) Worker() *Worker { return s.w }

func (s *Stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// outputQueues is a free list of drained streams' queues for new
// streams to take. A queue grows to its stream's largest backlog (the
// consumer behind the output reader), and growing a fresh one per stream
// was most of the bytes a streamed token allocated at high concurrency,
// in steps that grew with the stream's length (BenchmarkDecodePathChat,
// C=64). What it can hold stays small: outputQueuesKept queues of at
// most outputQueueMax outputs (~3.5 MB).
var outputQueues = freelist.New[[]Output](outputQueuesKept)

const (
	outputQueuesKept = 128
	outputQueueMax   = 128
)

// deliver queues an output; it never blocks the output reader.
func (s *Stream) deliver(o Output) {
	s.mu.Lock()
	if !s.ended {
		if s.items == nil {
			s.items, _ = outputQueues.Get()
		}
		s.items = append(s.items, o)
		s.ended = o.Finished != ""
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) fail(err error) {
	s.mu.Lock()
	if !s.ended {
		s.err = err
		s.ended = true
	}
	s.mu.Unlock()
	s.signal()
}

// Recv returns the next output. After the terminal output it returns
// io.EOF; a failed stream returns its error once queued outputs are read.
func (s *Stream) Recv(ctx context.Context) (Output, error) {
	for {
		o, ok, err := s.Poll()
		if ok {
			return o, err
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return Output{}, ctx.Err()
		}
	}
}

// takeLocked pops the oldest queued output. A head index instead of
// reslicing from the front: that shrinks the array's capacity, and the
// next deliver would allocate a new one (an allocation per token when the
// reader keeps up). Drained, the queue starts again at the front.
func (s *Stream) takeLocked() (Output, bool) {
	if s.head == len(s.items) {
		s.releaseLocked()
		return Output{}, false
	}
	o := s.items[s.head]
	s.items[s.head] = Output{}
	s.head++
	if s.head == len(s.items) {
		s.items, s.head = s.items[:0], 0
		s.releaseLocked()
	}
	return o, true
}

// releaseLocked gives the queue to outputQueues once the stream has
// ended and is drained: deliver queues nothing after the end, so nothing
// uses the array again. Every slot taken was cleared (takeLocked), so
// the free list holds no outputs' tokens.
func (s *Stream) releaseLocked() {
	if !s.ended || s.items == nil {
		return
	}
	if cap(s.items) <= outputQueueMax {
		outputQueues.Put(s.items[:0])
	}
	s.items = nil
}

// Abort ends the stream with err (ErrAborted when nil) and, if the engine
// still runs it, sends the engine an ABORT for its rid. Safe to call at any
// time and more than once.
func (s *Stream) Abort(err error) {
	if err == nil {
		err = ErrAborted
	}
	s.w.abort(s, err)
}

// Expect says the leg owes output from now on (a decode leg whose prefill
// finished); the rank's stall clock covers it. Idempotent; Submit's legs
// owe output from the start.
func (s *Stream) Expect() { s.w.streams.expect(s) }

// Done reports whether the stream ended (terminal output or failure).
func (s *Stream) Done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// Wake is signalled (at most one pending signal) whenever an output or
// the failure is queued, so an owner goroutine can select on its streams
// with everything else it waits for instead of running a reader
// goroutine per stream. After a signal, drain with Poll until it reports
// nothing; a signal may find nothing (already drained).
func (s *Stream) Wake() <-chan struct{} { return s.wake }

// Poll is Recv without waiting: ok is false when nothing is queued and the
// stream has not ended. Wake and Poll are for one consumer at a time,
// like Recv.
func (s *Stream) Poll() (o Output, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.takeLocked(); ok {
		return o, true, nil
	}
	if s.err != nil {
		return Output{}, true, s.err
	}
	if s.ended {
		return Output{}, true, io.EOF
	}
	return Output{}, false, nil
}

// Buffered reports whether an output is queued: Poll has one to return.
func (s *Stream) Buffered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head < len(s.items)
}

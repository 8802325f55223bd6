// Package freelist is a bounded free list: buffers and timers a hot path
// hands from one request to the next.
//
// A bounded channel, not a sync.Pool: a pool drops what it holds every
// other GC, and what was dropped is made again and grown anew, step by
// step, to what its requests need (the decode path's benchmark,
// gateway/bench_decodepath_test.go, counted those steps per token). The
// bound keeps what the list holds small; past it, Put leaves the value
// to the garbage collector.
package freelist

// List holds at most its capacity of values; safe for concurrent use.
type List[T any] struct{ c chan T }

// New is a list that keeps at most n values.
func New[T any](n int) *List[T] { return &List[T]{c: make(chan T, n)} }

// Get takes a kept value; ok is false when the list is empty.
func (l *List[T]) Get() (v T, ok bool) {
	select {
	case v = <-l.c:
		return v, true
	default:
		return v, false
	}
}

// Put keeps v, unless the list is full.
func (l *List[T]) Put(v T) {
	select {
	case l.c <- v:
	default:
	}
}

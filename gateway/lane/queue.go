package lane

import "sync"

// queue is an unbounded FIFO with a wake-up channel. Producers never
// block (a socket reader must not wait for a slow consumer); the single
// consumer takes everything queued at once, and the batch is its own
// until it takes again.
type queue[T any] struct {
	mu    sync.Mutex
	items []T
	// spare is the batch take returned last: the consumer is done with it
	// at its next take, which clears it and queues into it. Two arrays
	// passed back and forth, where a new one per batch was an allocation
	// per request sent (sendQ) whenever the sender kept up.
	spare  []T
	closed bool
	wake   chan struct{}
}

func newQueue[T any]() *queue[T] {
	return &queue[T]{wake: make(chan struct{}, 1)}
}

// push appends v; it reports false once the queue is closed.
func (q *queue[T]) push(v T) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

func (q *queue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued and whether more may come. The batch
// returned before is given back: the caller must be done with it.
func (q *queue[T]) take() ([]T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	clear(q.spare) // what it held is the consumer's past work: keep none of it
	q.items, q.spare = q.spare[:0], items
	return items, !q.closed
}

// wait blocks until items are queued, the queue is closed, or stop closes.
// ok is false when nothing more will come.
func (q *queue[T]) wait(stop <-chan struct{}) (items []T, ok bool) {
	for {
		items, open := q.take()
		if len(items) > 0 || !open {
			return items, open
		}
		select {
		case <-q.wake:
		case <-stop:
			return nil, false
		}
	}
}

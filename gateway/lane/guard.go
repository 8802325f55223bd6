package lane

import (
	"runtime/debug"
	"sync"
)

// PanicFunc hears a panic that a recover boundary caught: where names the
// boundary, v is the panic value, stack the goroutine's stack.
type PanicFunc func(where string, v any, stack []byte)

// guard runs fn and turns a panic into a report instead of a dead daemon:
// one bad message from an engine must never take every other request with
// it (docs/architecture.md, "recover at every per-connection goroutine").
func guard(report PanicFunc, where string, fn func()) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if report != nil {
				report(where, v, debug.Stack())
			}
		}
	}()
	fn()
	return false
}

// notifier is a broadcast of "something changed": Wait's channel is closed
// at the next Notify. Waiters take the channel before they look at the
// state, so no change between the look and the wait is missed.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	close(n.ch)
	n.ch = make(chan struct{})
	n.mu.Unlock()
}

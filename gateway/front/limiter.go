package front

import (
	"context"
	"net/http"
	"time"
)

// Limiter is gateway.max_concurrent: at most N generation requests are
// served at once; the next ones wait up to the queue timeout for a slot,
// then get 429 with Retry-After. The channel is the only state: a slot
// is a token in it.
type Limiter struct {
	slots   chan struct{}
	wait    time.Duration
	onQueue func(delta int)
}

// NewLimiter admits n at once (n <= 0: nil, unlimited); a request waits
// up to wait for a slot (<= 0: refused at once). onQueue (may be nil)
// hears +1/-1 as requests start and stop waiting.
func NewLimiter(n int, wait time.Duration, onQueue func(delta int)) *Limiter {
	if n <= 0 {
		return nil
	}
	return &Limiter{slots: make(chan struct{}, n), wait: wait, onQueue: onQueue}
}

// Acquire takes a slot; release gives it back (call it once).
func (l *Limiter) Acquire(ctx context.Context) (release func(), err *Error) {
	release = func() { <-l.slots }
	select {
	case l.slots <- struct{}{}:
		return release, nil
	default:
	}
	if l.onQueue != nil {
		l.onQueue(1)
		defer l.onQueue(-1)
	}
	var timeout <-chan time.Time
	if l.wait > 0 {
		t := time.NewTimer(l.wait)
		defer t.Stop()
		timeout = t.C
	} else {
		c := make(chan time.Time)
		close(c)
		timeout = c
	}
	select {
	case l.slots <- struct{}{}:
		return release, nil
	case <-timeout:
		return func() {}, Errorf(http.StatusTooManyRequests, "too_many_requests", "",
			"the gateway is serving its limit of %d concurrent requests (gateway.max_concurrent); none finished within %s; retry shortly", cap(l.slots), l.wait)
	case <-ctx.Done():
		return func() {}, Errorf(499, "client_gone", "", "the request ended while waiting for a slot: %w", ctx.Err())
	}
}

// InUse is how many slots are held (tests, status).
func (l *Limiter) InUse() int { return len(l.slots) }

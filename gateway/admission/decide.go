// Package admission is the gateway's queue in front of the engines
// (docs/protocol.md §11.13): per role kind, requests wait here once the
// engines of that kind hold as much as the profile says they take, in
// priority order with aging, bounded in requests and prompt tokens; a
// request the queue cannot hold, or whose deadline it cannot meet, is
// shed at once (429 or 503 with Retry-After); each API key's
// requests-per-minute and tokens-per-minute limits are checked here too.
//
// Every verdict is a pure function (this file: DecideAdmission,
// DecideNext, Take) with the clock passed in; one goroutine, the Queue's
// owner (queue.go), holds the state they read and carries them out.
// Anchors: SMG's priority scheduler (classes, starvation promotion, its
// metric names) and tenant rate limits, Dynamo's router queue (wait while
// the engines are full), llm-d's flow control (bounded queues, shed by
// deadline).
package admission

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Priority classes. A request's class is an integer, larger first
// (SGLang's order for its priority field); SMG's x-smg-priority names map
// onto four of them.
const (
	ClassBulk        = -1
	ClassDefault     = 0
	ClassInteractive = 1
	ClassSystem      = 2
	// MinClass and MaxClass bound a request's priority field (a 400
	// outside), which bounds the metrics' class labels too.
	MinClass = -100
	MaxClass = 100
)

// HeaderClass reads SMG's x-smg-priority value: system, interactive,
// default or bulk (any case, trimmed); ok is false for anything else,
// which SMG admits as default rather than refuse.
func HeaderClass(v string) (class int, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "system":
		return ClassSystem, true
	case "interactive":
		return ClassInteractive, true
	case "default":
		return ClassDefault, true
	case "bulk":
		return ClassBulk, true
	}
	return ClassDefault, false
}

// ClassLabel is a class as the metrics and the dashboard name it: SMG's
// name for its four, the number otherwise.
func ClassLabel(c int) string {
	switch c {
	case ClassSystem:
		return "system"
	case ClassInteractive:
		return "interactive"
	case ClassDefault:
		return "default"
	case ClassBulk:
		return "bulk"
	}
	return strconv.Itoa(c)
}

// Load is what a kind's engines hold, or what waits for them: requests,
// and prompt tokens not yet prefilled (a request's leave when its first
// token comes).
type Load struct{ Requests, Tokens int }

// Limits are one kind's queue: what its engines take at once (already
// summed over its routable ranks), and how much may wait.
type Limits struct {
	// Requests and Tokens bound what the engines hold; 0: no bound (a
	// request never waits for room).
	Requests, Tokens int
	// QueueRequests and QueueTokens bound what waits; past them a request
	// is shed (or displaces a lower-class one).
	QueueRequests, QueueTokens int
	// Aging is how long a waiting request waits to rise one class (the
	// rule against starvation); 0: never.
	Aging time.Duration
}

// Ask is one request at the queue.
type Ask struct {
	Class   int
	Tokens  int
	Arrived time.Time
	// Deadline is when the request stops waiting (gateway.queue_timeout
	// after it arrived); zero: never.
	Deadline time.Time
}

// State is what a verdict on a new request reads.
type State struct {
	InFlight Load
	Queued   Load // everything waiting
	// Ahead is the waiting requests that would be served before this one
	// (an effective class at or above its class).
	Ahead Load
	// Lowest is the class of the waiting request the queue would shed
	// first (the lowest effective class, the newest among equals); only
	// when Queued.Requests > 0.
	Lowest int
	// Drain is how fast the kind's queue emptied lately, in prompt tokens
	// and requests per second; 0: not known yet.
	DrainTokens, DrainRequests float64
}

// Verdict is what happens to a request.
type Verdict int

const (
	Admit    Verdict = iota // send it to the engines now
	Wait                    // hold it in the queue
	Displace                // shed the queue's lowest request, then decide again
	Shed                    // answer it now with Status and Retry-After
)

func (v Verdict) String() string {
	return [...]string{"admit", "wait", "displace", "shed"}[v]
}

// Shed reasons (the label of the shed counter, the access line's
// reason=).
const (
	ReasonQueueFull = "queue_full" // 429: the queue holds its bound
	ReasonDeadline  = "deadline"   // 503: the wait ahead is longer than the request's deadline (at arrival), or it passed (while waiting)
	ReasonDisplaced = "displaced"  // 503: a higher class took its place in a full queue
	ReasonRateLimit = "rate_limit" // 429: the key's requests or tokens per minute are spent
	ReasonTooLarge  = "too_large"  // 429: more tokens than the key's whole minute
)

// Decision is a verdict with what the answer says.
type Decision struct {
	Verdict Verdict
	Reason  string
	Status  int           // Shed: 429 or 503
	After   time.Duration // Shed: Retry-After (whole seconds, at least 1)
	Message string
}

// fits reports whether the engines take a request of tokens now: under
// both bounds, and a prompt larger than the token bound alone goes when
// nothing else is in prefill (it could never fit otherwise).
func fits(l Limits, in Load, tokens int) bool {
	if l.Requests > 0 && in.Requests >= l.Requests {
		return false
	}
	return l.Tokens <= 0 || in.Tokens == 0 || in.Tokens+tokens <= l.Tokens
}

// DecideAdmission is the verdict on a request arriving at a kind's queue.
// Rows, in order: nothing of its class or above waits and the engines
// take it: admit. The queue is at its bound: displace the lowest waiting
// request when this one outranks it, else shed (429). The work ahead of
// it, at the rate the queue drains, ends after its deadline: shed (503).
// Otherwise it waits.
func DecideAdmission(l Limits, st State, a Ask, now time.Time) Decision {
	if st.Ahead.Requests == 0 && fits(l, st.InFlight, a.Tokens) {
		return Decision{Verdict: Admit, Reason: "admitted"}
	}
	if st.Queued.Requests+1 > l.QueueRequests || st.Queued.Tokens+a.Tokens > l.QueueTokens {
		if st.Queued.Requests > 0 && a.Class > st.Lowest {
			return Decision{Verdict: Displace, Reason: ReasonDisplaced}
		}
		return Decision{Verdict: Shed, Reason: ReasonQueueFull, Status: http.StatusTooManyRequests, After: retryAfter(drainTime(st.Queued, st)),
			Message: fmt.Sprintf("the gateway's queue is full (%d requests, %d prompt tokens waiting; gateway.admission queue_requests %d, queue_tokens %d)",
				st.Queued.Requests, st.Queued.Tokens, l.QueueRequests, l.QueueTokens)}
	}
	if !a.Deadline.IsZero() {
		wait := drainTime(st.Ahead, st)
		if !now.Before(a.Deadline) || (wait > 0 && now.Add(wait).After(a.Deadline)) {
			return Decision{Verdict: Shed, Reason: ReasonDeadline, Status: http.StatusServiceUnavailable, After: retryAfter(wait),
				Message: fmt.Sprintf("the gateway's queue would hold this request about %s, past its deadline in %s (gateway.queue_timeout)", round(wait), round(a.Deadline.Sub(now)))}
		}
	}
	return Decision{Verdict: Wait, Reason: "queued"}
}

// drainTime is how long the queue takes to serve work at its recent
// rate: the longer of its tokens and its requests; 0 when no rate is
// known.
func drainTime(work Load, st State) time.Duration {
	var s float64
	if st.DrainTokens > 0 {
		s = float64(work.Tokens) / st.DrainTokens
	}
	if st.DrainRequests > 0 {
		s = max(s, float64(work.Requests)/st.DrainRequests)
	}
	if s <= 0 || math.IsInf(s, 0) || math.IsNaN(s) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// retryAfter is a wait as Retry-After: whole seconds, 1 to 60.
func retryAfter(d time.Duration) time.Duration {
	s := max(1, min(60, int64(math.Ceil(d.Seconds()))))
	return time.Duration(s) * time.Second
}

func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// Waiter is a request in a kind's queue, as DecideNext reads it.
type Waiter struct {
	Class   int
	Tokens  int
	Arrived time.Time
}

// Effective is a waiter's class now: one more per Aging waited, so a
// request of class c waits at most (c' - c) × Aging behind a stream of
// class c' (the stated rule against starvation).
func Effective(w Waiter, aging time.Duration, now time.Time) int {
	if aging <= 0 || !now.After(w.Arrived) {
		return w.Class
	}
	return w.Class + int(now.Sub(w.Arrived)/aging)
}

// DecideNext is which waiting request the engines take next: the highest
// effective class, the earliest arrival among equals, when it fits; -1
// when nothing waits or the first in line does not fit yet (no request
// passes it, so a large prompt is not starved by small ones). promoted
// says aging put it before a waiter of a higher class.
func DecideNext(l Limits, in Load, ws []Waiter, now time.Time) (next int, promoted bool) {
	next = -1
	best := 0
	for i, w := range ws {
		e := Effective(w, l.Aging, now)
		if next < 0 || e > best || (e == best && w.Arrived.Before(ws[next].Arrived)) {
			next, best = i, e
		}
	}
	if next < 0 || !fits(l, in, ws[next].Tokens) {
		return -1, false
	}
	for _, w := range ws {
		if w.Class > ws[next].Class {
			return next, true
		}
	}
	return next, false
}

// Lowest is the waiter the queue sheds first when a higher class needs
// its place: the lowest effective class, the newest among equals.
func Lowest(ws []Waiter, aging time.Duration, now time.Time) int {
	low, lc := -1, 0
	for i, w := range ws {
		e := Effective(w, aging, now)
		if low < 0 || e < lc || (e == lc && w.Arrived.After(ws[low].Arrived)) {
			low, lc = i, e
		}
	}
	return low
}

// Bucket is one rate limit's state: a continuous-refill token bucket of
// capacity per minute, starting full (as SMG's tenant limits).
type Bucket struct {
	Level float64
	At    time.Time // when Level was true; zero: a full bucket never used
}

// level is b's level at now for a bucket of perMinute.
func (b Bucket) level(perMinute int, now time.Time) float64 {
	c := float64(perMinute)
	if b.At.IsZero() {
		return c
	}
	return min(c, b.Level+c*now.Sub(b.At).Seconds()/60)
}

// Take debits cost from a bucket of perMinute (0: no limit) at now: ok,
// the new bucket, and when it refused, how long until it could afford the
// cost (0: never, the cost is above a whole minute's).
func Take(b Bucket, perMinute int, cost float64, now time.Time) (Bucket, bool, time.Duration) {
	if perMinute <= 0 {
		return b, true, 0
	}
	lv := b.level(perMinute, now)
	if cost <= lv {
		return Bucket{Level: lv - cost, At: now}, true, 0
	}
	if cost > float64(perMinute) {
		return b, false, 0
	}
	need := (cost - lv) / float64(perMinute) * 60
	return b, false, time.Duration(need * float64(time.Second))
}

// Settle debits extra (a request's output tokens, known at its end) from
// a bucket of perMinute; it may go below zero (the next requests wait
// for it).
func Settle(b Bucket, perMinute int, extra float64, now time.Time) Bucket {
	if perMinute <= 0 || extra == 0 {
		return b
	}
	return Bucket{Level: b.level(perMinute, now) - extra, At: now}
}

// KeyLimits are one API key's limits (gateway.api_keys[]): requests and
// tokens (prompt at admission, output at the end) per minute; 0: none.
type KeyLimits struct {
	RPM, TPM int
}

// DecideLimit is the verdict of a key's limits on a request of tokens:
// both buckets must afford it, or neither is debited and the request is
// shed with 429 (Retry-After: when both could).
func DecideLimit(k KeyLimits, rpm, tpm Bucket, tokens int, now time.Time) (Decision, Bucket, Bucket) {
	r, okR, waitR := Take(rpm, k.RPM, 1, now)
	t, okT, waitT := Take(tpm, k.TPM, float64(tokens), now)
	switch {
	case okR && okT:
		return Decision{Verdict: Admit, Reason: "admitted"}, r, t
	case !okT && waitT == 0:
		return Decision{Verdict: Shed, Reason: ReasonTooLarge, Status: http.StatusTooManyRequests, After: retryAfter(time.Minute),
			Message: fmt.Sprintf("this request's %d prompt tokens exceed the API key's whole minute (gateway.api_keys[].tpm %d)", tokens, k.TPM)}, rpm, tpm
	}
	return Decision{Verdict: Shed, Reason: ReasonRateLimit, Status: http.StatusTooManyRequests, After: retryAfter(max(waitR, waitT)),
		Message: fmt.Sprintf("the API key's rate limit is spent (gateway.api_keys[].rpm %d, tpm %d); retry in %s", k.RPM, k.TPM, round(max(waitR, waitT)))}, rpm, tpm
}

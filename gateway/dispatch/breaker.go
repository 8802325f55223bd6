package dispatch

// Circuit breakers (docs/protocol.md §11.9): one per routed worker, a pure
// state machine (StepBreaker) that one goroutine, the breaker book,
// drives with the requests' outcomes, the lane's registrations and its
// own timer. Routing reads the book's latest view, an immutable value, so
// no lock sits between a pick and the breakers.

import (
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// BreakerConfig is gateway.circuit_breaker. FailureThreshold 0: no
// breakers.
type BreakerConfig struct {
	FailureThreshold int           // consecutive failures that open it
	SuccessThreshold int           // consecutive half-open successes that close it
	Timeout          time.Duration // open this long, then half-open
	Window           time.Duration // a run of failures older than this from its first starts again
}

// BreakerConfigOf reads the plan's gateway.circuit_breaker.
func BreakerConfigOf(p profiles.CircuitBreakerPlan) BreakerConfig {
	return BreakerConfig{FailureThreshold: p.FailureThreshold, SuccessThreshold: max(p.SuccessThreshold, 1),
		Timeout: time.Duration(p.TimeoutDurationSecs) * time.Second, Window: time.Duration(p.WindowDurationSecs) * time.Second}
}

// Enabled reports whether breakers are on.
func (c BreakerConfig) Enabled() bool { return c.FailureThreshold > 0 }

// Breaker is one worker's breaker as data.
type Breaker struct {
	State     string    // snapshot.BreakerClosed, BreakerOpen, BreakerHalfOpen ("" is closed)
	Failures  int       // the current run of consecutive failures
	Successes int       // consecutive successes while half-open
	RunStart  time.Time // the first failure of the run (the window counts from it)
	Since     time.Time // when State was entered
	Opened    int       // times it opened since the worker registered
	Reason    string    // why it is in State
}

// BreakerEvent is what can happen to a breaker.
type BreakerEvent int

const (
	// BreakerSuccess: a request on the worker finished (stop or length).
	BreakerSuccess BreakerEvent = iota
	// BreakerFailure: a leg on the worker failed (its engine died,
	// stalled or aborted it).
	BreakerFailure
	// BreakerTimeout: the book's timer for an open breaker fired.
	BreakerTimeout
	// BreakerRegistered: the worker registered anew, a new run of its
	// engine: a new worker whose breaker starts closed.
	BreakerRegistered
)

func (e BreakerEvent) String() string {
	return [...]string{"success", "failure", "timeout", "registered"}[e]
}

// Allows reports whether routing may send the worker new requests: all
// but an open breaker. Half-open admits every request, as SMG's does
// (its can_execute is true while half-open); success_threshold
// successes in a row close it, one failure opens it again.
func (b Breaker) Allows() bool { return b.State != snapshot.BreakerOpen }

func (b Breaker) state() string {
	if b.State == "" {
		return snapshot.BreakerClosed
	}
	return b.State
}

// StepBreaker is the breaker's one decision: the next breaker after ev at
// now, and whether its state changed. Outcomes that arrive while it is
// open (requests sent before it opened) change nothing; a timer that
// fires early (a stale one) neither.
func StepBreaker(b Breaker, ev BreakerEvent, now time.Time, c BreakerConfig) (next Breaker, changed bool) {
	from := b.state()
	b.State = from
	switch ev {
	case BreakerRegistered:
		b = Breaker{State: snapshot.BreakerClosed, Since: now}
		if from != snapshot.BreakerClosed {
			b.Reason = "the worker registered anew"
		}
	case BreakerSuccess:
		switch from {
		case snapshot.BreakerClosed:
			b.Failures, b.RunStart = 0, time.Time{}
		case snapshot.BreakerHalfOpen:
			if b.Successes++; b.Successes >= c.SuccessThreshold {
				b = Breaker{State: snapshot.BreakerClosed, Since: now, Opened: b.Opened,
					Reason: fmt.Sprintf("%d successes in a row while half-open", b.Successes)}
			}
		}
	case BreakerFailure:
		switch from {
		case snapshot.BreakerClosed:
			if b.Failures == 0 || now.Sub(b.RunStart) > c.Window {
				b.Failures, b.RunStart = 0, now
			}
			if b.Failures++; b.Failures >= c.FailureThreshold {
				b.State, b.Since, b.Successes = snapshot.BreakerOpen, now, 0
				b.Opened++
				b.Reason = fmt.Sprintf("%d failures in a row", b.Failures)
			}
		case snapshot.BreakerHalfOpen:
			b.State, b.Since, b.Successes = snapshot.BreakerOpen, now, 0
			b.Opened++
			b.Reason = "a request failed while half-open"
		}
	case BreakerTimeout:
		if from == snapshot.BreakerOpen && now.Sub(b.Since) >= c.Timeout {
			b.State, b.Since, b.Failures, b.Successes, b.RunStart = snapshot.BreakerHalfOpen, now, 0, 0, time.Time{}
			b.Reason = fmt.Sprintf("open for %s", c.Timeout)
		}
	}
	return b, b.State != from
}

// breakerView is the book's state as routing reads it: immutable, so it
// is shared without a lock.
type breakerView struct {
	entries map[string]breakerEntry // by role instance
	cfg     BreakerConfig           // the knobs it was made under (tsd apply may change them)
	next    chan struct{}           // closed when a newer view replaces this one
}

// changed is closed once a newer view exists (nil view: never).
func (v *breakerView) changed() <-chan struct{} {
	if v == nil {
		return nil
	}
	return v.next
}

type breakerEntry struct {
	b     Breaker
	epoch uint64 // bumped when the worker registers anew
}

// allows reports whether role may take new requests (a worker the book
// has not heard of is closed).
func (v *breakerView) allows(role string) bool {
	if v == nil {
		return true
	}
	e, ok := v.entries[role]
	return !ok || e.b.Allows()
}

func (v *breakerView) epoch(role string) uint64 {
	if v == nil {
		return 0
	}
	return v.entries[role].epoch
}

// outcome is one leg's result, for its worker's breaker. epoch is the
// worker's when the leg was routed: an outcome of an earlier run of the
// engine is dropped.
type outcome struct {
	role  string
	epoch uint64
	ev    BreakerEvent
}

// breakerBook owns every worker's breaker: one goroutine (run) applies
// outcomes, registrations and timeouts through StepBreaker and publishes
// the view after each change.
type breakerBook struct {
	cfg   BreakerConfig // owned by run once it runs
	now   func() time.Time
	in    chan outcome
	ctl   chan bookCmd  // tsd apply: new knobs, workers added, removed, renamed
	quit  chan struct{} // closed when the book is switched off
	done  chan struct{} // closed when run has returned
	view  atomic.Pointer[breakerView]
	onTr  func(role, from, to, reason string) // each state change (metrics, events); on the book's goroutine
	roles []string                            // the workers it holds, in plan order
}

// newBreakerBook makes the book of roles' breakers, all closed; nil when
// breakers are off. run must be started for it to hear anything.
func newBreakerBook(cfg BreakerConfig, roles []string, now func() time.Time, onTr func(role, from, to, reason string)) *breakerBook {
	if !cfg.Enabled() {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	if onTr == nil {
		onTr = func(string, string, string, string) {}
	}
	b := &breakerBook{cfg: cfg, now: now, in: make(chan outcome, 1024), ctl: make(chan bookCmd), quit: make(chan struct{}), done: make(chan struct{}), onTr: onTr, roles: roles}
	v := &breakerView{entries: map[string]breakerEntry{}, cfg: cfg, next: make(chan struct{})}
	t := now()
	for _, r := range roles {
		v.entries[r] = breakerEntry{b: Breaker{State: snapshot.BreakerClosed, Since: t}}
	}
	b.view.Store(v)
	return b
}

// current is the latest view (nil book: every worker allowed).
func (b *breakerBook) current() *breakerView {
	if b == nil {
		return nil
	}
	return b.view.Load()
}

// report queues an outcome; it waits only while the book is a whole
// queue behind, and never past stop.
func (b *breakerBook) report(o outcome, stop <-chan struct{}) {
	if b == nil {
		return
	}
	select {
	case b.in <- o:
	case <-stop:
	}
}

// run is the book's goroutine: it applies outcomes and the lane's
// registrations (a rank whose registration time moved is a new run of
// its engine) until stop closes.
func (b *breakerBook) run(l *lane.Lane, stop <-chan struct{}) {
	defer close(b.done)
	cur, evs, cancel := l.SubscribeRanks()
	defer cancel()
	registered := map[string]map[int]time.Time{}
	seen := func(ev snapshot.RankEvent) bool {
		if ev.Rank.State != snapshot.RankRegistered || ev.Rank.RegisteredAt.IsZero() {
			return false
		}
		m := registered[ev.Role]
		if m == nil {
			m = map[int]time.Time{}
			registered[ev.Role] = m
		}
		last, ok := m[ev.Rank.Identity]
		m[ev.Rank.Identity] = ev.Rank.RegisteredAt
		return ok && ev.Rank.RegisteredAt.After(last)
	}
	for _, ev := range cur {
		seen(ev) // the runs already registered are the breakers' own
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-b.quit:
			return
		case c := <-b.ctl:
			b.command(c)
		case o := <-b.in:
			b.apply(o.role, o.epoch, o.ev, false)
		case ev, ok := <-evs:
			if !ok {
				return
			}
			if seen(ev) {
				b.apply(ev.Role, 0, BreakerRegistered, true)
			}
		case <-timer.C:
			for _, r := range b.roles {
				b.apply(r, 0, BreakerTimeout, true)
			}
		}
		if d, ok := b.nextTimeout(); ok {
			timer.Reset(d)
		}
	}
}

// apply steps role's breaker; anyEpoch events (registrations, timeouts)
// are the book's own, outcomes must carry the worker's current epoch.
func (b *breakerBook) apply(role string, epoch uint64, ev BreakerEvent, anyEpoch bool) {
	old := b.view.Load()
	e, ok := old.entries[role]
	if !ok || (!anyEpoch && epoch != e.epoch) {
		return
	}
	next, changed := StepBreaker(e.b, ev, b.now(), b.cfg)
	if ev == BreakerRegistered {
		e.epoch++
	}
	if next == e.b && ev != BreakerRegistered {
		return
	}
	v := &breakerView{entries: make(map[string]breakerEntry, len(old.entries)), cfg: b.cfg, next: make(chan struct{})}
	for k, x := range old.entries {
		v.entries[k] = x
	}
	v.entries[role] = breakerEntry{b: next, epoch: e.epoch}
	if changed {
		// Counted and told before the view shows it, so whoever sees the
		// new state finds its transition counted too.
		b.onTr(role, e.b.state(), next.state(), next.Reason)
	}
	b.view.Store(v)
	close(old.next)
}

// nextTimeout is how long until the first open breaker may go half-open.
func (b *breakerBook) nextTimeout() (time.Duration, bool) {
	var first time.Time
	for _, e := range b.view.Load().entries {
		if e.b.State == snapshot.BreakerOpen {
			if at := e.b.Since.Add(b.cfg.Timeout); first.IsZero() || at.Before(first) {
				first = at
			}
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(first.Sub(b.now()), time.Millisecond), true
}

// status is every breaker for the snapshot, by role.
func (b *breakerBook) status() []snapshot.BreakerStatus {
	if b == nil {
		return nil
	}
	v := b.view.Load()
	out := make([]snapshot.BreakerStatus, 0, len(v.entries))
	for role, e := range v.entries {
		s := snapshot.BreakerStatus{Role: role, State: e.b.state(), Failures: e.b.Failures, Successes: e.b.Successes,
			Since: e.b.Since, Reason: e.b.Reason, Opened: e.b.Opened}
		if e.b.State == snapshot.BreakerOpen {
			s.Until = e.b.Since.Add(v.cfg.Timeout)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Role < out[j].Role })
	return out
}

// breakers is the dispatch's circuit breakers as routing and the flights
// use them: the book while gateway.circuit_breaker is on (nil: off; tsd
// apply swaps it), and what starting one needs. Its methods are safe
// while the book is off: every worker allowed, nothing reported.
type breakers struct {
	p        atomic.Pointer[breakerBook]
	lane     *lane.Lane
	shutdown <-chan struct{}
	now      func() time.Time
	onTr     func(role, from, to, reason string) // each state change (metrics, the event list)
	guard    panicGuard
}

func (r *breakers) on() bool                                { return r.p.Load() != nil }
func (r *breakers) current() *breakerView                   { return r.p.Load().current() }
func (r *breakers) report(o outcome, stop <-chan struct{})  { r.p.Load().report(o, stop) }
func (r *breakers) status() []snapshot.BreakerStatus        { return r.p.Load().status() }
func (r *breakers) command(c bookCmd, stop <-chan struct{}) { r.p.Load().send(c, stop) }

// start starts a book for roles (none when cfg is off).
func (r *breakers) start(cfg BreakerConfig, roles []string) {
	b := newBreakerBook(cfg, roles, r.now, r.onTr)
	if b == nil {
		return
	}
	r.p.Store(b)
	go func() {
		defer r.guard.here("circuit breakers", nil)
		b.run(r.lane, r.shutdown)
	}()
}

// set takes tsd apply's knobs: the running book keeps its breakers under
// them, off stops it, and on starts one over roles with every breaker
// closed.
func (r *breakers) set(cfg BreakerConfig, roles func() []string) error {
	b := r.p.Load()
	switch {
	case b != nil && cfg.Enabled():
		if !b.send(bookCmd{cfg: &cfg}, r.shutdown) {
			return fmt.Errorf("circuit breakers: the gateway is shutting down")
		}
	case b != nil:
		r.p.Store(nil)
		close(b.quit)
	case cfg.Enabled():
		r.start(cfg, roles())
	}
	return nil
}

// bookCmd is one change to the book, made on its goroutine: new knobs,
// or a worker added, removed or renamed (tsd apply).
type bookCmd struct {
	cfg      *BreakerConfig
	add      string
	remove   string
	from, to string // rename
	done     chan struct{}
}

// send hands c to the book's goroutine and waits until it is applied;
// false when the book or the gateway has stopped (a nil book: nothing to
// do).
func (b *breakerBook) send(c bookCmd, stop <-chan struct{}) bool {
	if b == nil {
		return true
	}
	c.done = make(chan struct{})
	select {
	case b.ctl <- c:
	case <-b.done:
		return false
	case <-stop:
		return false
	}
	select {
	case <-c.done:
		return true
	case <-b.done:
		return false
	}
}

// command applies c on the book's goroutine and publishes the view.
func (b *breakerBook) command(c bookCmd) {
	defer close(c.done)
	if c.cfg != nil {
		b.cfg = *c.cfg
	}
	old := b.view.Load()
	v := &breakerView{entries: make(map[string]breakerEntry, len(old.entries)+1), cfg: b.cfg, next: make(chan struct{})}
	for k, x := range old.entries {
		v.entries[k] = x
	}
	switch {
	case c.add != "":
		if _, ok := v.entries[c.add]; !ok {
			v.entries[c.add] = breakerEntry{b: Breaker{State: snapshot.BreakerClosed, Since: b.now()}}
			b.roles = append(b.roles, c.add)
		}
	case c.remove != "":
		delete(v.entries, c.remove)
		b.roles = without(b.roles, c.remove)
	case c.from != "":
		if e, ok := v.entries[c.from]; ok {
			delete(v.entries, c.from)
			v.entries[c.to] = e
		}
		for i, r := range b.roles {
			if r == c.from {
				b.roles[i] = c.to
			}
		}
	}
	b.view.Store(v)
	close(old.next)
}

func without(s []string, x string) []string {
	out := s[:0:0]
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

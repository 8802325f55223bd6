package admission

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"sort"
	"sync/atomic"
	"time"
)

// KindConfig is one kind's queue as the profile sets it
// (gateway.admission): what one rank of the engines takes, and how much
// may wait. A PD request enters the prefill kind's queue: its tokens are
// the prefill ranks' and its requests the decode ranks' (every request
// holds a decode slot until it ends).
type KindConfig struct {
	// TokensPerRank: prompt tokens not yet prefilled at once, per rank of
	// TokensKind; RequestsPerRank: requests at once, per rank of
	// RequestsKind. 0: no bound.
	TokensPerRank, RequestsPerRank int
	TokensKind, RequestsKind       string
	QueueRequests, QueueTokens     int
	Aging                          time.Duration
}

// Config is the queue's live settings; a tsd apply replaces it whole.
type Config struct {
	Kinds map[string]KindConfig
	// Keys are the API keys' limits by key name (the tenant).
	Keys map[string]KeyLimits
}

// active reports whether anything is bounded: otherwise Enter admits at
// once without a word to the owner.
func (c *Config) active() bool {
	if c == nil {
		return false
	}
	for _, k := range c.Kinds {
		if k.TokensPerRank > 0 || k.RequestsPerRank > 0 {
			return true
		}
	}
	for _, k := range c.Keys {
		if k.RPM > 0 || k.TPM > 0 {
			return true
		}
	}
	return false
}

// Options tune a Queue.
type Options struct {
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Ranks is how many routable ranks a kind has now (the bounds are per
	// rank); nil, or 0 for a kind: 1.
	Ranks func(kind string) int
	// OnLeave hears each request leaving the queue after it waited:
	// admitted or not, its class and the wait (SMG's
	// smg_scheduler_queue_wait_seconds).
	OnLeave func(kind string, class int, waited time.Duration)
	// OnQueue hears +1/-1 as requests start and stop waiting (the
	// gateway's queued gauge).
	OnQueue func(delta int)
	// OnPanic hears a panic the owner recovered from.
	OnPanic func(where string, v any, stack []byte)
}

// Refusal is a request the queue sheds: its status, the Retry-After it
// suggests and why, in the words the client reads.
type Refusal struct {
	Status  int
	Code    string // the error code (X-SMG-Error-Code)
	Reason  string // ReasonQueueFull, ...
	After   time.Duration
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// Ticket is an admitted request's place at the engines: Started when its
// first token came (its prompt is prefilled), Done when it ended.
type Ticket struct {
	q       *Queue
	kind    string
	tenant  string
	tokens  int
	started atomic.Bool
	done    atomic.Bool
}

// Started gives back the ticket's prompt tokens (the prefill is done).
func (t *Ticket) Started() {
	if t == nil || !t.started.CompareAndSwap(false, true) {
		return
	}
	t.q.send(msg{op: opStarted, kind: t.kind, tokens: t.tokens})
}

// Done gives back the ticket's place; output is the tokens generated, for
// the key's tokens per minute. Idempotent.
func (t *Ticket) Done(output int) {
	if t == nil || !t.done.CompareAndSwap(false, true) {
		return
	}
	tokens := 0
	if t.started.CompareAndSwap(false, true) {
		tokens = t.tokens
	}
	t.q.send(msg{op: opDone, kind: t.kind, tokens: tokens, tenant: t.tenant, output: output})
}

// Queue is the admission queue of every kind, owned by one goroutine.
type Queue struct {
	opts Options
	cfg  atomic.Pointer[Config]
	in   chan msg
	done chan struct{}
	ids  atomic.Uint64
}

type op int

const (
	opEnter op = iota
	opLeave
	opStarted
	opDone
	opConfig
	opSnapshot
)

type msg struct {
	op     op
	id     uint64
	kind   string
	tenant string
	ask    Ask
	tokens int
	output int
	reason string // opLeave: why it gave up
	cfg    *Config
	reply  chan result
	snap   chan Snapshot
}

// result is what the owner answers an enter: waiting (a final result
// follows), a ticket, or a refusal.
type result struct {
	waiting bool
	ticket  *Ticket
	refusal *Refusal
}

// New starts a Queue's owner; Close stops it.
func New(cfg Config, o Options) *Queue {
	if o.Now == nil {
		o.Now = time.Now
	}
	q := &Queue{opts: o, in: make(chan msg, 256), done: make(chan struct{})}
	q.cfg.Store(&cfg)
	go q.own(cfg)
	return q
}

// Close stops the owner; waiting requests are refused (the gateway is
// going away).
func (q *Queue) Close() {
	select {
	case <-q.done:
	default:
		q.send(msg{op: opConfig, cfg: nil})
	}
}

// Reconfigure replaces the settings (tsd apply): requests waiting stay
// and are served under the new bounds.
func (q *Queue) Reconfigure(cfg Config) {
	q.cfg.Store(&cfg)
	q.send(msg{op: opConfig, cfg: &cfg})
}

// Active reports whether the queue bounds anything now.
func (q *Queue) Active() bool { return q.cfg.Load().active() }

func (q *Queue) send(m msg) {
	select {
	case q.in <- m:
	case <-q.done:
	}
}

// Enter takes a request of kind from tenant ("" none) into the queue:
// it returns its ticket once the engines may take it, or the refusal
// that sheds it: at once when the queue is full, a key's limit is spent
// or the work ahead outlasts its deadline; later when its deadline passes
// or a higher class displaces it. A nil ticket and nil refusal: nothing
// is bounded, go ahead. ctx ending while it waits refuses it with 499.
func (q *Queue) Enter(ctx context.Context, kind, tenant string, a Ask) (*Ticket, *Refusal) {
	if !q.Active() {
		return nil, nil
	}
	reply := make(chan result, 2)
	id := q.ids.Add(1)
	q.send(msg{op: opEnter, id: id, kind: kind, tenant: tenant, ask: a, reply: reply})
	var r result
	select {
	case r = <-reply:
	case <-q.done:
		return nil, closedRefusal
	}
	if !r.waiting {
		return r.ticket, r.refusal
	}
	var timeout <-chan time.Time
	if !a.Deadline.IsZero() {
		t := time.NewTimer(max(a.Deadline.Sub(q.opts.Now()), 0))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case r = <-reply:
		return r.ticket, r.refusal
	case <-timeout:
		q.send(msg{op: opLeave, id: id, kind: kind, reason: ReasonDeadline})
	case <-ctx.Done():
		q.send(msg{op: opLeave, id: id, kind: kind, reason: "client_gone"})
	case <-q.done:
		return nil, closedRefusal
	}
	select { // the owner answers a leave with the request's final result
	case r = <-reply:
	case <-q.done:
		return nil, closedRefusal
	}
	if r.ticket != nil && ctx.Err() != nil {
		r.ticket.Done(0) // admitted as the client left
		return nil, &Refusal{Status: 499, Code: "client_gone", Reason: "client_gone", Message: "the request ended while it waited in the gateway's queue"}
	}
	return r.ticket, r.refusal
}

var closedRefusal = &Refusal{Status: http.StatusServiceUnavailable, Code: "shutting_down", Reason: "shutdown", After: time.Second, Message: "the gateway is shutting down"}

// Snapshot is the queue as status and /metrics show it.
type Snapshot struct {
	Kinds []KindSnapshot
}

// KindSnapshot is one kind's queue.
type KindSnapshot struct {
	Kind     string
	Limits   Limits // summed over the kind's routable ranks now
	InFlight Load
	Queued   Load
	// Waiting is what waits by class; Outcomes counts every request that
	// entered by class and outcome (admitted, and each shed reason, and
	// client_gone); Promoted, the admissions aging put first.
	Waiting  map[int]Load
	Outcomes map[Outcome]uint64
	Promoted map[int]uint64
}

// Outcome is a class and what became of its requests.
type Outcome struct {
	Class  int
	Result string // "admitted" or a shed reason, or client_gone
}

// Snapshot asks the owner for the queue now.
func (q *Queue) Snapshot() Snapshot {
	ch := make(chan Snapshot, 1)
	q.send(msg{op: opSnapshot, snap: ch})
	select {
	case s := <-ch:
		return s
	case <-q.done:
		return Snapshot{}
	}
}

// --- the owner --------------------------------------------------------------

type waiter struct {
	id     uint64
	w      Waiter
	tenant string
	tokens int
	reply  chan result
}

type kindState struct {
	inFlight Load
	queued   Load
	waiting  []*waiter
	outcomes map[Outcome]uint64
	promoted map[int]uint64
	// recent prefills and ends, for the drain rates (the last drainN)
	prefilled, ended rateWindow
}

// drainN is how many recent events a drain rate spans.
const drainN = 64

// rateWindow is the last drainN events' times and amounts.
type rateWindow struct {
	at  [drainN]time.Time
	amt [drainN]int
	n   int
}

func (w *rateWindow) add(t time.Time, amt int) {
	w.at[w.n%drainN], w.amt[w.n%drainN] = t, amt
	w.n++
}

// rate is the window's amount per second up to now; 0 before 8 events.
func (w *rateWindow) rate(now time.Time) float64 {
	k := min(w.n, drainN)
	if k < 8 {
		return 0
	}
	oldest := w.at[(w.n-k)%drainN]
	span := now.Sub(oldest).Seconds()
	if span <= 0 {
		return 0
	}
	sum := 0
	for i := range k {
		sum += w.amt[(w.n-k+i)%drainN]
	}
	return float64(sum) / span
}

type owner struct {
	q     *Queue
	cfg   Config
	kinds map[string]*kindState
	rpm   map[string]Bucket
	tpm   map[string]Bucket
}

func (q *Queue) own(cfg Config) {
	o := &owner{q: q, cfg: cfg, kinds: map[string]*kindState{}, rpm: map[string]Bucket{}, tpm: map[string]Bucket{}}
	defer close(q.done)
	for m := range q.in {
		if m.op == opConfig && m.cfg == nil {
			o.closeAll()
			return
		}
		o.safe(m)
	}
}

// safe handles one message behind a recover boundary: a bug fails that
// request (or nothing), never the gateway.
func (o *owner) safe(m msg) {
	defer func() {
		if v := recover(); v != nil {
			if h := o.q.opts.OnPanic; h != nil {
				h("admission queue", v, debug.Stack())
			}
			if m.reply != nil {
				select {
				case m.reply <- result{refusal: &Refusal{Status: http.StatusInternalServerError, Code: "internal_error", Reason: "internal", Message: fmt.Sprintf("internal error in the gateway's admission queue (recovered: %v)", v)}}:
				default:
				}
			}
		}
	}()
	o.handle(m)
}

func (o *owner) kind(k string) *kindState {
	ks := o.kinds[k]
	if ks == nil {
		ks = &kindState{outcomes: map[Outcome]uint64{}, promoted: map[int]uint64{}}
		o.kinds[k] = ks
	}
	return ks
}

// limits is kind's bounds now, per rank times its routable ranks.
func (o *owner) limits(kind string) Limits {
	kc := o.cfg.Kinds[kind]
	ranks := func(k string) int {
		if o.q.opts.Ranks == nil || k == "" {
			return 1
		}
		return max(1, o.q.opts.Ranks(k))
	}
	l := Limits{QueueRequests: kc.QueueRequests, QueueTokens: kc.QueueTokens, Aging: kc.Aging}
	if kc.TokensPerRank > 0 {
		l.Tokens = kc.TokensPerRank * ranks(kc.TokensKind)
	}
	if kc.RequestsPerRank > 0 {
		l.Requests = kc.RequestsPerRank * ranks(kc.RequestsKind)
	}
	return l
}

func (o *owner) handle(m msg) {
	now := o.q.opts.Now()
	switch m.op {
	case opEnter:
		o.enter(m, now)
	case opLeave:
		o.leave(m, now)
	case opStarted:
		ks := o.kind(m.kind)
		ks.inFlight.Tokens -= m.tokens
		ks.prefilled.add(now, m.tokens)
		o.release(m.kind, now)
	case opDone:
		ks := o.kind(m.kind)
		ks.inFlight.Requests--
		ks.inFlight.Tokens -= m.tokens
		ks.ended.add(now, 1)
		if k, ok := o.cfg.Keys[m.tenant]; ok && m.output > 0 {
			o.tpm[m.tenant] = Settle(o.tpm[m.tenant], k.TPM, float64(m.output), now)
		}
		o.release(m.kind, now)
	case opConfig:
		o.cfg = *m.cfg
		for k := range o.kinds {
			o.release(k, now)
		}
	case opSnapshot:
		m.snap <- o.snapshot(now)
	}
}

func (o *owner) enter(m msg, now time.Time) {
	ks := o.kind(m.kind)
	a := m.ask
	if k, ok := o.cfg.Keys[m.tenant]; ok && (k.RPM > 0 || k.TPM > 0) {
		d, rpm, tpm := DecideLimit(k, o.rpm[m.tenant], o.tpm[m.tenant], a.Tokens, now)
		if d.Verdict == Shed {
			ks.outcomes[Outcome{a.Class, d.Reason}]++
			m.reply <- result{refusal: refusal(d)}
			return
		}
		o.rpm[m.tenant], o.tpm[m.tenant] = rpm, tpm
	}
	l := o.limits(m.kind)
	for {
		st := o.state(ks, l, a, now)
		d := DecideAdmission(l, st, a, now)
		switch d.Verdict {
		case Admit:
			ks.inFlight.Requests++
			ks.inFlight.Tokens += a.Tokens
			ks.outcomes[Outcome{a.Class, "admitted"}]++
			m.reply <- result{ticket: &Ticket{q: o.q, kind: m.kind, tenant: m.tenant, tokens: a.Tokens}}
			return
		case Wait:
			ks.waiting = append(ks.waiting, &waiter{id: m.id, w: Waiter{Class: a.Class, Tokens: a.Tokens, Arrived: a.Arrived}, tenant: m.tenant, tokens: a.Tokens, reply: m.reply})
			ks.queued.Requests++
			ks.queued.Tokens += a.Tokens
			if h := o.q.opts.OnQueue; h != nil {
				h(1)
			}
			m.reply <- result{waiting: true}
			return
		case Displace:
			o.shedLowest(m.kind, ks, l, now)
		default:
			ks.outcomes[Outcome{a.Class, d.Reason}]++
			m.reply <- result{refusal: refusal(d)}
			return
		}
	}
}

// state is what DecideAdmission reads of a kind for a.
func (o *owner) state(ks *kindState, l Limits, a Ask, now time.Time) State {
	st := State{InFlight: ks.inFlight, Queued: ks.queued, DrainTokens: ks.prefilled.rate(now), DrainRequests: ks.ended.rate(now)}
	ws := o.waiters(ks)
	for _, w := range ws {
		if Effective(w, l.Aging, now) >= a.Class {
			st.Ahead.Requests++
			st.Ahead.Tokens += w.Tokens
		}
	}
	if i := Lowest(ws, l.Aging, now); i >= 0 {
		st.Lowest = Effective(ws[i], l.Aging, now)
	}
	return st
}

func (o *owner) waiters(ks *kindState) []Waiter {
	ws := make([]Waiter, len(ks.waiting))
	for i, w := range ks.waiting {
		ws[i] = w.w
	}
	return ws
}

// shedLowest sheds the kind's lowest waiting request: a higher class
// takes its place in the full queue.
func (o *owner) shedLowest(kind string, ks *kindState, l Limits, now time.Time) {
	i := Lowest(o.waiters(ks), l.Aging, now)
	if i < 0 {
		return
	}
	w := o.remove(ks, i, now, kind)
	ks.outcomes[Outcome{w.w.Class, ReasonDisplaced}]++
	w.reply <- result{refusal: &Refusal{Status: http.StatusServiceUnavailable, Code: "queue_displaced", Reason: ReasonDisplaced, After: time.Second,
		Message: "a request of a higher priority class took this one's place in the gateway's full queue; retry shortly"}}
}

func (o *owner) remove(ks *kindState, i int, now time.Time, kind string) *waiter {
	w := ks.waiting[i]
	ks.waiting = append(ks.waiting[:i], ks.waiting[i+1:]...)
	ks.queued.Requests--
	ks.queued.Tokens -= w.tokens
	if h := o.q.opts.OnQueue; h != nil {
		h(-1)
	}
	if h := o.q.opts.OnLeave; h != nil {
		h(kind, w.w.Class, now.Sub(w.w.Arrived))
	}
	return w
}

// leave: a waiting request gave up (its deadline, its client); when it
// was admitted meanwhile its ticket is already in its reply.
func (o *owner) leave(m msg, now time.Time) {
	ks := o.kind(m.kind)
	for i, w := range ks.waiting {
		if w.id != m.id {
			continue
		}
		o.remove(ks, i, now, m.kind)
		ks.outcomes[Outcome{w.w.Class, m.reason}]++
		r := &Refusal{Status: 499, Code: "client_gone", Reason: m.reason, Message: "the request ended while it waited in the gateway's queue"}
		if m.reason == ReasonDeadline {
			r = &Refusal{Status: http.StatusServiceUnavailable, Code: "queue_timeout", Reason: ReasonDeadline, After: time.Second,
				Message: fmt.Sprintf("the request waited %s in the gateway's queue, its whole gateway.queue_timeout, before the engines could take it", round(now.Sub(w.w.Arrived)))}
		}
		w.reply <- result{refusal: r}
		o.release(m.kind, now) // it may have been first in line
		return
	}
}

// release admits waiting requests of kind in DecideNext's order while the
// engines have room.
func (o *owner) release(kind string, now time.Time) {
	ks := o.kinds[kind]
	if ks == nil {
		return
	}
	l := o.limits(kind)
	for len(ks.waiting) > 0 {
		i, promoted := DecideNext(l, ks.inFlight, o.waiters(ks), now)
		if i < 0 {
			return
		}
		w := o.remove(ks, i, now, kind)
		ks.inFlight.Requests++
		ks.inFlight.Tokens += w.tokens
		ks.outcomes[Outcome{w.w.Class, "admitted"}]++
		if promoted {
			ks.promoted[w.w.Class]++
		}
		w.reply <- result{ticket: &Ticket{q: o.q, kind: kind, tenant: w.tenant, tokens: w.tokens}}
	}
}

func (o *owner) closeAll() {
	for _, ks := range o.kinds {
		for _, w := range ks.waiting {
			w.reply <- result{refusal: closedRefusal}
		}
		ks.waiting = nil
	}
}

func (o *owner) snapshot(now time.Time) Snapshot {
	var s Snapshot
	names := make([]string, 0, len(o.kinds))
	for k := range o.kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ks := o.kinds[k]
		kn := KindSnapshot{Kind: k, Limits: o.limits(k), InFlight: ks.inFlight, Queued: ks.queued, Waiting: map[int]Load{},
			Outcomes: make(map[Outcome]uint64, len(ks.outcomes)), Promoted: make(map[int]uint64, len(ks.promoted))}
		for _, w := range ks.waiting {
			l := kn.Waiting[w.w.Class]
			l.Requests++
			l.Tokens += w.tokens
			kn.Waiting[w.w.Class] = l
		}
		for c, n := range ks.outcomes {
			kn.Outcomes[c] = n
		}
		for c, n := range ks.promoted {
			kn.Promoted[c] = n
		}
		s.Kinds = append(s.Kinds, kn)
	}
	return s
}

func refusal(d Decision) *Refusal {
	// A deadline seen at arrival is queue_deadline; one that passed while
	// the request waited, queue_timeout (leave).
	code := map[string]string{ReasonQueueFull: "queue_full", ReasonDeadline: "queue_deadline", ReasonRateLimit: "rate_limit_exceeded", ReasonTooLarge: "rate_limit_exceeded"}[d.Reason]
	return &Refusal{Status: d.Status, Code: code, Reason: d.Reason, After: d.After, Message: d.Message}
}

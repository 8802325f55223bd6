package lane

// What a connection that has not settled may cost. A handshake port
// answers anyone who can reach it: a local process that only sent a ZMTP
// greeting and READY, churning thousands of connections, once grew tsd
// by gigabytes. So, from accept until a connection settles (a ROUTER's
// first message, HELLO or a registration; a PULL's admission):
//
//   - its source must have a token (a token bucket per source: a remote
//     address, or a local peer's user), or it is closed at accept, before
//     a byte is read; one that settles gives its token back, so engines
//     that register never use up their source's burst;
//   - it counts against its socket's MaxPending and the transport's
//     MaxPendingTotal (and its socket's MaxConns), or it is closed;
//   - its greeting is read into 512 bytes, its READY may be 4 KiB at most,
//     and the whole greeting has HandshakeTimeout;
//   - a refused connection is closed at once and everything it held is
//     given back (its slots; the token is kept: refusals are the churn).
//
// Refusals are logged at most once per interval per socket, with counts
// by reason, never once per connection.

import (
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// bucket is one source's tokens as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// churnRate is a token bucket's rule: perSec tokens a second, at most
// burst held. A source seen for the first time starts full.
type churnRate struct {
	perSec float64
	burst  float64
}

// refill is b at now. A clock that went back adds nothing.
func (r churnRate) refill(b bucket, now time.Time) bucket {
	if b.at.IsZero() {
		return bucket{tokens: r.burst, at: now}
	}
	if now.After(b.at) {
		b.tokens = min(r.burst, b.tokens+now.Sub(b.at).Seconds()*r.perSec)
		b.at = now
	}
	return b
}

// take is the pure rule for a new connection: the bucket after, and
// whether the connection may go on (a token was there).
func (r churnRate) take(b bucket, now time.Time) (bucket, bool) {
	b = r.refill(b, now)
	if b.tokens < 1 {
		return b, false
	}
	b.tokens--
	return b, true
}

// refund gives back the token of a connection that settled.
func (r churnRate) refund(b bucket, now time.Time) bucket {
	b = r.refill(b, now)
	b.tokens = min(r.burst, b.tokens+1)
	return b
}

// full reports a bucket that has refilled: it says nothing a new one
// would not, so the table may drop it.
func (r churnRate) full(b bucket, now time.Time) bool {
	return r.refill(b, now).tokens >= r.burst
}

// maxSources bounds the limiter's table; past it, full buckets are
// dropped, and sources that still do not fit share one bucket.
const maxSources = 4096

// churnLimiter is the token buckets of a transport's sources.
type churnLimiter struct {
	rate churnRate
	off  bool
	now  func() time.Time

	mu      sync.Mutex
	sources map[string]bucket
}

func newChurnLimiter(o TransportOptions, now func() time.Time) *churnLimiter {
	return &churnLimiter{rate: churnRate{perSec: o.ChurnRate, burst: float64(o.ChurnBurst)}, off: o.ChurnRate < 0, now: now, sources: map[string]bucket{}}
}

// key is the table's entry for src: src itself, or the shared overflow
// entry when the table is full of sources still refilling.
func (l *churnLimiter) key(src string, now time.Time) string {
	if _, ok := l.sources[src]; ok || len(l.sources) < maxSources {
		return src
	}
	for k, b := range l.sources {
		if l.rate.full(b, now) {
			delete(l.sources, k)
		}
	}
	if len(l.sources) < maxSources {
		return src
	}
	return "" // the overflow bucket
}

// take reports whether a new connection from src may go on.
func (l *churnLimiter) take(src string) bool {
	if l.off {
		return true
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.key(src, now)
	b, ok := l.rate.take(l.sources[k], now)
	l.sources[k] = b
	return ok
}

// refund gives src's token back.
func (l *churnLimiter) refund(src string) {
	if l.off {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.sources[src]; ok {
		l.sources[src] = l.rate.refund(b, now)
	}
}

// sourceOf names the source a connection's churn is counted against: a
// remote peer's address; a local peer's user (loopback tcp, or ipc),
// since every local connection comes from 127.0.0.1 and a process may
// change its pid at will, but not its user.
func sourceOf(p PeerInfo) string {
	if p.UID >= 0 {
		return fmt.Sprintf("uid %d", p.UID)
	}
	if p.Network == "unix" {
		return "unix"
	}
	host, _, err := net.SplitHostPort(p.Addr)
	if err != nil {
		return p.Addr
	}
	return host
}

// admission is what a transport's sockets share: the sources' buckets
// and the count of unsettled connections over all of them.
type admission struct {
	limiter *churnLimiter
	max     int

	mu      sync.Mutex
	pending int
}

func newAdmission(o TransportOptions) *admission {
	return &admission{limiter: newChurnLimiter(o, time.Now), max: o.MaxPendingTotal}
}

func (a *admission) reserve() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending >= a.max {
		return false
	}
	a.pending++
	return true
}

func (a *admission) release() {
	a.mu.Lock()
	a.pending--
	a.mu.Unlock()
}

// ticket is a connection's place among the unsettled ones, from accept
// until settle: its socket's and the transport's slots and its source's
// token.
type ticket struct {
	sock *zsock
	src  string
	once sync.Once
}

// settle gives the slots back, and the token too when the connection
// proved itself (refund). Only the first call counts.
func (t *ticket) settle(refund bool) {
	if t == nil {
		return
	}
	t.once.Do(func() {
		s := t.sock
		s.mu.Lock()
		s.pending--
		s.mu.Unlock()
		s.adm.release()
		if refund {
			s.adm.limiter.refund(t.src)
		}
	})
}

// refusalEvery is how often a socket logs its refused connections.
const refusalEvery = 10 * time.Second

// refusalLog logs a socket's refused connections: the first of an
// interval at once, with its peer and error, the rest counted by reason
// and logged in one line when the interval ends.
type refusalLog struct {
	log          *slog.Logger
	role, socket string
	every        time.Duration
	now          func() time.Time

	mu       sync.Mutex
	next     time.Time      // before this, refusals are only counted
	counts   map[string]int // by reason, since the last line
	lastPeer string
	lastErr  string
	timer    *time.Timer
	closed   bool
}

func newRefusalLog(log *slog.Logger, role, socket string) *refusalLog {
	return &refusalLog{log: log, role: role, socket: socket, every: refusalEvery, now: time.Now, counts: map[string]int{}}
}

// note records one refused connection: why is a short reason ("rate",
// "peer check"), err its detail (nil when why says it all).
func (r *refusalLog) note(why, peer string, err error) {
	detail := why
	if err != nil {
		detail = err.Error()
	}
	r.mu.Lock()
	now := r.now()
	if !now.Before(r.next) && len(r.counts) == 0 {
		r.next = now.Add(r.every)
		r.mu.Unlock()
		r.log.Warn("lane connection refused", "worker", r.role, "socket", r.socket, "peer", peer, "why", why, "err", detail)
		return
	}
	r.counts[why]++
	r.lastPeer, r.lastErr = peer, detail
	if r.timer == nil && !r.closed {
		r.timer = time.AfterFunc(max(r.next.Sub(now), 0), r.flush)
	}
	r.mu.Unlock()
}

// flush logs what was counted since the last line.
func (r *refusalLog) flush() {
	r.mu.Lock()
	r.timer = nil
	if len(r.counts) == 0 {
		r.mu.Unlock()
		return
	}
	total, by := 0, make([]string, 0, len(r.counts))
	for why, n := range r.counts {
		total += n
		by = append(by, fmt.Sprintf("%s %d", why, n))
	}
	sort.Strings(by)
	peer, last := r.lastPeer, r.lastErr
	clear(r.counts)
	r.next = r.now().Add(r.every)
	r.mu.Unlock()
	r.log.Warn("lane connections refused", "worker", r.role, "socket", r.socket, "count", total, "by", strings.Join(by, ", "),
		"last_peer", peer, "last_err", last, "over", r.every)
}

// close logs what is still counted and stops the timer.
func (r *refusalLog) close() {
	r.mu.Lock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.mu.Unlock()
	r.flush()
}

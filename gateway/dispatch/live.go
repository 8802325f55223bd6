package dispatch

import (
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The dispatch's live settings (tsd apply, docs/architecture.md §4.3):
// routing policies, retry knobs, the queue timeout and the circuit
// breakers' knobs. A request reads liveConfig once (its flight keeps the
// retry knobs it started with); a change swaps the whole value.

// liveConfig is what tsd apply may change while requests run.
type liveConfig struct {
	retry                                     RetryConfig
	queueTimeout                              time.Duration // negative: no wait
	prefillPolicy, decodePolicy, encodePolicy string
	routing                                   routing.Config
}

// liveOf is the plan's live settings, policies defaulted.
func liveOf(p profiles.GatewayPlan, queueTimeout time.Duration) *liveConfig {
	return &liveConfig{retry: RetryConfigOf(p.Retry), queueTimeout: queueTimeout, routing: routingConfig(p),
		prefillPolicy: orDefault(p.Policy.Prefill, routing.RoundRobin), decodePolicy: orDefault(p.Policy.Decode, routing.RoundRobin),
		encodePolicy: orDefault(p.Policy.Encode, routing.ConsistentHashing)}
}

// Reconfigure takes p's policies and their knobs, retry and breaker
// knobs, and the queue timeout (as the gateway resolved it) for requests
// admitted from now on. The router keeps the state of a pool whose
// policy and knobs stay (its radix tree, sticky keys); breakers keep
// their state under new knobs; switched on, every worker's starts
// closed; switched off, routing ignores them.
func (g *Dispatcher) Reconfigure(p profiles.GatewayPlan, queueTimeout time.Duration) error {
	g.liveMu.Lock()
	defer g.liveMu.Unlock()
	next := liveOf(p, queueTimeout)
	cur := g.live.Load()
	if next.prefillPolicy != cur.prefillPolicy || next.decodePolicy != cur.decodePolicy || !reflect.DeepEqual(next.routing, cur.routing) {
		if err := g.router.Reconfigure(routing.Options{Prefill: next.prefillPolicy, Decode: next.decodePolicy, Config: next.routing}); err != nil {
			return fmt.Errorf("routing policies: %w", err)
		}
	}
	cfg := BreakerConfigOf(p.CircuitBreaker)
	b := g.breakers.p.Load()
	switch {
	case b != nil && cfg.Enabled():
		if !b.send(bookCmd{cfg: &cfg}, g.shutdown) {
			return fmt.Errorf("circuit breakers: the gateway is shutting down")
		}
	case b != nil:
		g.breakers.p.Store(nil)
		close(b.quit)
	case cfg.Enabled():
		g.startBook(cfg, g.roleNames())
	}
	g.queue.Reconfigure(queueConfig(p))
	g.live.Store(next)
	return nil
}

// roleNames is every worker's role, in the lane's order.
func (g *Dispatcher) roleNames() []string {
	var roles []string
	for _, w := range g.lane.Workers() {
		roles = append(roles, w.Role())
	}
	return roles
}

// startBook starts a breaker book for roles (none when cfg is off).
func (g *Dispatcher) startBook(cfg BreakerConfig, roles []string) {
	b := newBreakerBook(cfg, roles, g.now, func(role, from, to, reason string) {
		if m := g.metrics.BreakerTransitions; m != nil {
			m.WithLabelValues(role, from, to).Inc()
		}
		if g.onEvent != nil {
			g.onEvent("breaker", role, fmt.Sprintf("%s circuit breaker %s → %s (%s)", role, from, to, reason))
		}
	})
	if b == nil {
		return
	}
	g.breakers.p.Store(b)
	go func() {
		defer g.recoverHere("circuit breakers", nil)
		b.run(g.lane, g.shutdown)
	}()
}

// bookRef is the dispatcher's breaker book; tsd apply swaps it when it
// turns breakers on or off.
type bookRef struct{ p atomic.Pointer[breakerBook] }

func (r *bookRef) on() bool                                { return r.p.Load() != nil }
func (r *bookRef) current() *breakerView                   { return r.p.Load().current() }
func (r *bookRef) report(o outcome, stop <-chan struct{})  { r.p.Load().report(o, stop) }
func (r *bookRef) status() []snapshot.BreakerStatus        { return r.p.Load().status() }
func (r *bookRef) command(c bookCmd, stop <-chan struct{}) { r.p.Load().send(c, stop) }

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

// add puts w in its kind's pool (building pools: the value is not yet
// shared).
func (ps *pools) add(w *lane.Worker) {
	switch w.Kind() {
	case profiles.KindPrefill:
		ps.prefill.add(w)
	case profiles.KindDecode:
		ps.decode.add(w)
	case profiles.KindEncode:
		ps.encode = append(ps.encode, w)
	}
}

// clone is a copy whose slices a change may grow or cut.
func (ps *pools) clone() *pools {
	c := &pools{}
	for _, w := range ps.prefill.workers {
		c.prefill.add(w)
	}
	for _, w := range ps.decode.workers {
		c.decode.add(w)
	}
	c.encode = append(c.encode, ps.encode...)
	return c
}

// AddWorker routes to w from now on (it is routable once its ranks
// register and its view says so), with a closed breaker.
func (g *Dispatcher) AddWorker(w *lane.Worker) {
	g.liveMu.Lock()
	defer g.liveMu.Unlock()
	g.breakers.command(bookCmd{add: w.Role()}, g.shutdown)
	ps := g.pools().clone()
	ps.add(w)
	g.ps.Store(ps)
}

// RemoveWorker stops routing to role's worker; requests on it have ended
// (the supervisor drained and stopped it first).
func (g *Dispatcher) RemoveWorker(role string) {
	g.liveMu.Lock()
	defer g.liveMu.Unlock()
	old := g.pools()
	ps := &pools{}
	for _, ws := range [][]*lane.Worker{old.prefill.workers, old.decode.workers, old.encode} {
		for _, w := range ws {
			if w.Role() != role {
				ps.add(w)
			}
		}
	}
	g.ps.Store(ps)
	g.breakers.command(bookCmd{remove: role}, g.shutdown)
	g.enc.mu.Lock()
	delete(g.enc.drops, role)
	delete(g.enc.pending, role)
	g.enc.mu.Unlock()
}

// RenameWorker follows a worker the lane renamed: its breaker and encode
// state move to the new name (the pools hold the worker itself).
func (g *Dispatcher) RenameWorker(from, to string) {
	g.liveMu.Lock()
	defer g.liveMu.Unlock()
	g.breakers.command(bookCmd{from: from, to: to}, g.shutdown)
	g.enc.mu.Lock()
	defer g.enc.mu.Unlock()
	if d, ok := g.enc.drops[from]; ok {
		delete(g.enc.drops, from)
		g.enc.drops[to] = d
	}
	if n, ok := g.enc.pending[from]; ok {
		delete(g.enc.pending, from)
		g.enc.pending[to] = n
	}
}

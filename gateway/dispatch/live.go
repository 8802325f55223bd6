package dispatch

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/profiles"
)

// The dispatch's live settings (tsd apply, docs/architecture.md §4.3):
// the workers routed to, routing policies, retry knobs, the queue timeout
// and the circuit breakers' knobs. A request reads liveConfig once (its
// flight keeps the retry knobs it started with); a change swaps the whole
// value.

// liveConfig is what tsd apply may change while requests run.
type liveConfig struct {
	retry                                     RetryConfig
	queueTimeout                              time.Duration // negative: no wait
	prefillPolicy, decodePolicy, encodePolicy string
	aggregatedPolicy                          string
	routing                                   routing.Config
	// layout is gateway.disaggregation and gateway.conditional: which
	// route a request takes (routing.DecideLayout).
	layout routing.LayoutConfig
}

// liveOf is the plan's live settings, policies defaulted.
func liveOf(p profiles.GatewayPlan, queueTimeout time.Duration) *liveConfig {
	return &liveConfig{retry: RetryConfigOf(p.Retry), queueTimeout: queueTimeout, routing: routingConfig(p),
		prefillPolicy: orDefault(p.Policy.Prefill, routing.RoundRobin), decodePolicy: orDefault(p.Policy.Decode, routing.RoundRobin),
		encodePolicy: orDefault(p.Policy.Encode, routing.ConsistentHashing), aggregatedPolicy: orDefault(p.Policy.Aggregated, routing.RoundRobin),
		layout: layoutConfig(p)}
}

// layoutConfig is the plan's gateway.disaggregation and
// gateway.conditional in gateway/routing's terms. A plan that names no
// disaggregation (a hand-written one) routes always prefill → decode, or
// never when it has aggregated workers only; a conditional one without
// thresholds takes Dynamo's defaults, as the profile does.
func layoutConfig(p profiles.GatewayPlan) routing.LayoutConfig {
	c := routing.LayoutConfig{Mode: p.Disaggregation, MaxUncachedTokens: p.Conditional.MaxUncachedTokens,
		MaxUncachedRatio: p.Conditional.MaxUncachedRatio, PrefillBusy: p.Conditional.PrefillBusy}
	if c.Mode == "" {
		c.Mode = routing.DisaggAlways
		if onlyAggregated(p.Workers) {
			c.Mode = routing.DisaggNever
		}
	}
	if c.MaxUncachedTokens == 0 && c.MaxUncachedRatio == 0 {
		c.MaxUncachedTokens, c.MaxUncachedRatio = defaultMaxUncachedTokens, defaultMaxUncachedRatio
	}
	return c
}

// Dynamo's conditional-disaggregation defaults, as gateway.conditional
// has them (profiles/schema.go).
const (
	defaultMaxUncachedTokens = 2048
	defaultMaxUncachedRatio  = 0.7
)

// onlyAggregated: the plan's workers are aggregated engines (and none
// prefills or decodes).
func onlyAggregated(ws []profiles.WorkerPlan) bool {
	agg := false
	for _, w := range ws {
		switch w.Kind {
		case profiles.KindAggregated:
			agg = true
		case profiles.KindPrefill, profiles.KindDecode:
			return false
		}
	}
	return agg
}

// liveState is what tsd apply changes under the dispatch: the settings
// and the worker set, each an immutable value swapped whole, so a
// request reads each once and routes on exactly what it read. mu orders
// the changes (one Reconfigure or worker change at a time); readers take
// no lock.
type liveState struct {
	mu  sync.Mutex
	cfg atomic.Pointer[liveConfig]
	ps  atomic.Pointer[pools]
}

// config is the settings now.
func (s *liveState) config() *liveConfig { return s.cfg.Load() }

// pools is the worker set now.
func (s *liveState) pools() *pools { return s.ps.Load() }

// pools are the workers of each kind.
type pools struct {
	prefill, decode, aggregated pool
	encode                      []*lane.Worker
}

// all is every routed worker, by kind.
func (ps *pools) all() [][]*lane.Worker {
	return [][]*lane.Worker{ps.prefill.workers, ps.decode.workers, ps.aggregated.workers, ps.encode}
}

// pool is the workers of one PD kind.
type pool struct {
	workers []*lane.Worker
	src     []rankSource // the same workers, as routing reads them
}

func (p *pool) add(w *lane.Worker) {
	p.workers = append(p.workers, w)
	p.src = append(p.src, w)
}

// routable counts the pool's workers that have a routable rank.
func (p *pool) routable() int {
	n := 0
	for _, w := range p.workers {
		if len(w.Routable()) > 0 {
			n++
		}
	}
	return n
}

// add puts w in its kind's pool (building pools: the value is not yet
// shared).
func (ps *pools) add(w *lane.Worker) {
	switch w.Kind() {
	case profiles.KindPrefill:
		ps.prefill.add(w)
	case profiles.KindDecode:
		ps.decode.add(w)
	case profiles.KindAggregated:
		ps.aggregated.add(w)
	case profiles.KindEncode:
		ps.encode = append(ps.encode, w)
	}
}

// clone is a copy whose slices a change may grow or cut.
func (ps *pools) clone() *pools {
	c := &pools{}
	for _, ws := range ps.all() {
		for _, w := range ws {
			c.add(w)
		}
	}
	return c
}

// Reconfigure takes p's policies and their knobs, the disaggregation
// setting and its thresholds, retry and breaker knobs, and the queue
// timeout (as the gateway resolved it) for requests
// admitted from now on. The router keeps the state of a pool whose
// policy and knobs stay (its radix tree, sticky keys); breakers keep
// their state under new knobs; switched on, every worker's starts
// closed; switched off, routing ignores them.
func (g *Dispatcher) Reconfigure(p profiles.GatewayPlan, queueTimeout time.Duration) error {
	g.live.mu.Lock()
	defer g.live.mu.Unlock()
	next := liveOf(p, queueTimeout)
	cur := g.live.config()
	if next.prefillPolicy != cur.prefillPolicy || next.decodePolicy != cur.decodePolicy || next.aggregatedPolicy != cur.aggregatedPolicy ||
		!reflect.DeepEqual(next.routing, cur.routing) {
		if err := g.routes.router.Reconfigure(routing.Options{Prefill: next.prefillPolicy, Decode: next.decodePolicy, Aggregated: next.aggregatedPolicy,
			Config: next.routing}); err != nil {
			return fmt.Errorf("routing policies: %w", err)
		}
	}
	if err := g.breakers.set(BreakerConfigOf(p.CircuitBreaker), func() []string { return laneRoles(g.lane) }); err != nil {
		return err
	}
	g.live.cfg.Store(next)
	g.queue.Reconfigure(queueConfig(p))
	return nil
}

// laneRoles is every worker's role, in the lane's order.
func laneRoles(l *lane.Lane) []string {
	var roles []string
	for _, w := range l.Workers() {
		roles = append(roles, w.Role())
	}
	return roles
}

// AddWorker routes to w from now on (it is routable once its ranks
// register and its view says so), with a closed breaker.
func (g *Dispatcher) AddWorker(w *lane.Worker) {
	g.live.mu.Lock()
	defer g.live.mu.Unlock()
	g.breakers.command(bookCmd{add: w.Role()}, g.shutdown)
	ps := g.live.pools().clone()
	ps.add(w)
	g.live.ps.Store(ps)
}

// RemoveWorker stops routing to role's worker; requests on it have ended
// (the supervisor drained and stopped it first).
func (g *Dispatcher) RemoveWorker(role string) {
	g.live.mu.Lock()
	defer g.live.mu.Unlock()
	old := g.live.pools()
	ps := &pools{}
	for _, ws := range old.all() {
		for _, w := range ws {
			if w.Role() != role {
				ps.add(w)
			}
		}
	}
	g.live.ps.Store(ps)
	g.breakers.command(bookCmd{remove: role}, g.shutdown)
	g.enc.forget(role)
}

// RenameWorker follows a worker the lane renamed: its breaker and encode
// state move to the new name (the pools hold the worker itself).
func (g *Dispatcher) RenameWorker(from, to string) {
	g.live.mu.Lock()
	defer g.live.mu.Unlock()
	g.breakers.command(bookCmd{from: from, to: to}, g.shutdown)
	g.enc.rename(from, to)
}

package dispatch

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/profiles"
)

// The dispatch's side of routing: the lane's routable ranks (and, for
// kv_aware, the KV index) become gateway/routing's view, its Router
// decides the route (prefill → decode, or one aggregated leg) and its
// legs, and the choice becomes legs and, PD, a bootstrap room.

// leg is one chosen engine rank for one request.
type leg struct {
	w  *lane.Worker
	id int
}

// rankSource is what routing reads of a worker: its routable ranks and
// its DP size. *lane.Worker implements it; tests use a fake whose ranks
// vanish between calls.
type rankSource interface {
	Routable() []lane.RankLoad
	DPSize() int
	Role() string
}

// legChoice is a routing decision: the index of the worker in its pool
// and the engine identity on it.
type legChoice struct{ worker, identity int }

// errNoPrefill, errNoDecode and errNoAggregated are the refusals while
// no worker of a kind the request's route needs can take it; Generate
// waits for one (QueueTimeout) first.
var (
	errNoPrefill    = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_prefill_worker", Message: "no prefill engine rank is registered and routed"}
	errNoDecode     = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_decode_worker", Message: "no decode engine rank is registered and routed"}
	errNoAggregated = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_aggregated_worker", Message: "no aggregated engine rank is registered and routed"}
)

// routeInfo is what a pick decided, beyond the legs: the route and why
// (layout), the access line's fields, the decision counter's labels, and
// the weights the legs carry in their ranks' in-flight tokens. An
// aggregated route's one choice is in pre (preRank its DP rank) and its
// leg's weight in decWeight: the leg that decodes.
type routeInfo struct {
	layout               routing.LayoutDecision
	pre, dec             routing.Choice
	preRank, decRank     int // DP ranks
	prompt               int
	preWeight, decWeight int
}

// aggregated: the route is one leg on an aggregated engine.
func (ri routeInfo) aggregated() bool { return ri.layout.Layout == routing.LayoutAggregated }

// alwaysPD is the layout of a request under disaggregation: always.
var alwaysPD = routing.LayoutDecision{Layout: routing.LayoutPD, Reason: routing.LayoutReasonAlways}

// views reads each worker's routable ranks exactly once: ranks that
// vanish meanwhile can make a later Submit fail cleanly, but never make
// the choice index an empty list (the 1P-dp2 kill test's "index out of
// range [-1]"). The KV events are not read here: kv_aware's Router asks
// the index in its own goroutine, where its choices are recorded too
// (kvSource), so two requests of one prefix see each other. Quiet ranks
// (outputs stopped while they have work, gateway/lane quiet.go) are left
// out while another rank of the pool is not quiet.
func views(ws []rankSource) []routing.WorkerView {
	out := make([]routing.WorkerView, len(ws))
	for i, w := range ws {
		v := routing.WorkerView{Name: w.Role()}
		for _, r := range w.Routable() {
			rv := routing.RankView{Identity: r.Identity, DPRank: r.DPRank, Reqs: r.InFlight, Tokens: r.InFlightTokens, Quiet: r.Quiet}
			if !r.Since.IsZero() {
				rv.Epoch = r.Since.UnixNano()
			}
			v.Ranks = append(v.Ranks, rv)
		}
		out[i] = v
	}
	return routing.AvoidQuiet(out)
}

// kvSource is the Router's KVSource: the dispatch's KV index as it is
// now (the gateway sets one when the first engine with events is bound,
// SetKV), or none: every worker not live, nothing predicted.
type kvSource struct{ rs *routes }

func (k kvSource) Match(worker string, prompt []int32) ([]int, bool) {
	if kv := k.rs.kvIndex(); kv != nil {
		return kv.Match(worker, prompt)
	}
	return nil, false
}

func (k kvSource) Predict(worker string, dpRank int, prompt []int32, ttl time.Duration) {
	if kv := k.rs.kvIndex(); kv != nil {
		kv.Predict(worker, dpRank, prompt, ttl)
	}
}

// kvIndex is the KV index now; nil: none.
func (rs *routes) kvIndex() KVIndex {
	if p := rs.kv.Load(); p != nil {
		return *p
	}
	return nil
}

// KV is the index kv_aware reads now; nil: none.
func (g *Dispatcher) KV() KVIndex { return g.routes.kvIndex() }

// SetKV gives kv_aware the index of the engines' KV events (the gateway
// builds it when the first engine that publishes them is bound, at
// start or by tsd apply).
func (g *Dispatcher) SetKV(kv KVIndex) {
	if kv == nil {
		g.routes.kv.Store(nil)
		return
	}
	g.routes.kv.Store(&kv)
}

// legsFor turns the Router's choice into legs: the prefill leg goes to
// the chosen rank, and the room moves to the nearest value that maps to
// it, since the decode fetches the KV from prefill DP rank room mod dp
// (docs/protocol.md §8.3).
func legsFor(p, d routing.Choice, pv, dv []routing.WorkerView, dp int, room uint64) (pl, dl legChoice, _ uint64, _ error) {
	if p.Worker < 0 {
		return pl, dl, room, errNoPrefill
	}
	if d.Worker < 0 {
		return pl, dl, room, errNoDecode
	}
	pr, dr := pv[p.Worker].Ranks[p.Rank], dv[d.Worker].Ranks[d.Rank]
	return legChoice{p.Worker, pr.Identity}, legChoice{d.Worker, dr.Identity}, RoomForRank(room, dp, pr.DPRank), nil
}

// chooseLegs is one routing decision over one read of each worker's
// routable ranks.
func chooseLegs(r *routing.Router, req routing.Request, pre, dec []rankSource, room uint64) (p, d legChoice, _ uint64, ri routeInfo, _ error) {
	pv, dv := views(pre), views(dec)
	pc, dc, err := r.Route(req, pv, dv)
	if err != nil {
		return p, d, room, ri, &RequestError{Status: http.StatusServiceUnavailable, Code: "routing_failed", Message: fmt.Sprintf("route the request: %v", err), Cause: err}
	}
	dp := 1
	if pc.Worker >= 0 {
		dp = pre[pc.Worker].DPSize()
	}
	p, d, room, err = legsFor(pc, dc, pv, dv, dp, room)
	if err != nil {
		return p, d, room, ri, err
	}
	pr, dr := pv[pc.Worker].Ranks[pc.Rank], dv[dc.Worker].Ranks[dc.Rank]
	n := len(req.Prompt)
	ri = routeInfo{pre: pc, dec: dc, preRank: pr.DPRank, decRank: dr.DPRank, prompt: n, preWeight: max(n-pc.Match, 0), decWeight: n}
	return p, d, room, ri, nil
}

// routes is the dispatch's routing side: the Router (gateway/routing)
// that owns the policies' state, the KV index kv_aware reads, and the
// wait for a routable worker. It reads the worker set and the policies
// from the live state and the breakers' view, once per decision.
type routes struct {
	router   *routing.Router
	kv       atomic.Pointer[KVIndex] // read by the Router (kvSource); set anew when apply binds the first engine with events
	split    [2]atomic.Uint64        // requests routed prefill → decode, and aggregated (the snapshot's split)
	live     *liveState
	brk      *breakers
	enc      *encoders // an image request also needs a routable encoder
	lane     *lane.Lane
	metrics  *Metrics
	queued   *atomic.Int64 // requests waiting for a worker (the front door's queue counts here too)
	shutdown <-chan struct{}
	hookPick func() // Options.HookPick
}

// route is one routing decision: the legs (an aggregated route's one leg
// is dec, the leg that decodes; pre has no worker), the bootstrap room
// moved to the chosen prefill rank, what the access line and the
// counters say of it, and the breakers' view it was routed by (the
// request's outcomes are reported against its epochs).
type route struct {
	pre, dec leg
	room     uint64
	info     routeInfo
	view     *breakerView
}

// readRanks is one read of a worker's routable ranks, so a routing
// decision decides on exactly what was read (chooseLegs reads each source
// once).
type readRanks struct {
	name  string
	ranks []lane.RankLoad
	dp    int
}

func (r readRanks) Routable() []lane.RankLoad { return r.ranks }
func (r readRanks) DPSize() int               { return max(r.dp, 1) }
func (r readRanks) Role() string              { return r.name }

// avoid is the workers a request's failed attempts ran on: its next
// attempt goes elsewhere when elsewhere has a routable rank.
type avoid map[*lane.Worker]bool

// allowed is the pool as one routing decision may see it: a worker whose
// breaker is open is left out, and so are the workers this request's
// failed attempts ran on (av), unless no other has a routable rank. With
// no breakers and nothing to avoid the pool goes as it is.
func allowed(p *pool, av avoid, view *breakerView) []rankSource {
	if view == nil && len(av) == 0 {
		return p.src
	}
	out := make([]rankSource, len(p.src))
	other := false
	for i, w := range p.workers {
		if !view.allows(w.Role()) {
			out[i] = readRanks{name: w.Role()}
			continue
		}
		rr := readRanks{name: w.Role(), ranks: p.src[i].Routable(), dp: p.src[i].DPSize()}
		out[i] = rr
		if !av[w] && len(rr.ranks) > 0 {
			other = true
		}
	}
	if other {
		for i, w := range p.workers {
			if av[w] {
				out[i] = readRanks{name: w.Role()}
			}
		}
	}
	return out
}

// pick chooses r's route and its ranks among the workers av and the
// breakers allow (allowed): under disaggregation: always the prefill and
// the decode rank, the room moved to the chosen prefill rank; under
// never or conditional the Router decides the route too (RouteLayout).
func (rs *routes) pick(r *tokenapi.Request, room uint64, av avoid, view *breakerView) (route, error) {
	if h := rs.hookPick; h != nil {
		h()
	}
	req := routing.Request{Prompt: r.InputIDs, Key: r.RoutingKey}
	ps, lc := rs.live.pools(), rs.live.config() // one worker set for the choice and its indexes
	if lc.layout.Mode != routing.DisaggAlways {
		return rs.pickLayout(req, len(r.Images) > 0, ps, lc, room, av, view)
	}
	p, d, room, ri, err := chooseLegs(rs.router, req, allowed(&ps.prefill, av, view), allowed(&ps.decode, av, view), room)
	ri.layout = alwaysPD
	if err != nil {
		return route{room: room, info: ri, view: view}, err
	}
	return route{pre: leg{w: ps.prefill.workers[p.worker], id: p.identity}, dec: leg{w: ps.decode.workers[d.worker], id: d.identity},
		room: room, info: ri, view: view}, nil
}

// pickLayout is pick under never or conditional: one read of every
// pool, and the Router's layout decision and choice over it.
func (rs *routes) pickLayout(req routing.Request, images bool, ps *pools, lc *liveConfig, room uint64, av avoid, view *breakerView) (route, error) {
	pre, dec, agg := allowed(&ps.prefill, av, view), allowed(&ps.decode, av, view), allowed(&ps.aggregated, av, view)
	pv, dv, gv := views(pre), views(dec), views(agg)
	rt, err := rs.router.RouteLayout(req, pv, dv, gv, images, lc.layout)
	out := route{room: room, view: view, info: routeInfo{layout: rt.Layout, prompt: len(req.Prompt)}}
	if err != nil {
		return out, &RequestError{Status: http.StatusServiceUnavailable, Code: "routing_failed", Message: fmt.Sprintf("route the request: %v", err), Cause: err}
	}
	n := len(req.Prompt)
	if rt.Layout.Layout == routing.LayoutAggregated {
		if rt.Agg.Worker < 0 {
			return out, errNoAggregated
		}
		ar := gv[rt.Agg.Worker].Ranks[rt.Agg.Rank]
		out.dec = leg{w: ps.aggregated.workers[rt.Agg.Worker], id: ar.Identity}
		out.info.pre, out.info.preRank, out.info.decWeight = rt.Agg, ar.DPRank, max(n-rt.Agg.Match, 0)
		return out, nil
	}
	dp := 1
	if rt.Pre.Worker >= 0 {
		dp = pre[rt.Pre.Worker].DPSize()
	}
	p, d, room, err := legsFor(rt.Pre, rt.Dec, pv, dv, dp, room)
	if err != nil {
		return out, err
	}
	pr, dr := pv[rt.Pre.Worker].Ranks[rt.Pre.Rank], dv[rt.Dec.Worker].Ranks[rt.Dec.Rank]
	out.pre, out.dec, out.room = leg{w: ps.prefill.workers[p.worker], id: p.identity}, leg{w: ps.decode.workers[d.worker], id: d.identity}, room
	out.info.pre, out.info.dec, out.info.preRank, out.info.decRank = rt.Pre, rt.Dec, pr.DPRank, dr.DPRank
	out.info.preWeight, out.info.decWeight = max(n-rt.Pre.Match, 0), n
	return out, nil
}

// pickQueued is pick that waits, up to QueueTimeout, while no worker of a
// kind the request needs is routable (the only decode drains or restarts,
// or every breaker of a kind is open, say): each lane change (a rank's
// state, a role's routing) and each breaker change wakes it to try again,
// and the client going away or the deadline ends the wait. Then the
// refusal is a 503 that says how long it waited; every 503 carries
// Retry-After.
func (rs *routes) pickQueued(ctx context.Context, r *tokenapi.Request, room uint64, av avoid) (route, error) {
	var timeout <-chan time.Time
	waited := false
	images := len(r.Images) > 0
	limit := rs.live.config().queueTimeout // as the request found it
	wait := limit
	if dl, ok := queueDeadline(ctx); ok && wait > 0 {
		// The request's deadline, not the attempt's: a retry waits only
		// what is left of it.
		wait = max(time.Until(dl), 0)
	}
	times := reqtime.FromContext(ctx)
	times.Mark(reqtime.Picking) // reqtime's queued phase: from here to the pick that routes it
	for {
		changed := rs.lane.Changed() // before looking, so no change is missed
		view := rs.brk.current()
		var err error
		var rt route
		if images && len(rs.enc.routable(view)) == 0 {
			err = errNoEncode
		} else {
			times.Mark(reqtime.RouteBegin)
			if rt, err = rs.pick(r, room, av, view); err == nil {
				times.Mark(reqtime.Routed)
				if waited {
					rs.metrics.Queued.WithLabelValues("routed").Inc()
				}
				return rt, nil
			}
		}
		if wait < 0 {
			return rt, err
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
			waited = true
			rs.queued.Add(1)
			defer rs.queued.Add(-1)
		}
		select {
		case <-changed:
		case <-view.changed():
		case <-timeout:
			rs.metrics.Queued.WithLabelValues("timeout").Inc()
			re := *err.(*RequestError)
			re.Message += fmt.Sprintf(" (waited %s for one)", limit) // the request's whole wait, over its attempts
			return rt, &re
		case <-ctx.Done():
			rs.metrics.Queued.WithLabelValues("client_gone").Inc()
			return rt, ctx.Err()
		case <-rs.shutdown:
			return rt, err
		}
	}
}

// errNoEncode refuses an image request while no encode worker is ready.
var errNoEncode = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_encode_worker", Message: "no encode engine rank is registered and routed"}

// note is called once the legs were submitted (ps nil: an aggregated
// route's one leg, ds): each leg weighs its tokens in its rank's
// in-flight load until it ends, the request's access line gets the
// decision (docs/protocol.md §11.10) and the decision is counted.
func (rs *routes) note(ctx context.Context, ri routeInfo, ps, ds *lane.Stream) {
	if ps != nil {
		ps.Weigh(ri.preWeight)
	}
	ds.Weigh(ri.decWeight)
	match := -1.0
	if ri.prompt > 0 && usesCache(ri.pre.Policy) {
		match = float64(ri.pre.Match) / float64(ri.prompt)
	}
	rec := traffic.FromContext(ctx)
	uncached, ratio := -1, -1.0
	if ri.layout.Counted {
		uncached, ratio = ri.layout.Uncached, ri.layout.Ratio
	}
	rec.Layout(ri.layout.Layout, ri.layout.Reason, uncached, ratio)
	agg := ri.aggregated()
	if agg {
		rec.RouteAggregated(ri.pre.Policy, ri.pre.Reason, match, ri.preRank)
		rs.split[1].Add(1)
	} else {
		rec.Route(ri.pre.Policy, ri.pre.Reason, match, ri.preRank, ri.decRank)
		rs.split[0].Add(1)
	}
	if c := rs.metrics.Layouts; c != nil {
		c.WithLabelValues(ri.layout.Layout, ri.layout.Reason).Inc()
	}
	if c := rs.metrics.Routes; c != nil {
		if agg {
			c.WithLabelValues(profiles.KindAggregated, ri.pre.Policy, ri.pre.Reason).Inc()
			return
		}
		c.WithLabelValues(profiles.KindPrefill, ri.pre.Policy, ri.pre.Reason).Inc()
		c.WithLabelValues(profiles.KindDecode, ri.dec.Policy, ri.dec.Reason).Inc()
	}
}

// TreeTokens is, per kind whose policy keeps a radix tree (cache_aware,
// kv_aware), the prompt tokens the tree holds (its memory, /metrics).
func (g *Dispatcher) TreeTokens() map[string]int {
	tokens, _, err := g.routes.router.TreeStats()
	if err != nil {
		return nil
	}
	out := map[string]int{}
	lc := g.live.config()
	for i, kind := range []string{profiles.KindPrefill, profiles.KindDecode, profiles.KindAggregated} {
		if p := []string{lc.prefillPolicy, lc.decodePolicy, lc.aggregatedPolicy}[i]; usesCache(p) {
			out[kind] = tokens[i]
		}
	}
	return out
}

// usesCache: the policy's decision reads a prefix cache, so its match is
// worth printing.
func usesCache(policy string) bool { return policy == routing.CacheAware || policy == routing.KVAware }

// routingConfig is the plan's routing knobs in gateway/routing's terms;
// sections the plan leaves out are at their defaults.
func routingConfig(g profiles.GatewayPlan) routing.Config {
	d := profiles.DefaultRouting()
	ca, kv, ph, mn, bk := d.CacheAware, d.KVAware, d.PrefixHash, d.Manual, d.Bucket
	if g.CacheAware != nil {
		ca = *g.CacheAware
	}
	if g.KVAware != nil {
		kv = *g.KVAware
	}
	if g.PrefixHash != nil {
		ph = *g.PrefixHash
	}
	if g.Manual != nil {
		mn = *g.Manual
	}
	if g.Bucket != nil {
		bk = *g.Bucket
	}
	return routing.Config{
		CacheAware: routing.CacheAwareConfig{Threshold: ca.CacheThreshold, BalanceAbs: ca.BalanceAbsThreshold, BalanceRel: ca.BalanceRelThreshold,
			EvictionInterval: ca.EvictionInterval.D(), MaxTreeSize: ca.MaxTreeSize},
		KVAware:    routing.KVAwareConfig{OverlapWeight: kv.OverlapWeight, LoadFactor: kv.LoadFactor, PredictTTL: kv.PredictedTTL.D()},
		PrefixHash: routing.PrefixHashConfig{PrefixTokens: ph.PrefixTokenCount, LoadFactor: ph.LoadFactor},
		Manual:     routing.ManualConfig{MaxIdle: mn.MaxIdle.D(), EvictionInterval: mn.EvictionInterval.D(), Assignment: mn.AssignmentMode},
		Bucket:     routing.BucketConfig{BalanceAbs: bk.BalanceAbsThreshold, BalanceRel: bk.BalanceRelThreshold, AdjustInterval: bk.AdjustInterval.D()},
	}
}

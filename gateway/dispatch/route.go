package dispatch

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/profiles"
)

// The dispatch's side of routing: the lane's routable ranks (and, for
// kv_aware, the KV index) become gateway/routing's view, its Router
// decides both legs, and the choice becomes legs and a bootstrap room.

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

// errNoPrefill and errNoDecode are the refusals while no worker of a
// kind can take a request; Generate waits for one (QueueTimeout) first.
var (
	errNoPrefill = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_prefill_worker", Message: "no prefill engine rank is registered and routed"}
	errNoDecode  = &RequestError{Status: http.StatusServiceUnavailable, Code: "no_decode_worker", Message: "no decode engine rank is registered and routed"}
)

// routeInfo is what a pick decided, beyond the legs: the access line's
// fields, the decision counter's labels, and the weights the legs carry
// in their ranks' in-flight tokens.
type routeInfo struct {
	pre, dec             routing.Choice
	preRank, decRank     int // DP ranks
	prompt               int
	preWeight, decWeight int
}

// views reads each worker's routable ranks exactly once: ranks that
// vanish meanwhile can make a later Submit fail cleanly, but never make
// the choice index an empty list (the 1P-dp2 kill test's "index out of
// range [-1]"). The KV events are not read here: kv_aware's Router asks
// the index in its own goroutine, where its choices are recorded too
// (kvSource), so two requests of one prefix see each other.
func views(ws []rankSource) []routing.WorkerView {
	out := make([]routing.WorkerView, len(ws))
	for i, w := range ws {
		v := routing.WorkerView{Name: w.Role()}
		for _, r := range w.Routable() {
			rv := routing.RankView{Identity: r.Identity, DPRank: r.DPRank, Reqs: r.InFlight, Tokens: r.InFlightTokens}
			if !r.Since.IsZero() {
				rv.Epoch = r.Since.UnixNano()
			}
			v.Ranks = append(v.Ranks, rv)
		}
		out[i] = v
	}
	return out
}

// kvSource is the Router's KVSource: the dispatch's KV index as it is
// now (the gateway sets one when the first engine with events is bound,
// SetKV), or none: every worker not live, nothing predicted.
type kvSource struct{ g *Dispatcher }

func (k kvSource) Match(worker string, prompt []int32) ([]int, bool) {
	if kv := k.g.kvIndex(); kv != nil {
		return kv.Match(worker, prompt)
	}
	return nil, false
}

func (k kvSource) Predict(worker string, dpRank int, prompt []int32, ttl time.Duration) {
	if kv := k.g.kvIndex(); kv != nil {
		kv.Predict(worker, dpRank, prompt, ttl)
	}
}

// KV is the index kv_aware reads now; nil: none.
func (g *Dispatcher) KV() KVIndex { return g.kvIndex() }

// kvIndex is the KV index now; nil: none.
func (g *Dispatcher) kvIndex() KVIndex {
	if p := g.kv.Load(); p != nil {
		return *p
	}
	return nil
}

// SetKV gives kv_aware the index of the engines' KV events (the gateway
// builds it when the first engine that publishes them is bound, at
// start or by tsd apply).
func (g *Dispatcher) SetKV(kv KVIndex) {
	if kv == nil {
		g.kv.Store(nil)
		return
	}
	g.kv.Store(&kv)
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
		return p, d, room, ri, &RequestError{Status: http.StatusServiceUnavailable, Code: "routing_failed", Message: fmt.Sprintf("route the request: %v", err)}
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

// pick chooses the prefill and the decode rank for r among the workers
// av and the breakers allow (allowed), and moves the room to the chosen
// prefill rank.
func (g *Dispatcher) pick(r *tokenapi.Request, room uint64, av avoid, view *breakerView) (pre, dec leg, _ uint64, _ routeInfo, _ error) {
	if h := g.opts.HookPick; h != nil {
		h()
	}
	req := routing.Request{Prompt: r.InputIDs, Key: r.RoutingKey}
	ps := g.pools() // one worker set for the choice and its indexes
	p, d, room, ri, err := chooseLegs(g.router, req, g.allowed(&ps.prefill, av, view), g.allowed(&ps.decode, av, view), room)
	if err != nil {
		return pre, dec, room, ri, err
	}
	return leg{w: ps.prefill.workers[p.worker], id: p.identity}, leg{w: ps.decode.workers[d.worker], id: d.identity}, room, ri, nil
}

// noteRoute is called once the legs were submitted: each leg weighs its
// tokens in its rank's in-flight load until it ends, the request's access
// line gets the decision (docs/protocol.md §11.10) and the decision is
// counted.
func (g *Dispatcher) noteRoute(ctx context.Context, ri routeInfo, ps, ds *lane.Stream) {
	ps.Weigh(ri.preWeight)
	ds.Weigh(ri.decWeight)
	match := -1.0
	if ri.prompt > 0 && usesCache(ri.pre.Policy) {
		match = float64(ri.pre.Match) / float64(ri.prompt)
	}
	traffic.FromContext(ctx).Route(ri.pre.Policy, ri.pre.Reason, match, ri.preRank, ri.decRank)
	if c := g.metrics.Routes; c != nil {
		c.WithLabelValues(profiles.KindPrefill, ri.pre.Policy, ri.pre.Reason).Inc()
		c.WithLabelValues(profiles.KindDecode, ri.dec.Policy, ri.dec.Reason).Inc()
	}
}

// TreeTokens is, per kind whose policy keeps a radix tree (cache_aware,
// kv_aware), the prompt tokens the tree holds (its memory, /metrics).
func (g *Dispatcher) TreeTokens() map[string]int {
	tokens, _, err := g.router.TreeStats()
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for i, kind := range []string{profiles.KindPrefill, profiles.KindDecode} {
		lc := g.live.Load()
		if p := []string{lc.prefillPolicy, lc.decodePolicy}[i]; usesCache(p) {
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

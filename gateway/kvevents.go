package gateway

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway/dispatch"
	"github.com/tsd-project/tsd/gateway/kvevents"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The gateway's side of the engines' KV events (docs/protocol.md §16):
// one subscriber follows every prefill engine whose plan gives it KV
// events; the dispatch's kv_aware policy asks it per request (Match), the
// status and /metrics read its per-rank blocks.

// newKVEvents builds the subscriber from the plan; nil when no engine
// publishes.
func newKVEvents(plan *profiles.Plan, log *slog.Logger, onPanic func(string, any, []byte)) *kvevents.Subscriber {
	var engines []kvevents.EngineConfig
	for _, w := range plan.Gateway.Workers {
		if c, ok := kvEngine(w); ok {
			engines = append(engines, c)
		}
	}
	if len(engines) == 0 {
		return nil
	}
	return subscriber(engines, log, onPanic)
}

func subscriber(engines []kvevents.EngineConfig, log *slog.Logger, onPanic func(string, any, []byte)) *kvevents.Subscriber {
	return kvevents.New(engines, kvevents.Options{Logger: log.With("component", "kv-events"), OnPanic: onPanic})
}

// followKV follows the KV events of an engine bound by tsd apply: added
// to the subscriber, or, when none ran (the deployment started with no
// engine publishing), in a new one, started at once when the gateway is
// bound and handed to kv_aware.
func (g *Gateway) followKV(c kvevents.EngineConfig) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if sub := g.kv.Load(); sub != nil {
		return sub.Add(c)
	}
	sub := subscriber([]kvevents.EngineConfig{c}, g.log, g.ReportPanic)
	g.kv.Store(sub)
	if g.bound {
		g.stopKV = g.startKVEvents(sub)
	}
	g.disp.SetKV(sub)
	g.log.Info("kv events: following the first engine that publishes them", "role", c.Worker)
	return nil
}

// kvEngine is what the subscriber follows of a worker: a prefill's KV
// event sockets, per DP rank; false when it publishes none.
func kvEngine(w profiles.WorkerPlan) (kvevents.EngineConfig, bool) {
	k := w.KVEvents
	if kind, _ := profiles.KindOf(w.Kind); k == nil || !kind.KVEvents || len(k.Publish) == 0 {
		return kvevents.EngineConfig{}, false
	}
	c := kvevents.EngineConfig{Worker: w.Role}
	for r, pub := range k.Publish {
		ep := kvevents.RankEndpoints{Publish: pub}
		if r < len(k.Replay) {
			ep.Replay = k.Replay[r]
		}
		c.Ranks = append(c.Ranks, ep)
	}
	return c, true
}

// startKVEvents dials kv's publishers and forwards each rank's
// registration with the lane (an engine's (re)start: its cache is empty)
// to the subscriber; stop ends both.
func (g *Gateway) startKVEvents(kv *kvevents.Subscriber) (stop func()) {
	if kv == nil {
		return func() {}
	}
	kv.Start()
	cur, ch, unsub := g.lane.SubscribeRanks()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := map[[2]any]time.Time{}
		note := func(ev snapshot.RankEvent) {
			r := ev.Rank
			if r.State != snapshot.RankRegistered || r.RegisteredAt.IsZero() {
				return
			}
			key := [2]any{ev.Role, r.Identity}
			if seen[key].Equal(r.RegisteredAt) {
				return // the same registration, another change
			}
			seen[key] = r.RegisteredAt
			kv.Registered(ev.Role, r.DPRank)
		}
		for _, ev := range cur {
			g.safeRankEvent(note, ev)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-ch:
				if !ok {
					return
				}
				g.safeRankEvent(note, ev)
			}
		}
	}()
	return func() {
		cancel()
		unsub()
		<-done
		kv.Close()
	}
}

func (g *Gateway) safeRankEvent(f func(snapshot.RankEvent), ev snapshot.RankEvent) {
	defer func() {
		if v := recover(); v != nil {
			g.ReportPanic("kv events registration watch", v, debug.Stack())
		}
	}()
	f(ev)
}

// kvCollector reads the subscriber's per-rank state at scrape time.
type kvCollector struct{ g *Gateway }

var (
	descKVBlocks = prometheus.NewDesc("tsd_gateway_kv_cached_blocks",
		"Blocks the prefill rank's prefix cache holds, by its KV events (docs/protocol.md §16).", []string{"role", "dp_rank"}, nil)
	descKVLive = prometheus.NewDesc("tsd_gateway_kv_events_live",
		"1 while the gateway follows the prefill rank's KV events live (subscribed, no unrecovered gap); 0: kv_aware routes the engine by cache_aware.", []string{"role", "dp_rank"}, nil)
)

func (c kvCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descKVBlocks
	ch <- descKVLive
}

func (c kvCollector) Collect(ch chan<- prometheus.Metric) {
	sub := c.g.kv.Load()
	if sub == nil {
		return
	}
	for _, e := range sub.Status() {
		for _, r := range e.Ranks {
			rank := strconv.Itoa(r.DPRank)
			live := 0.0
			if r.Live {
				live = 1
			}
			ch <- prometheus.MustNewConstMetric(descKVBlocks, prometheus.GaugeValue, float64(r.Blocks), e.Worker, rank)
			ch <- prometheus.MustNewConstMetric(descKVLive, prometheus.GaugeValue, live, e.Worker, rank)
		}
	}
}

// KV event notes, the long form (status JSON, the inspector) and the
// short form the overview has room for.
const (
	KVAbsentNote  = "kv events absent: routing by cache_aware"
	KVAbsentShort = "kv absent"
)

// kvRows adds what the subscriber knows to the traffic account's rows of
// the roles whose kind may publish KV events (prefill, aggregated): each
// rank's cached blocks, whether its events are live, and why not.
func (g *Gateway) kvRows(rows []snapshot.RoleTraffic) {
	pol := g.plan.Gateway.Policy
	if s := g.settings.Load(); s != nil {
		pol = s.Policy // the policy now, a tsd apply's included
	}
	sub := g.kv.Load()
	for i := range rows {
		row := &rows[i]
		w, ok := g.plan.Gateway.Worker(row.Role)
		if !ok {
			continue
		}
		kind, _ := profiles.KindOf(w.Kind)
		if !kind.KVEvents {
			continue
		}
		kvAware := kind.PolicyOf(pol) == profiles.PolicyKVAware
		var st kvevents.EngineStatus
		followed := false
		if sub != nil {
			st, followed = sub.StatusOf(row.Role)
		}
		switch {
		case followed && st.Live:
			row.KVEvents = snapshot.KVEventsLive
		case followed:
			row.KVEvents, row.KVNote = snapshot.KVEventsAbsent, kvNote(kvAware, st.Note)
		case kvAware:
			row.KVEvents, row.KVNote = snapshot.KVEventsAbsent, kvNote(kvAware, "the engine publishes none (kv_events: false)")
		}
		for _, r := range st.Ranks {
			for len(row.Cache) <= r.DPRank {
				row.Cache = append(row.Cache, snapshot.RankCache{DPRank: len(row.Cache)})
			}
			c := &row.Cache[r.DPRank]
			c.CachedBlocks, c.BlockSize, c.KVLive = r.Blocks, r.BlockSize, r.Live
		}
	}
}

func kvNote(kvAware bool, why string) string {
	n := "kv events absent"
	if kvAware {
		n = KVAbsentNote
	}
	if why != "" {
		n += " (" + why + ")"
	}
	return n
}

// The dispatch's kv_aware policy reads the subscriber through its own
// interface.
var _ dispatch.KVIndex = (*kvevents.Subscriber)(nil)

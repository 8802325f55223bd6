package main

import (
	"container/heap"
	"sort"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/kvevents"
	"github.com/tsd-project/tsd/gateway/routing"
)

// simulate runs reqs through the real routing.Router in a model of the
// routing bench's deployment, on simulated time: conc clients, one
// prefill engine whose DP ranks each compute one prompt at a time at
// prefillUsPerToken per uncached token, every rank's cache exact
// (pageCache, as ts-fake keeps it) and, for kv_aware, known to the router
// through the gateway's own index (kvevents.Index, one per rank) fed the
// KV events each cache emits when a prefill ends, and the blocks the
// Router predicts as it routes. A decode step of 1 ms follows each
// prefill. It returns the cached share, the requests per rank and the
// median time to first token in milliseconds. Deterministic: the same
// inputs give the same figures.
func simulate(s routingSetup, reqs []benchReq, policy string, conc int) (share float64, perRank []int, ttftP50 float64) {
	return simulateWith(s, reqs, policy, conc, routing.Config{})
}

// simulateWith is simulate with routing knobs (zero sections: defaults).
func simulateWith(s routingSetup, reqs []benchReq, policy string, conc int, cfg routing.Config) (share float64, perRank []int, ttftP50 float64) {
	var bits uint64
	clock := 0.0 // ms
	kv := &simKV{now: func() time.Time { return simEpoch.Add(time.Duration(clock * float64(time.Millisecond))) }}
	caches := make([]*pageCache, s.ranks)
	for i := range caches {
		caches[i] = newPageCache(s.page, s.capacity)
		x := kvevents.NewIndex(0)
		kv.idx = append(kv.idx, x)
		caches[i].onStore = func(key, parent uint64, hasParent bool, tokens []int32) {
			kv.apply(x, kvevents.Event{Kind: kvevents.KindBlockStored, BlockHashes: []uint64{key}, ParentHash: parent, HasParent: hasParent, TokenIDs: tokens, BlockSize: len(tokens)})
		}
		caches[i].onEvict = func(key uint64) {
			kv.apply(x, kvevents.Event{Kind: kvevents.KindBlockRemoved, BlockHashes: []uint64{key}})
		}
	}
	r := routing.NewRouter(routing.Options{Prefill: policy, Decode: routing.RoundRobin, Config: cfg, Rand: func() uint64 { bits++; return bits }, KV: kv, Now: kv.now})
	defer r.Close()
	busyUntil := make([]float64, s.ranks)
	inflight, tokens := make([]int, s.ranks), make([]int, s.ranks)
	weight, issued := make([]int, len(reqs)), make([]float64, len(reqs))
	perRank = make([]int, s.ranks)
	var ttfts []float64
	q := &simQueue{}
	next, cached, total := 0, 0, 0
	decode := []routing.WorkerView{{Name: "decode", Ranks: []routing.RankView{{}}}}
	issue := func(now float64) {
		if next == len(reqs) {
			return
		}
		i := next
		next++
		clock = now
		w := routing.WorkerView{Name: "prefill"}
		for k := range s.ranks {
			w.Ranks = append(w.Ranks, routing.RankView{Identity: k, DPRank: k, Reqs: inflight[k], Tokens: tokens[k]})
		}
		p, _, err := r.Route(routing.Request{Prompt: reqs[i].prompt}, []routing.WorkerView{w}, decode)
		if err != nil {
			panic(err)
		}
		k := w.Ranks[p.Rank].DPRank
		perRank[k]++
		hit := caches[k].match(reqs[i].prompt) // what the engine reuses at admission
		cached += hit
		total += len(reqs[i].prompt)
		weight[i] = len(reqs[i].prompt) - p.Match
		inflight[k]++
		tokens[k] += weight[i]
		busyUntil[k] = max(now, busyUntil[k]) + float64(len(reqs[i].prompt)-hit)*s.prefillUsPerToken/1000
		issued[i] = now
		heap.Push(q, simEvent{at: busyUntil[k], rank: k, req: i, prefill: true})
	}
	for range conc {
		issue(0)
	}
	for q.Len() > 0 {
		e := heap.Pop(q).(simEvent)
		clock = e.at
		if !e.prefill {
			issue(e.at)
			continue
		}
		caches[e.rank].serve(reqs[e.req].prompt)
		inflight[e.rank]--
		tokens[e.rank] -= weight[e.req]
		ttfts = append(ttfts, e.at-issued[e.req])
		heap.Push(q, simEvent{at: e.at + 1, req: e.req})
	}
	sort.Float64s(ttfts)
	return float64(cached) / float64(total), perRank, ttfts[len(ttfts)/2]
}

// simEpoch is the simulation's time 0.
var simEpoch = time.Unix(1_000_000, 0)

// simKV is the gateway's KV index over the simulated ranks: what their
// events published, and what the Router predicted (routing.KVSource).
type simKV struct {
	idx []*kvevents.Index
	now func() time.Time
}

func (k *simKV) apply(x *kvevents.Index, e kvevents.Event) {
	if _, err := x.Apply([]kvevents.Event{e}); err != nil {
		panic(err)
	}
}

func (k *simKV) Match(_ string, prompt []int32) ([]int, bool) {
	per := make([]int, len(k.idx))
	for i, x := range k.idx {
		per[i] = x.MatchAt(prompt, kvevents.PageKeys(nil, prompt, x.BlockSize()), k.now())
	}
	return per, true
}

func (k *simKV) Predict(_ string, rank int, prompt []int32, ttl time.Duration) {
	k.idx[rank].Predict(prompt, k.now(), ttl)
}

type simEvent struct {
	at        float64 // ms
	rank, req int
	prefill   bool // the prefill finished (else the request did)
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].req < q[j].req
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// The routing rules, on the bench's workload in simulated time: kv_aware
// (the Router itself, fed exact caches) meets the bench's targets at the
// bench's concurrency — a cached share of at least 0.9 × the oracle's, a
// TTFT p50 at most a third of round_robin's, no rank above 1.5× the mean
// with one hot group — and cache_aware stays within 15% of it. The live
// rows of `make bench` measure the same on ts-fake; this pins the rule
// and why its knobs have their defaults.
func TestRoutingRulesInSimulation(t *testing.T) {
	s := defaultRoutingSetup()
	uni, hot := gspWorkload(s, false), gspWorkload(s, true)
	or := oracle(s, uni)
	kv, _, kvTTFT := simulate(s, uni, routing.KVAware, s.conc)
	ca, _, caTTFT := simulate(s, uni, routing.CacheAware, s.conc)
	rr, _, rrTTFT := simulate(s, uni, routing.RoundRobin, s.conc)
	kvHotShare, kvHot, _ := simulate(s, hot, routing.KVAware, s.conc)
	t.Logf("oracle %.3f; kv_aware %.3f (TTFT p50 %.1f ms); cache_aware %.3f (%.1f ms); round_robin %.3f (%.1f ms); hot kv_aware %.3f ranks %v",
		or.share, kv, kvTTFT, ca, caTTFT, rr, rrTTFT, kvHotShare, kvHot)
	if kv < targetKVOverOracle*or.share {
		t.Errorf("kv_aware cached share %.3f < %.1f × oracle %.3f", kv, targetKVOverOracle, or.share)
	}
	if ca < (1-targetCacheWithinKV)*kv {
		t.Errorf("cache_aware %.3f not within %.0f%% of kv_aware %.3f", ca, 100*targetCacheWithinKV, kv)
	}
	if rr > targetRRFarBelow*min(kv, ca) {
		t.Errorf("round_robin %.3f not far below (%.3f, %.3f)", rr, kv, ca)
	}
	if kvTTFT > targetTTFTRatio*rrTTFT {
		t.Errorf("TTFT p50 kv_aware %.1f ms > 1/3 of round_robin's %.1f ms", kvTTFT, rrTTFT)
	}
	if h := maxOverMean(kvHot); h > targetHotMaxOverMean {
		t.Errorf("hot group: busiest rank %.2f × the mean (%v)", h, kvHot)
	}
	// The knobs' reasons: at an overlap weight of 1 the share falls well
	// short; without the spread guard the hot group piles on one rank.
	w1 := routing.Defaults()
	w1.KVAware.OverlapWeight = 1
	if got, _, _ := simulateWith(s, uni, routing.KVAware, s.conc, w1); got > 0.8*kv {
		t.Errorf("overlap_weight 1: cached share %.3f, expected well below %.3f", got, kv)
	}
	off := routing.Defaults()
	off.KVAware.LoadFactor = 0
	if _, ranks, _ := simulateWith(s, hot, routing.KVAware, s.conc, off); maxOverMean(ranks) <= targetHotMaxOverMean {
		t.Errorf("without the spread guard the hot group is spread anyway (%v): the guard is not what spreads it", ranks)
	}
}

// The routing rows at 1, 3 and 16 requests in flight, in simulated time:
// kv_aware caches at least as much as cache_aware, and cache_aware at
// least 0.9 × the oracle, on the bench's shared-prefix workload; and on
// the small workload kv_aware once lost on (6 groups × 8 questions
// sharing 1,536-token system prompts, 3 in flight: it cached 0.62-0.68
// against cache_aware's 0.84 while its events lagged and its spread guard
// copied a rank's second group away).
func TestRoutingRowsInSimulation(t *testing.T) {
	s := defaultRoutingSetup()
	uni := gspWorkload(s, false)
	or := oracle(s, uni)
	for _, conc := range routingConcs {
		kv, _, _ := simulate(s, uni, routing.KVAware, conc)
		ca, _, _ := simulate(s, uni, routing.CacheAware, conc)
		t.Logf("%d in flight: oracle %.3f, kv_aware %.3f, cache_aware %.3f", conc, or.share, kv, ca)
		if kv < ca || ca < targetCAOverOracle*or.share {
			t.Errorf("%d in flight: kv_aware %.3f, cache_aware %.3f, oracle %.3f: want kv_aware ≥ cache_aware ≥ %.1f × oracle", conc, kv, ca, or.share, targetCAOverOracle)
		}
	}
	small := smallGroupsSetup()
	reqs := gspWorkload(small, false)
	kv, kvRanks, _ := simulate(small, reqs, routing.KVAware, small.conc)
	ca, _, _ := simulate(small, reqs, routing.CacheAware, small.conc)
	t.Logf("6 groups × 8, 3 in flight: oracle %.3f, kv_aware %.3f %v, cache_aware %.3f", oracle(small, reqs).share, kv, kvRanks, ca)
	if kv < ca {
		t.Errorf("6 groups × 8: kv_aware %.3f < cache_aware %.3f", kv, ca)
	}
}

package routing

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"strings"
	"time"
)

// Pools: the two kinds a PD request needs a leg of, and the aggregated
// engines, which take a request in one leg.
const (
	PoolPrefill = iota
	PoolDecode
	PoolAggregated
	numPools
)

// WorkerView is one worker of a pool as the caller read it: its routable
// ranks (none: not a candidate) and, for kv_aware, whether its KV events
// are live.
type WorkerView struct {
	Name  string
	Ranks []RankView
	Live  bool
}

// RankView is one routable rank.
type RankView struct {
	Identity, DPRank int
	Reqs, Tokens     int // the gateway's in-flight requests and tokens there
	// KV is the prompt tokens the rank holds according to its engine's KV
	// events (read only when the worker is Live and the policy kv_aware).
	KV int
	// Epoch changes when the rank registers anew (a restarted engine):
	// the tree forgets what it believed that rank held.
	Epoch int64
	// Quiet: the rank owes output and has stopped giving it, long before
	// any stall verdict (gateway/lane quiet.go); AvoidQuiet leaves it out
	// while another rank of the pool is not quiet.
	Quiet bool
}

// AvoidQuiet is the pool without its quiet ranks, when at least one rank
// of the pool is not quiet; otherwise (none quiet, or all) the pool as
// it is. A worker left with no rank is no candidate. The caller routes on
// what it returns and indexes the choice into it. Pure: ws is not
// modified.
func AvoidQuiet(ws []WorkerView) []WorkerView {
	quiet, other := false, false
	for _, w := range ws {
		for _, r := range w.Ranks {
			if r.Quiet {
				quiet = true
			} else {
				other = true
			}
		}
	}
	if !quiet || !other {
		return ws
	}
	out := make([]WorkerView, len(ws))
	for i, w := range ws {
		out[i] = w
		out[i].Ranks = nil
		for _, r := range w.Ranks {
			if !r.Quiet {
				out[i].Ranks = append(out[i].Ranks, r)
			}
		}
	}
	return out
}

// Request is what routing knows of a request.
type Request struct {
	Prompt []int32 // the whole rendered prompt's token ids
	Key    string  // RoutingKeyHeader's value, "" none
}

// Choice is one pool's answer.
type Choice struct {
	Worker int // index into the WorkerView slice; -1: no routable worker
	Rank   int // index into that worker's Ranks
	Policy string
	// Reason is the deciding level's reason: the rank's when the pool had
	// one candidate worker, else the worker's.
	Reason string
	// Match is the prompt tokens the chosen rank is expected to hold.
	Match int
}

// RecentHalfLife: a decision's weight in kv_aware's spread guard
// (Candidate.Recent) halves every this many decisions of its scope.
const RecentHalfLife = 256

// maxHotPrefixes bounds the prefixes the spread guard remembers per
// scope; past it the ones not chosen for a long while go first.
const maxHotPrefixes = 4096

// Tenant names a DP rank of a worker in the tree and on rings.
func Tenant(worker string, dpRank int) string { return fmt.Sprintf("%s#%d", worker, dpRank) }

// ErrClosed is Route's answer once the Router stopped.
var ErrClosed = errors.New("routing: the router has stopped")

// KVSource is the engines' KV events as kv_aware reads them
// (gateway/kvevents' Subscriber, through the dispatch).
type KVSource interface {
	// Match is, per DP rank of the worker, the leading prompt tokens its
	// cache holds, published or predicted, and whether its events are
	// live.
	Match(worker string, prompt []int32) (perRank []int, live bool)
	// Predict counts prompt as held by the worker's DP rank for ttl, or
	// until its events settle or remove it; a Match after it sees it.
	Predict(worker string, dpRank int, prompt []int32, ttl time.Duration)
}

// Options configure a Router.
type Options struct {
	Prefill, Decode, Aggregated string // each pool's policy
	Config                      Config
	// KV is what kv_aware routes on: the Router asks it in its own
	// goroutine, then records its choice there (Predict), so the next
	// request's Match sees this one's prompt on its rank whatever the
	// events say yet. nil: the views' Live and KV fields as given (tests,
	// the bench's simulation), nothing predicted.
	KV KVSource
	// Now and Rand are the clock and random source; nil: the real ones.
	// Tests inject fixed ones.
	Now  func() time.Time
	Rand func() uint64
	// OnPanic hears a panic a route or a maintenance step recovered from
	// (the request gets an error, the Router keeps running).
	OnPanic func(where string, v any, stack []byte)
}

// Router owns the routing state of both pools (the radix trees, sticky
// maps, bucket ranges, counters and rings) in one goroutine: Route sends
// it the request and the candidates read just before, it decides and
// updates its state, so two concurrent requests with the same prompt see
// each other's insert (docs/architecture.md §3.2).
type Router struct {
	st    *state
	asks  chan ask
	done  chan struct{}
	ended chan struct{}
}

type ask struct {
	req      Request
	pre, dec []WorkerView
	layout   *layoutAsk   // a layout decision's further facts; nil: a PD route
	fn       func(*state) // instead of a route: run this in the goroutine
	reply    chan answer
}

// layoutAsk is what RouteLayout adds to a PD route's ask.
type layoutAsk struct {
	agg    []WorkerView
	images bool
	cfg    LayoutConfig
}

type answer struct {
	p, d   Choice
	routed Routed
	err    error
}

// NewRouter starts the Router's goroutine; Close stops it.
func NewRouter(o Options) *Router {
	r := &Router{st: newState(o), asks: make(chan ask), done: make(chan struct{}), ended: make(chan struct{})}
	go r.loop()
	return r
}

// Route chooses a rank of each pool for req. A pool without routable
// rank gets Worker -1.
func (r *Router) Route(req Request, pre, dec []WorkerView) (p, d Choice, err error) {
	a := ask{req: req, pre: pre, dec: dec, reply: make(chan answer, 1)}
	select {
	case r.asks <- a:
	case <-r.done:
		return p, d, ErrClosed
	}
	select {
	case ans := <-a.reply:
		return ans.p, ans.d, ans.err
	case <-r.ended:
		return p, d, ErrClosed
	}
}

// Routed is a layout decision and the choice of the route it took: Pre
// and Dec under LayoutPD, Agg under LayoutAggregated (the other route's
// choices have Worker -1).
type Routed struct {
	Layout        LayoutDecision
	Pre, Dec, Agg Choice
}

// RouteLayout decides which route a request takes (DecideLayout, under
// cfg) and chooses the ranks of that route, in one step of the Router's
// goroutine: the aggregated policy's pick is what the uncached count is
// taken against, and only the route taken records its decision (its
// tree insert, its round-robin step), so a request sent prefill →
// decode leaves the aggregated pool's state as it found it. images:
// the request carries images (only prefill → decode takes them).
func (r *Router) RouteLayout(req Request, pre, dec, agg []WorkerView, images bool, cfg LayoutConfig) (Routed, error) {
	a := ask{req: req, pre: pre, dec: dec, layout: &layoutAsk{agg: agg, images: images, cfg: cfg}, reply: make(chan answer, 1)}
	select {
	case r.asks <- a:
	case <-r.done:
		return Routed{}, ErrClosed
	}
	select {
	case ans := <-a.reply:
		return ans.routed, ans.err
	case <-r.ended:
		return Routed{}, ErrClosed
	}
}

// Close stops the goroutine and waits for it.
func (r *Router) Close() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	<-r.ended
}

// TreeStats reports, per pool, the tokens and nodes its tree keeps (for
// the memory bound; 0 when its policy keeps no tree). It goes through the
// Router's goroutine like everything else.
func (r *Router) TreeStats() (tokens, nodes [numPools]int, err error) {
	ch := make(chan [2][numPools]int, 1)
	fn := func(s *state) {
		var out [2][numPools]int
		for i, p := range s.pools {
			if p.tree != nil {
				out[0][i], out[1][i] = p.tree.Stored()
			}
		}
		ch <- out
	}
	if err := r.do(fn); err != nil {
		return tokens, nodes, err
	}
	out := <-ch
	return out[0], out[1], nil
}

// do runs fn in the Router's goroutine (tests and stats).
func (r *Router) do(fn func(*state)) error {
	a := ask{fn: fn, reply: make(chan answer, 1)}
	select {
	case r.asks <- a:
	case <-r.done:
		return ErrClosed
	}
	select {
	case ans := <-a.reply:
		return ans.err
	case <-r.ended:
		return ErrClosed
	}
}

// maintenance are the tickers of the policies in use: tree eviction,
// sticky-key expiry, bucket adjustment (a nil channel: not in use).
type maintenance struct {
	evict, expire, adjust <-chan time.Time
	stop                  []func()
}

func maintenanceOf(s *state) maintenance {
	var m maintenance
	tick := func(d time.Duration) <-chan time.Time {
		t := time.NewTicker(d)
		m.stop = append(m.stop, t.Stop)
		return t.C
	}
	if s.usesTree() {
		m.evict = tick(s.cfg.CacheAware.EvictionInterval)
	}
	if s.uses(Manual) {
		m.expire = tick(s.cfg.Manual.EvictionInterval)
	}
	if s.uses(Bucket) {
		m.adjust = tick(s.cfg.Bucket.AdjustInterval)
	}
	return m
}

func (m maintenance) end() {
	for _, stop := range m.stop {
		stop()
	}
}

// Reconfigure replaces the pools' policies and knobs (tsd apply,
// docs/architecture.md §4.3), in the Router's goroutine between two
// routes: a pool whose policy stays, with the same knobs, keeps its state
// (its tree, sticky keys, counters); a changed one starts afresh.
func (r *Router) Reconfigure(o Options) error {
	return r.do(func(s *state) { s.reconfigure(o) })
}

func (s *state) reconfigure(o Options) {
	o.Now, o.Rand, o.OnPanic, o.KV = s.now, s.rnd, s.onPanic, s.kv
	next := newState(o)
	same := reflect.DeepEqual(next.cfg, s.cfg)
	for i := range next.pools {
		if same && next.pools[i].policy == s.pools[i].policy {
			next.pools[i] = s.pools[i]
		}
	}
	*s = *next
	s.retime = true
}

func (r *Router) loop() {
	defer close(r.ended)
	s := r.st
	m := maintenanceOf(s)
	defer func() { m.end() }()
	for {
		evict, expire, adjust := m.evict, m.expire, m.adjust
		select {
		case a := <-r.asks:
			a.reply <- s.serve(a)
			if s.retime {
				s.retime = false
				m.end()
				m = maintenanceOf(s)
			}
		case <-evict:
			s.guard("tree eviction", s.evictTrees)
		case <-expire:
			s.guard("sticky expiry", s.expireSticky)
		case <-adjust:
			s.guard("bucket adjustment", s.adjustBuckets)
		case <-r.done:
			return
		}
	}
}

// state is everything the Router's goroutine owns.
type state struct {
	cfg     Config
	now     func() time.Time
	rnd     func() uint64
	onPanic func(string, any, []byte)
	kv      KVSource
	pools   [numPools]*poolState
	retime  bool // the policies changed: the loop's maintenance tickers follow
}

func newState(o Options) *state {
	s := &state{cfg: o.Config.withDefaults(), now: o.Now, rnd: o.Rand, onPanic: o.OnPanic, kv: o.KV}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rnd == nil {
		r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		s.rnd = r.Uint64
	}
	if s.onPanic == nil {
		s.onPanic = func(string, any, []byte) {}
	}
	for i, p := range []string{o.Prefill, o.Decode, o.Aggregated} {
		if p == "" {
			p = RoundRobin
		}
		ps := &poolState{policy: p, seq: map[string]uint64{}, rings: map[string]ringEntry{}, epochs: map[string]int64{}}
		switch p {
		case KVAware:
			ps.tree = NewTree()
			ps.recent = map[string]*spreadBook{}
		case CacheAware:
			ps.tree = NewTree()
		case Manual:
			ps.sticky = newStickyMap(MaxStickyKeys)
		case Bucket:
			ps.buckets = map[string]*bucketState{}
		}
		s.pools[i] = ps
	}
	return s
}

func (s *state) uses(policy string) bool {
	for _, p := range s.pools {
		if p.policy == policy {
			return true
		}
	}
	return false
}

func (s *state) usesTree() bool { return s.uses(CacheAware) || s.uses(KVAware) }

// guard runs a step behind a recover boundary: a bug in one decision
// fails that request, never the gateway's routing.
func (s *state) guard(where string, fn func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.onPanic("routing "+where, v, debug.Stack())
			err = fmt.Errorf("internal error in the gateway's routing (%s; recovered: %v)", where, v)
		}
	}()
	fn()
	return nil
}

func (s *state) serve(a ask) answer {
	if a.fn != nil {
		return answer{err: s.guard("do", func() { a.fn(s) })}
	}
	var ans answer
	if a.layout != nil {
		ans.err = s.guard("route", func() { ans.routed = s.routeLayout(a.req, a.pre, a.dec, a.layout) })
		return ans
	}
	ans.err = s.guard("route", func() { ans.p, ans.d = s.route(a.req, a.pre, a.dec) })
	return ans
}

// routeLayout decides the layout, then records and returns the choice of
// the route taken. The aggregated pool is only planned (its pick read,
// nothing recorded) until the decision takes it.
func (s *state) routeLayout(req Request, pre, dec []WorkerView, la *layoutAsk) Routed {
	now := s.now()
	none := Choice{Worker: -1}
	out := Routed{Pre: none, Dec: none, Agg: none}
	f := LayoutFacts{Prompt: len(req.Prompt), Images: la.images, PD: anyRanks(pre) && anyRanks(dec), Aggregated: anyRanks(la.agg)}
	var ap pick
	planned := la.cfg.Mode != DisaggAlways && la.cfg.Mode != "" && f.Aggregated
	if planned {
		ap = s.pools[PoolAggregated].plan(s, req, la.agg, now)
		f.Uncached = len(req.Prompt) - ap.Match
		for _, w := range pre {
			if len(w.Ranks) == 0 {
				continue
			}
			q := 0
			for _, r := range w.Ranks {
				q += r.Tokens
			}
			f.PrefillQueued = append(f.PrefillQueued, q)
		}
	}
	out.Layout = DecideLayout(f, la.cfg)
	if out.Layout.Layout == LayoutAggregated {
		if !planned || ap.Worker < 0 {
			// never, with no routable aggregated rank: no choice (the
			// caller waits for one or refuses).
			out.Agg = Choice{Worker: -1, Policy: s.pools[PoolAggregated].policy, Reason: ReasonNone}
			return out
		}
		s.pools[PoolAggregated].commit(s, req, ap, now)
		out.Agg = ap.Choice
		return out
	}
	out.Pre, out.Dec = s.pools[PoolPrefill].route(s, req, pre, now), s.pools[PoolDecode].route(s, req, dec, now)
	return out
}

// anyRanks: some worker of ws has a routable rank.
func anyRanks(ws []WorkerView) bool {
	for _, w := range ws {
		if len(w.Ranks) > 0 {
			return true
		}
	}
	return false
}

// route decides both pools.
func (s *state) route(req Request, pre, dec []WorkerView) (p, d Choice) {
	now := s.now()
	return s.pools[PoolPrefill].route(s, req, pre, now), s.pools[PoolDecode].route(s, req, dec, now)
}

func (s *state) evictTrees() {
	for _, p := range s.pools {
		if p.tree != nil {
			p.tree.EvictAll(s.cfg.CacheAware.MaxTreeSize)
		}
	}
}

func (s *state) expireSticky() {
	for _, p := range s.pools {
		if p.sticky != nil {
			p.sticky.expire(s.now(), s.cfg.Manual.MaxIdle)
		}
	}
}

func (s *state) adjustBuckets() {
	for _, p := range s.pools {
		for _, b := range p.buckets {
			b.adjust()
		}
	}
}

// poolState is one pool's routing state. A scope is where a decision is
// made: "" for the choice among workers, a worker's name for the choice
// among its ranks.
type poolState struct {
	policy  string
	seq     map[string]uint64 // decisions per scope
	rings   map[string]ringEntry
	tree    *Tree
	sticky  *stickyMap
	buckets map[string]*bucketState
	epochs  map[string]int64 // tenant → the registration its tree entries belong to
	// recent is kv_aware's decayed count of decisions per scope, by hot
	// prefix and candidate (Candidate.Recent).
	recent map[string]*spreadBook
}

type ringEntry struct {
	members string
	ring    *Ring
}

// pick is a pool's decision before it is recorded: the choice, the
// chosen rank's tenant name, and the two decisions that made it (among
// workers, then among the chosen worker's ranks). route records it at
// once; a layout decision records only the pool of the route it takes.
type pick struct {
	Choice
	name       string
	wname      string // the chosen worker and DP rank (kv_aware's Predict)
	rank       int
	worker, dp step
}

// step is one scope's decision and what it was made over.
type step struct {
	scope string
	cands []Candidate
	d     Decision
	hash  uint64 // the request's hot prefix (kv_aware's spread)
}

func (ps *poolState) route(s *state, req Request, ws []WorkerView, now time.Time) Choice {
	p := ps.plan(s, req, ws, now)
	if p.Worker >= 0 {
		ps.commit(s, req, p, now)
	}
	return p.Choice
}

// plan decides the pool's choice for req without recording it. What it
// changes is only what was already true: a rank that registered anew
// forgets its tree entries.
func (ps *poolState) plan(s *state, req Request, ws []WorkerView, now time.Time) pick {
	c := Choice{Worker: -1, Policy: ps.policy}
	kv := ps.policy == KVAware
	if kv && s.kv != nil {
		ws = s.readKV(ws, req.Prompt)
	}
	// The tree's view of every routable rank, once per request.
	var tenants []string
	for _, w := range ws {
		for _, r := range w.Ranks {
			t := Tenant(w.Name, r.DPRank)
			tenants = append(tenants, t)
			if ps.tree != nil && ps.epochs[t] != r.Epoch {
				// A new registration: that engine's cache started empty.
				ps.tree.Evict(t, 0)
				ps.epochs[t] = r.Epoch
			}
		}
	}
	var treeMatch []int
	if ps.tree != nil {
		treeMatch = ps.tree.Match(req.Prompt, tenants)
	}
	rankCands := make([][]Candidate, len(ws))
	var cands []Candidate
	var widx []int
	k := 0
	for i, w := range ws {
		if len(w.Ranks) == 0 {
			continue
		}
		wc := Candidate{Name: w.Name, Live: kv && w.Live}
		for _, r := range w.Ranks {
			m := 0
			if treeMatch != nil {
				m = treeMatch[k]
			}
			if kv && w.Live {
				// The engine's events, and what was sent there since
				// (predicted blocks).
				m = r.KV
			}
			k++
			rc := Candidate{Name: Tenant(w.Name, r.DPRank), Reqs: r.Reqs, Tokens: r.Tokens, Match: min(m, len(req.Prompt)), Live: wc.Live}
			rankCands[i] = append(rankCands[i], rc)
			wc.Reqs += rc.Reqs
			wc.Tokens += rc.Tokens
			wc.Match = max(wc.Match, rc.Match)
		}
		cands = append(cands, wc)
		widx = append(widx, i)
	}
	if len(cands) == 0 {
		c.Reason = ReasonNone
		return pick{Choice: c}
	}
	var hash uint64
	switch ps.policy {
	case PrefixHash:
		hash = HashTokens(req.Prompt, s.cfg.PrefixHash.PrefixTokens)
	case KVAware:
		hash = HashTokens(req.Prompt, HotPrefixTokens)
	}
	p := pick{}
	p.worker = ps.decide(s, "", cands, req, hash, now)
	c.Worker = widx[p.worker.d.Index]
	w := ws[c.Worker]
	p.dp = ps.decide(s, w.Name, rankCands[c.Worker], req, hash, now)
	c.Rank = p.dp.d.Index
	chosen := rankCands[c.Worker][c.Rank]
	c.Match = chosen.Match
	c.Reason = p.worker.d.Reason
	if len(cands) == 1 {
		c.Reason = p.dp.d.Reason
	}
	p.Choice, p.name = c, chosen.Name
	p.wname, p.rank = w.Name, w.Ranks[c.Rank].DPRank
	return p
}

// commit records a planned choice: each scope's decision (its counter,
// sticky key, bucket load, kv_aware's spread), the prompt as held by the
// chosen rank in the tree, and for kv_aware its predicted blocks there
// (KVSource.Predict).
func (ps *poolState) commit(s *state, req Request, p pick, now time.Time) {
	ps.record(s, p.worker, req, now)
	ps.record(s, p.dp, req, now)
	if ps.policy == KVAware && s.kv != nil {
		s.kv.Predict(p.wname, p.rank, req.Prompt, s.cfg.KVAware.PredictTTL)
	}
	if ps.tree != nil {
		ps.tree.Insert(req.Prompt, p.name)
		if lim := s.cfg.CacheAware.MaxTreeSize; ps.tree.Size(p.name) > 2*lim {
			// Between evictions a tenant may grow to twice the limit,
			// never more: the memory bound docs/profiles.md states.
			ps.tree.Evict(p.name, lim)
		}
	}
}

// decide gathers the view of one scope and decides; record keeps what
// the decision changes in that scope.
func (ps *poolState) decide(s *state, scope string, cands []Candidate, req Request, hash uint64, now time.Time) step {
	v := View{Cands: cands, Prompt: len(req.Prompt), Key: req.Key, Hash: hash, Seq: ps.seq[scope], Rnd: [2]uint64{s.rnd(), s.rnd()}}
	switch ps.policy {
	case ConsistentHashing, PrefixHash:
		v.Ring = ps.ring(scope, cands)
	case Manual:
		if req.Key != "" {
			v.Sticky = ps.sticky.get(stickyKey(scope, req.Key), now)
		}
		for i := range v.Cands {
			v.Cands[i].Keys = ps.sticky.keys[v.Cands[i].Name]
		}
	case Bucket:
		b := ps.buckets[scope]
		if b == nil {
			b = &bucketState{}
			ps.buckets[scope] = b
		}
		v.Bucket = b.view(cands)
	case KVAware:
		b := ps.recent[scope]
		if b == nil {
			b = newSpreadBook()
			ps.recent[scope] = b
		}
		v.Recent, v.Prefix = b.total(), b.prefix(hash)
		for i := range v.Cands {
			v.Cands[i].Recent = b.of(v.Cands[i].Name)
		}
	}
	return step{scope: scope, cands: cands, d: Decide(ps.policy, s.cfg, v), hash: hash}
}

// record keeps what st's decision changes in its scope.
func (ps *poolState) record(s *state, st step, req Request, now time.Time) {
	ps.seq[st.scope]++
	name := st.cands[st.d.Index].Name
	switch {
	case ps.policy == Manual && st.d.Assign:
		ps.sticky.assign(stickyKey(st.scope, req.Key), name, now)
	case ps.policy == Bucket:
		ps.buckets[st.scope].observe(len(req.Prompt), name, now, s.cfg.Bucket.AdjustInterval)
	case ps.policy == KVAware:
		ps.recent[st.scope].chose(st.hash, name)
	}
}

// readKV is ws with each worker's KV events (Live, and every rank's KV)
// as the Router's KVSource answers now.
func (s *state) readKV(ws []WorkerView, prompt []int32) []WorkerView {
	out := make([]WorkerView, len(ws))
	for i, w := range ws {
		out[i] = w
		if len(w.Ranks) == 0 {
			continue
		}
		perRank, live := s.kv.Match(w.Name, prompt)
		out[i].Live = live
		out[i].Ranks = make([]RankView, len(w.Ranks))
		for j, r := range w.Ranks {
			r.KV = 0
			if r.DPRank >= 0 && r.DPRank < len(perRank) {
				r.KV = perRank[r.DPRank]
			}
			out[i].Ranks[j] = r
		}
	}
	return out
}

// spreadBook is one scope's recent kv_aware decisions: all of them, per
// candidate and per hot prefix, each weighed down by half every
// RecentHalfLife decisions. Weights decay lazily: a count is stored with
// the decision number it was last brought up to date at.
type spreadBook struct {
	seq      uint64 // decisions so far
	all      decayed
	byCand   map[string]decayed
	byPrefix map[uint64]decayed
}

type decayed struct {
	v  float64
	at uint64
}

func (d decayed) weight(seq uint64) float64 {
	if d.v == 0 {
		return 0
	}
	return d.v * math.Exp2(-float64(seq-d.at)/RecentHalfLife)
}

func newSpreadBook() *spreadBook {
	return &spreadBook{byCand: map[string]decayed{}, byPrefix: map[uint64]decayed{}}
}

func (b *spreadBook) total() float64          { return b.all.weight(b.seq) }
func (b *spreadBook) of(cand string) float64  { return b.byCand[cand].weight(b.seq) }
func (b *spreadBook) prefix(p uint64) float64 { return b.byPrefix[p].weight(b.seq) }
func (d decayed) plusOne(seq uint64) decayed  { return decayed{d.weight(seq) + 1, seq} }

// chose records a decision of prefix for cand.
func (b *spreadBook) chose(prefix uint64, cand string) {
	b.seq++
	b.all = b.all.plusOne(b.seq)
	b.byCand[cand] = b.byCand[cand].plusOne(b.seq)
	if _, ok := b.byPrefix[prefix]; !ok && len(b.byPrefix) >= maxHotPrefixes {
		b.forget()
	}
	b.byPrefix[prefix] = b.byPrefix[prefix].plusOne(b.seq)
}

// forget drops the prefixes not chosen for 8 half-lives (their weight is
// below 1/256), or else the least recently chosen one.
func (b *spreadBook) forget() {
	oldest, at := uint64(0), uint64(math.MaxUint64)
	for p, d := range b.byPrefix {
		if b.seq-d.at > 8*RecentHalfLife {
			delete(b.byPrefix, p)
			continue
		}
		if d.at < at {
			oldest, at = p, d.at
		}
	}
	if len(b.byPrefix) >= maxHotPrefixes {
		delete(b.byPrefix, oldest)
	}
}

// ring is the scope's ring over cands, rebuilt when the members change.
func (ps *poolState) ring(scope string, cands []Candidate) *Ring {
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.Name
	}
	key := strings.Join(names, "\x00")
	if e, ok := ps.rings[scope]; ok && e.members == key {
		return e.ring
	}
	r := NewRing(names)
	ps.rings[scope] = ringEntry{key, r}
	return r
}

package routing

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fixed is a Router state with a fixed clock and counting random bits.
func fixed(prefill, decode string, cfg Config) *state {
	var n uint64
	t0 := time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)
	return newState(Options{Prefill: prefill, Decode: decode, Config: cfg, Now: func() time.Time { return t0 }, Rand: func() uint64 { n++; return n }})
}

// worker builds a worker view with dp idle ranks (identity base+r).
func worker(name string, dp int) WorkerView {
	w := WorkerView{Name: name}
	for r := 0; r < dp; r++ {
		w.Ranks = append(w.Ranks, RankView{Identity: 10 + r, DPRank: r})
	}
	return w
}

func prompt(head int32, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = head*1000 + int32(i)
	}
	return p
}

type placed struct {
	worker string
	rank   int
}

func route(t *testing.T, s *state, req Request, pre []WorkerView) (placed, Choice) {
	t.Helper()
	p, d := s.route(req, pre, []WorkerView{worker("decode", 1)})
	if p.Worker < 0 || d.Worker < 0 {
		t.Fatalf("no choice: %+v %+v", p, d)
	}
	return placed{pre[p.Worker].Name, pre[p.Worker].Ranks[p.Rank].DPRank}, p
}

// round_robin cycles the replicas and, inside each, its DP ranks.
func TestRouterRoundRobinBothLevels(t *testing.T) {
	t.Parallel()
	s := fixed(RoundRobin, RoundRobin, Config{})
	pre := []WorkerView{worker("prefill", 2), worker("prefill-1", 2)}
	var got []placed
	for i := 0; i < 8; i++ {
		pl, _ := route(t, s, Request{Prompt: prompt(1, 4)}, pre)
		got = append(got, pl)
	}
	want := []placed{{"prefill", 0}, {"prefill-1", 0}, {"prefill", 1}, {"prefill-1", 1}, {"prefill", 0}, {"prefill-1", 0}, {"prefill", 1}, {"prefill-1", 1}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("round robin placed %v, want %v", got, want)
		}
	}
	// A worker whose ranks are all gone is skipped; the others keep cycling.
	pre[1].Ranks = nil
	a, _ := route(t, s, Request{Prompt: prompt(1, 4)}, pre)
	b, _ := route(t, s, Request{Prompt: prompt(1, 4)}, pre)
	if a.worker != "prefill" || b.worker != "prefill" || a.rank == b.rank {
		t.Fatalf("with one worker left: %v then %v", a, b)
	}
}

// cache_aware sends a repeated prompt to the rank that computed it, and a
// new prompt to the least loaded rank, whose cache it then warms.
func TestRouterCacheAwareSticksToTheRank(t *testing.T) {
	t.Parallel()
	s := fixed(CacheAware, RoundRobin, Config{})
	pre := []WorkerView{worker("prefill", 2)}
	long := prompt(7, 300)
	first, c := route(t, s, Request{Prompt: long}, pre)
	if c.Reason != ReasonCacheMiss || c.Match != 0 {
		t.Fatalf("first time: %+v", c)
	}
	// The first rank is now busier: a different prompt goes to the other.
	pre[0].Ranks[first.rank].Reqs = 1
	other, c := route(t, s, Request{Prompt: prompt(8, 300)}, pre)
	if other.rank == first.rank || c.Reason != ReasonCacheMiss {
		t.Fatalf("a new prompt went to %v (%+v), the busy rank was %v", other, c, first)
	}
	// The same long prompt with a new question returns to its rank.
	turn2 := append(append([]int32(nil), long...), 5, 6, 7)
	again, c := route(t, s, Request{Prompt: turn2}, pre)
	if again != first || c.Reason != ReasonCacheHit || c.Match != 300 {
		t.Fatalf("turn 2 went to %v (%+v), turn 1 was on %v", again, c, first)
	}
	// The whole rendered prompt counts, not its first message: a prompt
	// that shares only a short head is a miss.
	short := append(append([]int32(nil), long[:50]...), prompt(9, 250)...)
	_, c = route(t, s, Request{Prompt: short}, pre)
	if c.Reason != ReasonCacheMiss {
		t.Fatalf("a prompt sharing 50/300 tokens: %+v", c)
	}
	// A restarted rank (new epoch) starts with an empty cache.
	pre[0].Ranks[first.rank].Epoch = 2
	_, c = route(t, s, Request{Prompt: turn2}, pre)
	if c.Reason != ReasonCacheMiss {
		t.Fatalf("after the rank restarted, the tree still claims its cache: %+v", c)
	}
}

// kv_aware reads live workers' KV events and falls back to the tree for
// the others, saying so in its reason.
func TestRouterKVAware(t *testing.T) {
	t.Parallel()
	s := fixed(KVAware, RoundRobin, Config{})
	p := prompt(3, 200)
	liveW := worker("prefill", 2)
	liveW.Live = true
	liveW.Ranks[1].KV = 192
	pl, c := route(t, s, Request{Prompt: p}, []WorkerView{liveW})
	if pl.rank != 1 || c.Reason != ReasonKVHit || c.Match != 192 {
		t.Fatalf("live events: %v %+v", pl, c)
	}
	// Events absent: the tree (which saw the insert above) decides.
	dead := worker("prefill", 2)
	pl, c = route(t, s, Request{Prompt: p}, []WorkerView{dead})
	if pl.rank != 1 || c.Reason != FallbackPrefix+ReasonCacheHit || c.Match != 200 {
		t.Fatalf("events absent: %v %+v", pl, c)
	}
}

// fakeKV is a KVSource: the prompts predicted on each worker's DP ranks,
// each until its claim expires on the clock now; their events show
// nothing else.
type fakeKV struct {
	now    func() time.Time
	dp     int
	claims map[string][]kvClaim
	asked  int
}

type kvClaim struct {
	rank   int
	prompt []int32
	until  time.Time
}

func (f *fakeKV) Match(worker string, prompt []int32) ([]int, bool) {
	f.asked++
	per := make([]int, f.dp)
	for _, c := range f.claims[worker] {
		if !f.now().Before(c.until) {
			continue
		}
		n := 0
		for n < len(c.prompt) && n < len(prompt)-1 && c.prompt[n] == prompt[n] {
			n++
		}
		per[c.rank] = max(per[c.rank], n)
	}
	return per, true
}

func (f *fakeKV) Predict(worker string, dpRank int, prompt []int32, ttl time.Duration) {
	if f.claims == nil {
		f.claims = map[string][]kvClaim{}
	}
	f.claims[worker] = append(f.claims[worker], kvClaim{dpRank, prompt, f.now().Add(ttl)})
}

// kv_aware asks its KVSource in the Router's goroutine and records each
// choice there (Predict), so the same prompt right after goes to the same
// rank though the events show nothing yet; a claim that expired is gone.
// A prompt that takes all the traffic spreads past its share.
func TestRouterKVAwarePredictsAndSpreads(t *testing.T) {
	t.Parallel()
	s := fixed(KVAware, RoundRobin, Config{})
	now := s.now()
	s.now = func() time.Time { return now }
	kv := &fakeKV{now: func() time.Time { return now }, dp: 4}
	s.kv = kv
	w := worker("prefill", 4)
	p := prompt(5, 400)
	first, c := route(t, s, Request{Prompt: p}, []WorkerView{w})
	if c.Reason != ReasonKVMiss || kv.asked != 1 {
		t.Fatalf("first: %+v (asked %d)", c, kv.asked)
	}
	second, c := route(t, s, Request{Prompt: p}, []WorkerView{w})
	if second != first || c.Reason != ReasonKVHit || c.Match != 399 {
		t.Fatalf("the same prompt right after went to %v (%+v), the first to %v", second, c, first)
	}
	now = now.Add(Defaults().KVAware.PredictTTL)
	if _, c = route(t, s, Request{Prompt: p}, []WorkerView{w}); c.Reason != ReasonKVMiss {
		t.Fatalf("after the claims expired: %+v", c)
	}
	// One prompt for every request: its rank takes its share, then the
	// guard sends the overflow to the others.
	seen := map[placed]int{}
	spread := 0
	for i := 0; i < 200; i++ {
		pl, c := route(t, s, Request{Prompt: p}, []WorkerView{w})
		seen[pl]++
		if c.Reason == ReasonKVSpread {
			spread++
		}
	}
	for pl, n := range seen {
		if n > 200*13/10/4+10 {
			t.Errorf("%v took %d of 200: more than its share allows", pl, n)
		}
	}
	if spread == 0 || len(seen) < 3 {
		t.Fatalf("a prompt taking all the traffic stayed on %v (%d spread)", seen, spread)
	}
}

// The spread guard counts a prefix's own share: six system prompts on
// four ranks leave two ranks with two of them each (a third of the
// traffic, over 1.3 × a quarter), and none is copied elsewhere.
func TestRouterKVAwareKeepsCoolPrefixes(t *testing.T) {
	t.Parallel()
	s := fixed(KVAware, RoundRobin, Config{})
	now := s.now()
	s.now = func() time.Time { return now }
	s.kv = &fakeKV{now: func() time.Time { return now }, dp: 4}
	w := worker("prefill", 4)
	home := map[int32]placed{}
	for i := 0; i < 600; i++ {
		g := int32(i % 6)
		p := append(prompt(g, 300), int32(1_000_000+i)) // the group's system prompt, then its own question
		pl, c := route(t, s, Request{Prompt: p}, []WorkerView{w})
		if h, ok := home[g]; !ok {
			home[g] = pl
		} else if pl != h {
			t.Fatalf("request %d of group %d went to %v (%+v), the group's rank is %v", i, g, pl, c, h)
		}
	}
}

// manual keeps a key on its worker and rank, survives the worker's
// absence by reassigning, and returns to the first worker when it is
// back (SMG keeps two).
func TestRouterManualSticky(t *testing.T) {
	t.Parallel()
	s := fixed(Manual, Manual, Config{})
	pre := []WorkerView{worker("prefill", 2), worker("prefill-1", 2)}
	first, c := route(t, s, Request{Prompt: prompt(1, 5), Key: "user-42"}, pre)
	if c.Reason != ReasonNewKey {
		t.Fatalf("first: %+v", c)
	}
	for i := 0; i < 10; i++ {
		again, c := route(t, s, Request{Prompt: prompt(int32(i), 5), Key: "user-42"}, pre)
		if again != first || c.Reason != ReasonSticky {
			t.Fatalf("request %d of the key went to %v (%+v), first was %v", i, again, c, first)
		}
	}
	// Its worker goes away: another takes the key...
	gone := 0
	if first.worker == "prefill-1" {
		gone = 1
	}
	saved := pre[gone].Ranks
	pre[gone].Ranks = nil
	moved, c := route(t, s, Request{Prompt: prompt(1, 5), Key: "user-42"}, pre)
	// (One worker left: the reason is its rank level's, a key new there.)
	if moved.worker == first.worker || (c.Reason != ReasonReassigned && c.Reason != ReasonNewKey) {
		t.Fatalf("with %s gone: %v %+v", first.worker, moved, c)
	}
	// ...and the key returns when it is back.
	pre[gone].Ranks = saved
	back, _ := route(t, s, Request{Prompt: prompt(1, 5), Key: "user-42"}, pre)
	if back != first {
		t.Fatalf("back: %v, first %v", back, first)
	}
	// Keys are bounded and expire when idle.
	ps := s.pools[PoolPrefill]
	if ps.sticky.len() == 0 {
		t.Fatal("no keys recorded")
	}
	ps.sticky.expire(s.now().Add(5*time.Hour), s.cfg.Manual.MaxIdle)
	if ps.sticky.len() != 0 {
		t.Fatalf("%d keys survived 5 idle hours", ps.sticky.len())
	}
}

func TestStickyMapBounds(t *testing.T) {
	t.Parallel()
	m := newStickyMap(3)
	now := time.Now()
	for _, k := range []string{"a", "b", "c", "d"} {
		m.assign(stickyKey("", k), "w", now)
	}
	if m.len() != 3 || m.get(stickyKey("", "a"), now) != nil || m.keys["w"] != 3 {
		t.Fatalf("cap: %d keys, a=%v, w holds %d", m.len(), m.get(stickyKey("", "a"), now), m.keys["w"])
	}
	m.assign(stickyKey("", "b"), "x", now)
	m.assign(stickyKey("", "b"), "y", now)
	if got := m.get(stickyKey("", "b"), now); len(got) != 2 || got[0] != "x" || got[1] != "y" || m.keys["w"] != 2 || m.keys["y"] != 1 || m.keys["x"] != 0 {
		t.Fatalf("b = %v, keys %v", got, m.keys)
	}
	long := strings.Repeat("k", 10*MaxKeyLen)
	if k := stickyKey("s", long); len(k) > MaxKeyLen+16 || k == stickyKey("s", long+"x") {
		t.Fatalf("long key stored as %d bytes", len(k))
	}
}

// consistent_hashing keeps a key on one rank of one worker.
func TestRouterConsistentHashing(t *testing.T) {
	t.Parallel()
	s := fixed(ConsistentHashing, RoundRobin, Config{})
	pre := []WorkerView{worker("prefill", 4), worker("prefill-1", 4)}
	seen := map[placed]bool{}
	for _, key := range []string{"alpha", "beta", "gamma", "delta", "eps"} {
		a, c := route(t, s, Request{Prompt: prompt(1, 3), Key: key}, pre)
		b, _ := route(t, s, Request{Prompt: prompt(2, 9), Key: key}, pre)
		if a != b || c.Reason != ReasonRing {
			t.Fatalf("key %s: %v then %v (%+v)", key, a, b, c)
		}
		seen[a] = true
	}
	if len(seen) < 2 {
		t.Fatalf("five keys all on %v", seen)
	}
}

// bucket learns ranges from recent lengths and sends short and long
// prompts to different engines.
func TestRouterBucket(t *testing.T) {
	t.Parallel()
	s := fixed(Bucket, RoundRobin, Config{})
	pre := []WorkerView{worker("prefill", 1), worker("prefill-1", 1)}
	// Half the recent load in 1000-token prompts, half in 3000-token ones.
	for i := 0; i < 20; i++ {
		n := 1000
		if i%4 == 3 {
			n = 3000
		}
		route(t, s, Request{Prompt: prompt(1, n)}, pre)
	}
	s.adjustBuckets()
	b := s.pools[PoolPrefill].buckets[""]
	if b.upper[0] != 1001 {
		t.Fatalf("after adjusting, ranges %v", b.upper)
	}
	// With loads made equal, a short and a long prompt part ways.
	b.load = map[string]int{}
	sp, c1 := route(t, s, Request{Prompt: prompt(1, 1000)}, pre)
	b.load = map[string]int{}
	lp, c2 := route(t, s, Request{Prompt: prompt(1, 3000)}, pre)
	if sp.worker == lp.worker || c1.Reason != ReasonBucketRange || c2.Reason != ReasonBucketRange {
		t.Fatalf("short on %v (%s), long on %v (%s)", sp, c1.Reason, lp, c2.Reason)
	}
}

func TestBucketWindow(t *testing.T) {
	t.Parallel()
	var b bucketState
	b.view([]Candidate{{Name: "a"}, {Name: "b"}})
	t0 := time.Now()
	b.observe(10, "a", t0, time.Second)
	b.observe(20, "b", t0.Add(500*time.Millisecond), time.Second)
	b.observe(5, "a", t0.Add(1500*time.Millisecond), time.Second) // the first one expired
	if b.load["a"] != 5 || b.load["b"] != 20 || len(b.window) != 2 {
		t.Fatalf("window %v load %v", b.window, b.load)
	}
	// A new candidate set starts over with even initial ranges.
	v := b.view([]Candidate{{Name: "a"}, {Name: "b"}, {Name: "c"}})
	if len(v.Upper) != 3 || v.Upper[0] != bucketInitialSpan/3 {
		t.Fatalf("ranges %v", v.Upper)
	}
}

// The goroutine: Route answers, Close stops it, and a panic in a
// decision fails that one request while the Router keeps serving.
func TestRouterGoroutine(t *testing.T) {
	t.Parallel()
	var panics []string
	boom := false
	r := NewRouter(Options{Prefill: CacheAware, Decode: RoundRobin,
		Rand: func() uint64 {
			if boom {
				panic("bad bits")
			}
			return 1
		},
		OnPanic: func(where string, v any, _ []byte) { panics = append(panics, where) }})
	pre := []WorkerView{worker("prefill", 2)}
	dec := []WorkerView{worker("decode", 1)}
	if p, d, err := r.Route(Request{Prompt: prompt(1, 10)}, pre, dec); err != nil || p.Worker != 0 || d.Worker != 0 {
		t.Fatalf("route: %+v %+v %v", p, d, err)
	}
	if p, _, err := r.Route(Request{Prompt: prompt(1, 10)}, nil, dec); err != nil || p.Worker != -1 || p.Reason != ReasonNone {
		t.Fatalf("no prefill: %+v %v", p, err)
	}
	tok, nodes, err := r.TreeStats()
	if err != nil || tok[PoolPrefill] != 10 || nodes[PoolPrefill] != 1 || tok[PoolDecode] != 0 {
		t.Fatalf("tree stats %v %v %v", tok, nodes, err)
	}
	boom = true // read by the Router's goroutine only while it routes; the channel orders it
	if _, _, err := r.Route(Request{Prompt: prompt(1, 10)}, pre, dec); err == nil || !strings.Contains(err.Error(), "recovered") {
		t.Fatalf("a panicking decision: %v", err)
	}
	boom = false
	if _, _, err := r.Route(Request{Prompt: prompt(1, 10)}, pre, dec); err != nil {
		t.Fatalf("after a panic: %v", err)
	}
	r.Close()
	r.Close() // twice is fine
	if _, _, err := r.Route(Request{}, pre, dec); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if len(panics) != 1 || panics[0] != "routing route" {
		t.Fatalf("panics reported: %v", panics)
	}
}

func (m *stickyMap) len() int { return m.lru.Len() }

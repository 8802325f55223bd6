package routing

import (
	"fmt"
	"slices"
	"testing"
)

// TestDecide pins every policy's rows: the candidate it takes and the
// reason it gives, for each case its semantics distinguish.
func TestDecide(t *testing.T) {
	t.Parallel()
	cfg := Defaults()
	small := cfg
	small.CacheAware.BalanceAbs, small.CacheAware.BalanceRel = 2, 1.5 // imbalance reachable with a few requests
	weight1, noSpread := cfg, cfg
	weight1.KVAware.OverlapWeight = 1
	noSpread.KVAware.LoadFactor = 0
	minLoadCfg, minGroupCfg := cfg, cfg
	minLoadCfg.Manual.Assignment, minGroupCfg.Manual.Assignment = AssignMinLoad, AssignMinGroup

	// c builds candidates "a", "b", ... from (reqs, tokens, match) triples.
	c := func(rows ...[3]int) []Candidate {
		out := make([]Candidate, len(rows))
		for i, r := range rows {
			out[i] = Candidate{Name: string(rune('a' + i)), Reqs: r[0], Tokens: r[1], Match: r[2]}
		}
		return out
	}
	live := func(cs []Candidate, which ...int) []Candidate {
		for _, i := range which {
			cs[i].Live = true
		}
		return cs
	}
	ringABC := NewRing([]string{"a", "b", "c"})
	keyFor := func(owner string) string { // a key the ring gives to owner
		for i := 0; ; i++ {
			if k := fmt.Sprintf("k%d", i); ringABC.Pick(k) == owner {
				return k
			}
		}
	}
	hashFor := func(owner string) uint64 {
		for h := uint64(0); ; h++ {
			if ringABC.Pick(fmt.Sprintf("%x", h)) == owner {
				return h
			}
		}
	}

	rows := []struct {
		name   string
		policy string
		cfg    Config
		v      View
		want   int
		reason string
		assign bool
	}{
		{"no candidate", RoundRobin, cfg, View{}, -1, ReasonNone, false},
		{"no candidate cache_aware", CacheAware, cfg, View{Prompt: 10}, -1, ReasonNone, false},

		{"round_robin first", RoundRobin, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{})}, 0, ReasonCycle, false},
		{"round_robin wraps", RoundRobin, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{}), Seq: 4}, 1, ReasonCycle, false},
		{"round_robin ignores load", RoundRobin, cfg, View{Cands: c([3]int{9, 0, 0}, [3]int{}), Seq: 0}, 0, ReasonCycle, false},
		{"unknown name cycles", "nonsense", cfg, View{Cands: c([3]int{}, [3]int{}), Seq: 1}, 1, ReasonCycle, false},

		{"random", Random, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{}), Rnd: [2]uint64{5, 0}}, 2, ReasonRandom, false},

		{"least_load min", LeastLoad, cfg, View{Cands: c([3]int{3, 0, 0}, [3]int{1, 0, 0}, [3]int{2, 0, 0})}, 1, ReasonLeastLoad, false},
		{"least_load tie on tokens", LeastLoad, cfg, View{Cands: c([3]int{1, 50, 0}, [3]int{1, 10, 0})}, 1, ReasonLeastLoad, false},
		{"least_load tie rotates", LeastLoad, cfg, View{Cands: c([3]int{1, 0, 0}, [3]int{1, 0, 0}, [3]int{1, 0, 0}), Seq: 2}, 2, ReasonLeastLoad, false},

		{"power_of_two single", PowerOfTwo, cfg, View{Cands: c([3]int{5, 500, 0})}, 0, ReasonTwoChoices, false},
		{"power_of_two second lighter", PowerOfTwo, cfg, View{Cands: c([3]int{0, 900, 0}, [3]int{9, 100, 0}, [3]int{0, 0, 0}), Rnd: [2]uint64{0, 0}}, 1, ReasonTwoChoices, false},
		{"power_of_two tokens not requests", PowerOfTwo, cfg, View{Cands: c([3]int{1, 900, 0}, [3]int{9, 100, 0}), Rnd: [2]uint64{0, 0}}, 1, ReasonTwoChoices, false},
		{"power_of_two first lighter", PowerOfTwo, cfg, View{Cands: c([3]int{0, 10, 0}, [3]int{0, 0, 0}, [3]int{0, 900, 0}), Rnd: [2]uint64{2, 0}}, 0, ReasonTwoChoices, false},
		{"power_of_two tie keeps first drawn", PowerOfTwo, cfg, View{Cands: c([3]int{0, 5, 0}, [3]int{0, 5, 0}), Rnd: [2]uint64{1, 7}}, 1, ReasonTwoChoices, false},
		{"power_of_two never draws one twice", PowerOfTwo, cfg, View{Cands: c([3]int{0, 5, 0}, [3]int{0, 0, 0}), Rnd: [2]uint64{0, 1}}, 1, ReasonTwoChoices, false},

		{"cache_aware hit above threshold", CacheAware, cfg, View{Cands: c([3]int{5, 0, 0}, [3]int{6, 0, 80}), Prompt: 100}, 1, ReasonCacheHit, false},
		{"cache_aware at threshold is a miss", CacheAware, cfg, View{Cands: c([3]int{5, 0, 0}, [3]int{6, 0, 30}), Prompt: 100}, 0, ReasonCacheMiss, false},
		{"cache_aware miss to least loaded", CacheAware, cfg, View{Cands: c([3]int{5, 0, 10}, [3]int{2, 0, 0}, [3]int{3, 0, 20}), Prompt: 100}, 1, ReasonCacheMiss, false},
		{"cache_aware best match tie to less loaded", CacheAware, cfg, View{Cands: c([3]int{4, 0, 90}, [3]int{1, 0, 90}), Prompt: 100}, 1, ReasonCacheHit, false},
		{"cache_aware imbalance overrides the cache", CacheAware, small, View{Cands: c([3]int{9, 0, 100}, [3]int{1, 0, 0}), Prompt: 100}, 1, ReasonBalance, false},
		{"cache_aware gap under abs is balanced", CacheAware, small, View{Cands: c([3]int{3, 0, 100}, [3]int{1, 0, 0}), Prompt: 100}, 0, ReasonCacheHit, false},
		{"cache_aware gap under rel is balanced", CacheAware, small, View{Cands: c([3]int{14, 0, 100}, [3]int{10, 0, 0}), Prompt: 100}, 0, ReasonCacheHit, false},
		{"cache_aware SMG defaults need 64 apart", CacheAware, cfg, View{Cands: c([3]int{60, 0, 100}, [3]int{0, 0, 0}), Prompt: 100}, 0, ReasonCacheHit, false},
		{"cache_aware empty prompt is a miss", CacheAware, cfg, View{Cands: c([3]int{1, 0, 0}, [3]int{0, 0, 0})}, 1, ReasonCacheMiss, false},

		{"kv_aware hit", KVAware, cfg, View{Cands: live(c([3]int{0, 0, 0}, [3]int{0, 0, 96}), 0, 1), Prompt: 100}, 1, ReasonKVHit, false},
		{"kv_aware queued work outweighs the cache", KVAware, cfg, View{Cands: live(c([3]int{3, 300, 96}, [3]int{0, 0, 0}), 0, 1), Prompt: 100}, 1, ReasonKVBounded, false},
		{"kv_aware cache outweighs a little work", KVAware, cfg, View{Cands: live(c([3]int{3, 90, 96}, [3]int{0, 0, 0}), 0, 1), Prompt: 100}, 0, ReasonKVHit, false},
		{"kv_aware nothing cached goes to least work", KVAware, cfg, View{Cands: live(c([3]int{0, 50, 0}, [3]int{4, 20, 0}), 0, 1), Prompt: 100}, 1, ReasonKVMiss, false},
		{"kv_aware cost tie to longer prefix", KVAware, cfg, View{Cands: live(c([3]int{0, 120, 40}, [3]int{0, 0, 0}), 0, 1), Prompt: 100}, 0, ReasonKVHit, false},
		{"kv_aware a cached token outweighs a queued one", KVAware, cfg, View{Cands: live(c([3]int{2, 150, 60}, [3]int{0, 0, 0}), 0, 1), Prompt: 100}, 0, ReasonKVHit, false},
		{"kv_aware overlap weight 1 gives it up", KVAware, weight1, View{Cands: live(c([3]int{2, 150, 60}, [3]int{0, 0, 0}), 0, 1), Prompt: 100}, 1, ReasonKVBounded, false},
		{"kv_aware spread: a hot prefix's cheapest took too much of the recent traffic", KVAware, cfg, View{Cands: live([]Candidate{{Name: "a", Match: 96, Recent: 30}, {Name: "b", Recent: 2}}, 0, 1), Prompt: 100, Prefix: 20}, 1, ReasonKVSpread, false},
		{"kv_aware a cool prefix stays on its cache however busy", KVAware, cfg, View{Cands: live([]Candidate{{Name: "a", Match: 96, Recent: 30}, {Name: "b", Recent: 2}}, 0, 1), Prompt: 100, Prefix: 15}, 0, ReasonKVHit, false},
		{"kv_aware spread waits for a few decisions", KVAware, cfg, View{Cands: live([]Candidate{{Name: "a", Match: 96, Recent: 6}, {Name: "b"}}, 0, 1), Prompt: 100, Prefix: 6}, 0, ReasonKVHit, false},
		{"kv_aware within its share keeps the cache", KVAware, cfg, View{Cands: live([]Candidate{{Name: "a", Match: 96, Recent: 20}, {Name: "b", Recent: 12}}, 0, 1), Prompt: 100, Prefix: 32}, 0, ReasonKVHit, false},
		{"kv_aware load_factor 0 never spreads", KVAware, noSpread, View{Cands: live([]Candidate{{Name: "a", Match: 96, Recent: 30}, {Name: "b", Recent: 2}}, 0, 1), Prompt: 100, Prefix: 32}, 0, ReasonKVHit, false},
		{"kv_aware imbalance overrides", KVAware, small, View{Cands: live(c([3]int{9, 0, 100}, [3]int{1, 0, 0}), 0, 1), Prompt: 100}, 1, ReasonBalance, false},
		{"kv_aware no live events is cache_aware", KVAware, cfg, View{Cands: c([3]int{5, 0, 0}, [3]int{6, 0, 80}), Prompt: 100}, 1, FallbackPrefix + ReasonCacheHit, false},
		{"kv_aware no live events miss", KVAware, cfg, View{Cands: c([3]int{5, 0, 0}, [3]int{2, 0, 10}), Prompt: 100}, 1, FallbackPrefix + ReasonCacheMiss, false},
		{"kv_aware mixed: the tree's match chosen is a fallback", KVAware, cfg, View{Cands: live(c([3]int{0, 0, 0}, [3]int{0, 0, 90}), 0), Prompt: 100}, 1, FallbackPrefix + ReasonKVHit, false},
		{"kv_aware mixed: a live one chosen", KVAware, cfg, View{Cands: live(c([3]int{0, 0, 90}, [3]int{0, 0, 50}), 0), Prompt: 100}, 0, ReasonKVHit, false},

		{"consistent_hashing key a", ConsistentHashing, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{}), Ring: ringABC, Key: keyFor("a")}, 0, ReasonRing, false},
		{"consistent_hashing key c", ConsistentHashing, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{}), Ring: ringABC, Key: keyFor("c")}, 2, ReasonRing, false},
		{"consistent_hashing ignores load", ConsistentHashing, cfg, View{Cands: c([3]int{99, 0, 0}, [3]int{}, [3]int{}), Ring: ringABC, Key: keyFor("a")}, 0, ReasonRing, false},
		{"consistent_hashing no key is random", ConsistentHashing, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{}), Ring: ringABC, Rnd: [2]uint64{4, 0}}, 1, ReasonRandom, false},

		{"prefix_hash ring owner", PrefixHash, cfg, View{Cands: c([3]int{1, 0, 0}, [3]int{1, 0, 0}, [3]int{1, 0, 0}), Ring: ringABC, Hash: hashFor("b")}, 1, ReasonRing, false},
		{"prefix_hash idle pool", PrefixHash, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{}), Ring: ringABC, Hash: hashFor("c")}, 2, ReasonRing, false},
		{"prefix_hash owner overloaded", PrefixHash, cfg, View{Cands: c([3]int{3, 0, 0}, [3]int{9, 0, 0}, [3]int{1, 0, 0}), Ring: ringABC, Hash: hashFor("b")}, 2, ReasonRingLoaded, false},
		{"prefix_hash owner within the bound", PrefixHash, cfg, View{Cands: c([3]int{2, 0, 0}, [3]int{2, 0, 0}, [3]int{1, 0, 0}), Ring: ringABC, Hash: hashFor("b")}, 1, ReasonRing, false},

		{"manual sticky", Manual, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{}), Key: "s1", Sticky: []string{"c"}}, 2, ReasonSticky, false},
		{"manual sticky to the older when the newer is gone", Manual, cfg, View{Cands: c([3]int{}, [3]int{}), Key: "s1", Sticky: []string{"b", "z"}}, 1, ReasonSticky, false},
		{"manual older listed first wins", Manual, cfg, View{Cands: c([3]int{}, [3]int{}), Key: "s1", Sticky: []string{"a", "b"}}, 0, ReasonSticky, false},
		{"manual new key random", Manual, cfg, View{Cands: c([3]int{}, [3]int{}, [3]int{}), Key: "s2", Rnd: [2]uint64{7, 0}}, 1, ReasonNewKey, true},
		{"manual reassigned", Manual, cfg, View{Cands: c([3]int{}, [3]int{}), Key: "s2", Sticky: []string{"z"}, Rnd: [2]uint64{1, 0}}, 1, ReasonReassigned, true},
		{"manual no key not recorded", Manual, cfg, View{Cands: c([3]int{}, [3]int{}), Rnd: [2]uint64{1, 0}}, 1, ReasonNoKey, false},
		{"manual min_load", Manual, minLoadCfg, View{Cands: c([3]int{4, 0, 0}, [3]int{1, 0, 0}, [3]int{1, 0, 0}), Key: "s3", Rnd: [2]uint64{1, 0}}, 2, ReasonNewKey, true},
		{"manual min_group", Manual, minGroupCfg, View{Cands: []Candidate{{Name: "a", Keys: 3}, {Name: "b", Keys: 1}, {Name: "c", Keys: 2}}, Key: "s3"}, 1, ReasonNewKey, true},

		{"bucket short prompt", Bucket, cfg, View{Cands: c([3]int{}, [3]int{}), Prompt: 100, Bucket: &BucketView{Upper: []int{2048, 1 << 62}, Load: []int{0, 0}}}, 0, ReasonBucketRange, false},
		{"bucket long prompt", Bucket, cfg, View{Cands: c([3]int{}, [3]int{}), Prompt: 3000, Bucket: &BucketView{Upper: []int{2048, 1 << 62}, Load: []int{0, 0}}}, 1, ReasonBucketRange, false},
		{"bucket range end is exclusive", Bucket, cfg, View{Cands: c([3]int{}, [3]int{}), Prompt: 2048, Bucket: &BucketView{Upper: []int{2048, 1 << 62}, Load: []int{0, 0}}}, 1, ReasonBucketRange, false},
		{"bucket imbalanced goes least loaded", Bucket, cfg, View{Cands: c([3]int{}, [3]int{}), Prompt: 100, Bucket: &BucketView{Upper: []int{2048, 1 << 62}, Load: []int{5000, 100}}}, 1, ReasonBalance, false},
		{"bucket small gap stays in range", Bucket, cfg, View{Cands: c([3]int{}, [3]int{}), Prompt: 100, Bucket: &BucketView{Upper: []int{2048, 1 << 62}, Load: []int{130, 100}}}, 0, ReasonBucketRange, false},
		{"bucket without state is random", Bucket, cfg, View{Cands: c([3]int{}, [3]int{}), Rnd: [2]uint64{3, 0}}, 1, ReasonRandom, false},
	}
	for _, r := range rows {
		d := Decide(r.policy, r.cfg, r.v)
		if d.Index != r.want || d.Reason != r.reason || d.Assign != r.assign {
			t.Errorf("%s: got %+v, want index %d reason %s assign %v", r.name, d, r.want, r.reason, r.assign)
		}
		if d.Index >= 0 && (r.policy == CacheAware || r.policy == KVAware) && d.Match != r.v.Cands[d.Index].Match {
			t.Errorf("%s: match %d, the chosen candidate holds %d", r.name, d.Match, r.v.Cands[d.Index].Match)
		}
	}
}

// Policies lists what Decide implements: every name in it but round_robin
// decides by a rule of its own, and a name it does not list falls back to
// the round-robin cycle.
func TestPoliciesAreImplemented(t *testing.T) {
	t.Parallel()
	v := View{Cands: []Candidate{{Name: "a", Reqs: 1, Tokens: 5, Match: 3}, {Name: "b", Reqs: 2}}, Prompt: 10, Key: "k", Sticky: []string{"b"},
		Ring: NewRing([]string{"a", "b"}), Bucket: &BucketView{Upper: []int{5, 1 << 62}, Load: []int{1, 2}}, Seq: 3, Rnd: [2]uint64{11, 13}}
	for _, p := range slices.Concat(Policies, []string{"", "cache-aware", "passthrough"}) {
		own := slices.Contains(Policies, p) && p != RoundRobin
		if d := Decide(p, Defaults(), v); (d.Reason != ReasonCycle) != own {
			t.Errorf("%q: reason %s; listed in Policies: %v", p, d.Reason, slices.Contains(Policies, p))
		}
	}
}

// Decide is pure: the same view always gives the same decision, and it
// leaves the view's slices as it found them.
func TestDecideIsPure(t *testing.T) {
	t.Parallel()
	v := View{Cands: []Candidate{{Name: "a", Reqs: 1, Tokens: 5, Match: 3}, {Name: "b", Reqs: 2}}, Prompt: 10, Key: "k", Sticky: []string{"b"},
		Ring: NewRing([]string{"a", "b"}), Bucket: &BucketView{Upper: []int{5, 1 << 62}, Load: []int{1, 2}}, Seq: 3, Rnd: [2]uint64{11, 13}}
	before := fmt.Sprintf("%+v %v %+v", v.Cands, v.Sticky, *v.Bucket)
	for _, p := range Policies {
		d1, d2 := Decide(p, Defaults(), v), Decide(p, Defaults(), v)
		if d1 != d2 {
			t.Errorf("%s: %+v then %+v", p, d1, d2)
		}
	}
	if after := fmt.Sprintf("%+v %v %+v", v.Cands, v.Sticky, *v.Bucket); after != before {
		t.Errorf("view changed: %s → %s", before, after)
	}
}

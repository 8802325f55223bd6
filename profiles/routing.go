package profiles

import "time"

// The routing policies' knobs (docs/profiles.md, "Routing policies"): one
// section per policy that has any, SMG's names and defaults. The profile
// holds them all; the Plan carries a section only when a pool uses its
// policy (cache_aware's also for kv_aware, which falls back to it), so
// `tsd plan` shows what applies.

// CacheAwarePlan is gateway.cache_aware.
type CacheAwarePlan struct {
	CacheThreshold      float64  `json:"cache_threshold"`
	BalanceAbsThreshold int      `json:"balance_abs_threshold"`
	BalanceRelThreshold float64  `json:"balance_rel_threshold"`
	EvictionInterval    Duration `json:"eviction_interval"`
	MaxTreeSize         int      `json:"max_tree_size"`
}

// KVAwarePlan is gateway.kv_aware.
type KVAwarePlan struct {
	OverlapWeight float64  `json:"overlap_weight"`
	LoadFactor    float64  `json:"load_factor"`
	PredictedTTL  Duration `json:"predicted_ttl"`
}

// PrefixHashPlan is gateway.prefix_hash.
type PrefixHashPlan struct {
	PrefixTokenCount int     `json:"prefix_token_count"`
	LoadFactor       float64 `json:"load_factor"`
}

// ManualPlan is gateway.manual.
type ManualPlan struct {
	MaxIdle          Duration `json:"max_idle"`
	EvictionInterval Duration `json:"eviction_interval"`
	AssignmentMode   string   `json:"assignment_mode"`
}

// BucketPlan is gateway.bucket.
type BucketPlan struct {
	BalanceAbsThreshold int      `json:"balance_abs_threshold"`
	BalanceRelThreshold float64  `json:"balance_rel_threshold"`
	AdjustInterval      Duration `json:"adjust_interval"`
}

// Routing is every policy's knobs as the profile holds them.
type Routing struct {
	CacheAware CacheAwarePlan
	KVAware    KVAwarePlan
	PrefixHash PrefixHashPlan
	Manual     ManualPlan
	Bucket     BucketPlan
}

// DefaultRouting is every routing knob at its default.
func DefaultRouting() Routing {
	var r Routing
	cacheAwareSection.setDefaults(&r.CacheAware)
	kvAwareSection.setDefaults(&r.KVAware)
	prefixHashSection.setDefaults(&r.PrefixHash)
	manualSection.setDefaults(&r.Manual)
	bucketSection.setDefaults(&r.Bucket)
	return r
}

var (
	cacheAwareSection section[CacheAwarePlan]
	kvAwareSection    section[KVAwarePlan]
	prefixHashSection section[PrefixHashPlan]
	manualSection     section[ManualPlan]
	bucketSection     section[BucketPlan]
)

func init() {
	cacheAwareSection = section[CacheAwarePlan]{Path: "gateway.cache_aware", Rows: []row[CacheAwarePlan]{
		numKey("cache_threshold", 0, 1, "0.3", "a prompt whose cached share on the best-matching rank is above this goes there; otherwise to the least loaded", func(c *CacheAwarePlan) *float64 { return &c.CacheThreshold }),
		intKey("balance_abs_threshold", 0, 1<<20, "64", "imbalanced (least loaded wins over the cache) when the busiest and idlest candidate differ by more than this many in-flight requests…", func(c *CacheAwarePlan) *int { return &c.BalanceAbsThreshold }),
		numKey("balance_rel_threshold", 1, 1e6, "1.5", "…and the busiest carries more than this times the idlest's requests", func(c *CacheAwarePlan) *float64 { return &c.BalanceRelThreshold }),
		durKey("eviction_interval", "120s", "how often the radix tree is cut back to max_tree_size per rank, least recently used first", func(c *CacheAwarePlan) *time.Duration { return (*time.Duration)(&c.EvictionInterval) }),
		intKey("max_tree_size", 1, 1<<40, "67108864", "prompt tokens the tree remembers per DP rank (it may reach twice this between evictions; about 4 bytes a token)", func(c *CacheAwarePlan) *int { return &c.MaxTreeSize }),
	}}
	kvAwareSection = section[KVAwarePlan]{Path: "gateway.kv_aware", Rows: []row[KVAwarePlan]{
		numKey("overlap_weight", 1, 1e6, "3", "what one cached prompt token is worth against one token of prefill work queued on a rank: the cheapest rank by weight × uncached prompt tokens + queued tokens wins", func(k *KVAwarePlan) *float64 { return &k.OverlapWeight }),
		numKey("load_factor", 0, 1e6, "1.3", "a rank whose recent requests of one prefix (the prompt's first 256 tokens) exceed this times its even share of all recent requests is passed over for that prefix while another is within it (a hot prefix spreads, cooler ones stay); 0 = off", func(k *KVAwarePlan) *float64 { return &k.LoadFactor }),
		durKey("predicted_ttl", "30s", "a prompt routed to a rank counts as cached there (predicted blocks) until the engine's events publish its blocks, a BlockRemoved on its path, or this long", func(k *KVAwarePlan) *time.Duration { return (*time.Duration)(&k.PredictedTTL) }),
	}}
	prefixHashSection = section[PrefixHashPlan]{Path: "gateway.prefix_hash", Rows: []row[PrefixHashPlan]{
		intKey("prefix_token_count", 1, 1<<24, "256", "leading prompt tokens hashed onto the ring", func(p *PrefixHashPlan) *int { return &p.PrefixTokenCount }),
		numKey("load_factor", 1, 1e6, "1.25", "the ring's choice is overridden by the least loaded when it carries more than this times the mean in-flight requests", func(p *PrefixHashPlan) *float64 { return &p.LoadFactor }),
	}}
	manualSection = section[ManualPlan]{Path: "gateway.manual", Rows: []row[ManualPlan]{
		durKey("max_idle", "4h", "a routing key not seen for this long is forgotten", func(m *ManualPlan) *time.Duration { return (*time.Duration)(&m.MaxIdle) }),
		durKey("eviction_interval", "60s", "how often idle keys are dropped", func(m *ManualPlan) *time.Duration { return (*time.Duration)(&m.EvictionInterval) }),
		enumKey("assignment_mode", []string{"random", "min_load", "min_group"}, "random", "how a new key gets its worker: at random, the fewest requests in flight, or the fewest keys", func(m *ManualPlan) *string { return &m.AssignmentMode }),
	}}
	bucketSection = section[BucketPlan]{Path: "gateway.bucket", Rows: []row[BucketPlan]{
		intKey("balance_abs_threshold", 0, 1<<30, "32", "imbalanced (least loaded wins over the length range) when the recent prompt tokens of two prefills differ by more than this…", func(b *BucketPlan) *int { return &b.BalanceAbsThreshold }),
		numKey("balance_rel_threshold", 1, 1e6, "1.0001", "…and the busiest carries more than this times the idlest's", func(b *BucketPlan) *float64 { return &b.BalanceRelThreshold }),
		durKey("adjust_interval", "5s", "the window of recent requests, and how often the length ranges are re-cut to carry equal load", func(b *BucketPlan) *time.Duration { return (*time.Duration)(&b.AdjustInterval) }),
	}}
}

// routingPlans are the sections the plan carries: those of the policies
// some pool uses.
func routingPlans(g *GatewayPlan, pol PolicyPlan, r Routing) {
	uses := func(names ...string) bool {
		for _, n := range names {
			if pol.Prefill == n || pol.Decode == n || pol.Aggregated == n {
				return true
			}
		}
		return false
	}
	if uses("cache_aware", "kv_aware") {
		c := r.CacheAware
		g.CacheAware = &c
	}
	if uses("kv_aware") {
		k := r.KVAware
		g.KVAware = &k
	}
	if uses("prefix_hash") {
		p := r.PrefixHash
		g.PrefixHash = &p
	}
	if uses("manual") {
		m := r.Manual
		g.Manual = &m
	}
	if uses("bucket") {
		b := r.Bucket
		g.Bucket = &b
	}
}

package routing

import "time"

// Config holds every policy's knobs (docs/profiles.md, gateway.cache_aware
// and the sections after it). The zero value of a section means SMG's
// defaults (Defaults).
type Config struct {
	CacheAware CacheAwareConfig
	KVAware    KVAwareConfig
	PrefixHash PrefixHashConfig
	Manual     ManualConfig
	Bucket     BucketConfig
}

// CacheAwareConfig is cache_aware's (and kv_aware's balance) knobs, SMG's
// names and the defaults of SMG's command line.
type CacheAwareConfig struct {
	// Threshold: a match ratio (matched / prompt tokens) above it routes
	// to the best match; at or below it, to the least loaded.
	Threshold float64
	// BalanceAbs and BalanceRel: the candidates are imbalanced, and the
	// least loaded one wins whatever the cache says, when
	// max - min > BalanceAbs and max > BalanceRel × min, both counted in
	// in-flight requests as SMG counts them.
	BalanceAbs int
	BalanceRel float64
	// EvictionInterval is how often the tree is cut back to MaxTreeSize
	// tokens per rank, least recently used first.
	EvictionInterval time.Duration
	MaxTreeSize      int
}

// KVAwareConfig is kv_aware's own knobs (its balance thresholds and its
// fallback are cache_aware's).
type KVAwareConfig struct {
	// OverlapWeight is what one cached prompt token is worth against one
	// token of prefill work queued on a rank: a candidate's cost is
	// OverlapWeight × its uncached prompt tokens + its queued tokens. Above
	// 1 because a prefix kept on its rank keeps serving the requests
	// after this one; at 1 a single prompt queued in front of the cache
	// would send the request elsewhere and copy the prefix.
	OverlapWeight float64
	// LoadFactor spreads a hot prefix: a candidate chosen for more than
	// LoadFactor × its even share of the scope's recent decisions is
	// passed over while another is within it, so one system prompt taking
	// half the traffic ends up cached on enough ranks to share it.
	// The share is counted per hot prefix (the prompt's first
	// HotPrefixTokens tokens): a rank holding two of six system prompts
	// takes a third of the traffic by right, and copying one of them
	// elsewhere would only lose its cache. 0 turns it off.
	LoadFactor float64
	// PredictTTL is how long a prompt kv_aware routed counts as its rank's
	// before the engine's events show it (predicted blocks,
	// docs/protocol.md §16.8): the events replace the claim as they
	// arrive and a BlockRemoved on its path ends it at once, so this only
	// bounds a claim the engine never settles (no room, an abort).
	PredictTTL time.Duration
}

// HotPrefixTokens is how many leading prompt tokens name the prefix whose
// share of recent decisions kv_aware's spread guard counts (a system
// prompt, a conversation's start); prefix_hash's default width.
const HotPrefixTokens = 256

// PrefixHashConfig is prefix_hash's knobs.
type PrefixHashConfig struct {
	// PrefixTokens is how many leading prompt tokens are hashed.
	PrefixTokens int
	// LoadFactor: the ring's choice is taken while its in-flight requests
	// are at most LoadFactor × the mean (counting this request).
	LoadFactor float64
}

// ManualConfig is manual's knobs.
type ManualConfig struct {
	// MaxIdle drops a routing key not seen for this long; checked every
	// EvictionInterval.
	MaxIdle          time.Duration
	EvictionInterval time.Duration
	// Assignment picks the worker of a new key: random, min_load (fewest
	// requests in flight) or min_group (fewest keys).
	Assignment string
}

// BucketConfig is bucket's knobs.
type BucketConfig struct {
	BalanceAbs     int
	BalanceRel     float64
	AdjustInterval time.Duration
}

// Manual assignment modes (SMG's).
const (
	AssignRandom   = "random"
	AssignMinLoad  = "min_load"
	AssignMinGroup = "min_group"
)

// Defaults are SMG's command-line defaults (smg's main.rs at the snapshot
// docs/protocol.md §0.1 names), and kv_aware's own (docs/profiles.md).
func Defaults() Config {
	return Config{
		CacheAware: CacheAwareConfig{Threshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5, EvictionInterval: 120 * time.Second, MaxTreeSize: 1 << 26},
		KVAware:    KVAwareConfig{OverlapWeight: 3, LoadFactor: 1.3, PredictTTL: 30 * time.Second},
		PrefixHash: PrefixHashConfig{PrefixTokens: 256, LoadFactor: 1.25},
		Manual:     ManualConfig{MaxIdle: 4 * time.Hour, EvictionInterval: 60 * time.Second, Assignment: AssignRandom},
		Bucket:     BucketConfig{BalanceAbs: 32, BalanceRel: 1.0001, AdjustInterval: 5 * time.Second},
	}
}

// withDefaults fills the zero sections of c with Defaults.
func (c Config) withDefaults() Config {
	d := Defaults()
	if c.CacheAware == (CacheAwareConfig{}) {
		c.CacheAware = d.CacheAware
	}
	if c.KVAware == (KVAwareConfig{}) {
		c.KVAware = d.KVAware
	}
	if c.PrefixHash == (PrefixHashConfig{}) {
		c.PrefixHash = d.PrefixHash
	}
	if c.Manual == (ManualConfig{}) {
		c.Manual = d.Manual
	}
	if c.Bucket == (BucketConfig{}) {
		c.Bucket = d.Bucket
	}
	return c
}

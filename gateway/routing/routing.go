// Package routing is the gateway's choice of engine: which worker
// (replica) of a kind takes a request, and which attention-DP rank inside
// it. Every policy is a pure function over a View of the candidates
// (Decide, policies.go): their load as the gateway counts it, how much of
// the prompt each one holds in its prefix cache, the request's routing key
// and the random bits or counters the policy needs, so each decision is
// reproducible in a table test. The state some policies keep between
// requests (cache_aware's radix tree, manual's sticky map, bucket's length
// ranges, the round-robin counters) is owned by one goroutine, the Router
// (router.go), which gathers a View, decides and then updates that state.
//
// The package knows nothing of the lane or of HTTP: gateway/dispatch reads
// the lane's routable ranks and the KV event index, asks the Router and
// turns the choice into legs and a bootstrap room (docs/protocol.md §8.3).
// Names and semantics are SMG's (docs/profiles.md, "Routing policies").
package routing

// Policy names as the profile spells them (SMG's, plus tsd's kv_aware).
const (
	RoundRobin        = "round_robin"
	Random            = "random"
	LeastLoad         = "least_load"
	PowerOfTwo        = "power_of_two"
	CacheAware        = "cache_aware"
	KVAware           = "kv_aware"
	ConsistentHashing = "consistent_hashing"
	PrefixHash        = "prefix_hash"
	Manual            = "manual"
	Bucket            = "bucket"
)

// Policies lists every policy Decide implements, for prefill and decode.
// bucket is SMG's prefill-only policy (it divides prompt lengths among
// prefill engines); kv_aware needs the KV events only prefill engines
// publish, so it too is for prefill.
var Policies = []string{RoundRobin, Random, CacheAware, KVAware, PowerOfTwo, LeastLoad, ConsistentHashing, PrefixHash, Manual, Bucket}

// Candidate is one routable worker or DP rank as a policy sees it.
type Candidate struct {
	// Name is the candidate's stable identity: the role instance
	// ("prefill-1") at the worker level, "prefill-1#0" for its DP rank 0.
	// Rings and sticky entries refer to it, so it survives restarts.
	Name string
	// Reqs is the gateway's count of requests in flight there (SMG's
	// "load": requests, not tokens).
	Reqs int
	// Tokens is the gateway's count of prompt tokens in flight there that
	// the engine has to compute: each request's prompt less the cached
	// prefix its policy expected there.
	Tokens int
	// Match is how many leading prompt tokens the candidate holds in its
	// prefix cache: cache_aware's radix tree, or the engine's own KV events
	// for kv_aware (a worker: its best rank).
	Match int
	// Live says Match comes from the engine's KV events (kv_aware); false:
	// from the radix tree, the approximation cache_aware keeps.
	Live bool
	// Keys is how many routing keys manual has assigned here (its
	// min_group assignment).
	Keys int
	// Recent is how many of the scope's recent decisions chose it, each
	// weighed down by half every RecentHalfLife decisions (kv_aware's
	// spread guard).
	Recent float64
}

// View is everything a policy decides on. Decide reads it and nothing
// else, so a decision is a pure function of it.
type View struct {
	Cands  []Candidate
	Prompt int    // prompt tokens
	Key    string // the request's routing key (SMG's X-SMG-Routing-Key header; "" none)
	// Hash is prefix_hash's hash of the prompt's first tokens.
	Hash uint64
	// Ring is the consistent-hashing ring over Cands' names
	// (consistent_hashing, prefix_hash).
	Ring *Ring
	// Sticky is manual's entry for Key: the names the key was given, the
	// most recent last (at most two, as SMG keeps).
	Sticky []string
	// Bucket is the bucket policy's length ranges and recent loads.
	Bucket *BucketView
	// Seq is the number of decisions made so far in this scope: the
	// round-robin position and the rotation that breaks load ties.
	Seq uint64
	// Rnd is random bits for the policies that draw (random,
	// power_of_two, manual's assignment, consistent_hashing without key).
	Rnd [2]uint64
	// Recent is the scope's recent decisions, weighed as
	// Candidate.Recent (kv_aware's spread guard); 0: the candidates' sum.
	Recent float64
	// Prefix is the recent decisions, weighed alike, of the request's hot
	// prefix (its first HotPrefixTokens tokens): the guard spreads only a
	// prefix above an even share of one candidate.
	Prefix float64
}

// Decision is a policy's answer.
type Decision struct {
	Index  int    // into View.Cands; -1: no candidate
	Reason string // why, for the access line and the decision counter
	Match  int    // prompt tokens the chosen candidate holds (cache policies)
	// Assign: manual gave the key to Cands[Index] anew (the Router adds
	// it to the key's entry).
	Assign bool
}

// Reasons a decision gives (the access line's route_reason, the label of
// tsd_gateway_route_decisions_total).
const (
	ReasonNone        = "no_candidate"
	ReasonCycle       = "cycle"       // round_robin
	ReasonRandom      = "random"      // random; consistent_hashing without a key
	ReasonLeastLoad   = "least_load"  // least_load
	ReasonTwoChoices  = "two_choices" // power_of_two
	ReasonCacheHit    = "cache_hit"   // cache_aware: match above cache_threshold
	ReasonCacheMiss   = "cache_miss"  // cache_aware: below it, least loaded
	ReasonBalance     = "balance"     // cache_aware, bucket: imbalanced, least loaded
	ReasonKVHit       = "kv_hit"      // kv_aware: cheapest candidate holds a prefix
	ReasonKVMiss      = "kv_miss"     // kv_aware: nothing cached anywhere useful
	ReasonKVBounded   = "kv_bounded"  // kv_aware: the work queued on the best cache outweighed it
	ReasonKVSpread    = "kv_spread"   // kv_aware: the cheapest took more than its share of recent requests
	ReasonRing        = "ring"        // consistent_hashing, prefix_hash: the key's owner
	ReasonRingLoaded  = "ring_loaded" // prefix_hash: owner over its load bound, least loaded
	ReasonSticky      = "sticky"      // manual: the key's worker
	ReasonReassigned  = "reassigned"  // manual: the key's workers are gone, a new one
	ReasonNewKey      = "new_key"     // manual: first time this key is seen
	ReasonNoKey       = "no_key"      // manual: no routing key, assignment mode
	ReasonBucketRange = "bucket"      // bucket: the prompt length's range
	// FallbackPrefix marks a kv_aware decision taken on the radix tree
	// because the chosen worker's KV events are not live
	// ("fallback_cache_hit").
	FallbackPrefix = "fallback_"
)

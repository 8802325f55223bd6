package routing

import "strconv"

// Decide applies policy to v. It is pure: the same policy, config and view
// give the same decision (the Router supplies counters and random bits in
// v). An unknown policy name is a programming error the profile already
// refuses; it decides round_robin so routing never stops.
func Decide(policy string, cfg Config, v View) Decision {
	if len(v.Cands) == 0 {
		return Decision{Index: -1, Reason: ReasonNone}
	}
	switch policy {
	case Random:
		return Decision{Index: int(v.Rnd[0] % uint64(len(v.Cands))), Reason: ReasonRandom}
	case LeastLoad:
		return Decision{Index: minLoad(v.Cands, v.Seq), Reason: ReasonLeastLoad}
	case PowerOfTwo:
		return powerOfTwo(v)
	case CacheAware:
		return cacheAware(cfg.CacheAware, v)
	case KVAware:
		return kvAware(cfg.CacheAware, cfg.KVAware, v)
	case ConsistentHashing:
		return consistentHashing(v)
	case PrefixHash:
		return prefixHash(cfg.PrefixHash, v)
	case Manual:
		return manual(cfg.Manual, v)
	case Bucket:
		return bucket(cfg.Bucket, v)
	}
	return Decision{Index: int(v.Seq % uint64(len(v.Cands))), Reason: ReasonCycle}
}

// minLoad is the candidate with the fewest requests in flight, then the
// fewest tokens; ties rotate from seq, so equal candidates take turns
// instead of the first one taking everything.
func minLoad(c []Candidate, seq uint64) int {
	n := uint64(len(c))
	best := int(seq % n)
	for k := uint64(1); k < n; k++ {
		i := int((seq + k) % n)
		if c[i].Reqs < c[best].Reqs || (c[i].Reqs == c[best].Reqs && c[i].Tokens < c[best].Tokens) {
			best = i
		}
	}
	return best
}

// imbalanced is SMG's test, on in-flight requests: both the absolute and
// the relative gap between the busiest and the idlest candidate exceed
// their thresholds.
func imbalanced(c []Candidate, abs int, rel float64) bool {
	lo, hi := c[0].Reqs, c[0].Reqs
	for _, x := range c[1:] {
		lo, hi = min(lo, x.Reqs), max(hi, x.Reqs)
	}
	return imbalancedLoads(lo, hi, abs, rel)
}

func imbalancedLoads(lo, hi, abs int, rel float64) bool {
	return hi-lo > abs && float64(hi) > rel*float64(lo)
}

// powerOfTwo draws two distinct candidates and takes the one with fewer
// prompt tokens in flight (then fewer requests; a tie keeps the first
// drawn), as SMG does with its engines' token usage.
func powerOfTwo(v View) Decision {
	n := uint64(len(v.Cands))
	if n == 1 {
		return Decision{Index: 0, Reason: ReasonTwoChoices}
	}
	i := v.Rnd[0] % n
	j := (i + 1 + v.Rnd[1]%(n-1)) % n
	a, b := v.Cands[i], v.Cands[j]
	if b.Tokens < a.Tokens || (b.Tokens == a.Tokens && b.Reqs < a.Reqs) {
		return Decision{Index: int(j), Reason: ReasonTwoChoices}
	}
	return Decision{Index: int(i), Reason: ReasonTwoChoices}
}

// bestMatch is the candidate holding the longest prefix; ties go to fewer
// requests, then fewer tokens, then rotate from seq.
func bestMatch(c []Candidate, seq uint64) int {
	n := uint64(len(c))
	best := int(seq % n)
	for k := uint64(1); k < n; k++ {
		i := int((seq + k) % n)
		x, b := c[i], c[best]
		if x.Match > b.Match || (x.Match == b.Match && (x.Reqs < b.Reqs || (x.Reqs == b.Reqs && x.Tokens < b.Tokens))) {
			best = i
		}
	}
	return best
}

// cacheAware is SMG's cache_aware: imbalanced candidates go to the least
// loaded; otherwise a match ratio above the threshold goes to the best
// match, anything less to the least loaded (whose cache it then warms).
func cacheAware(cfg CacheAwareConfig, v View) Decision {
	if imbalanced(v.Cands, cfg.BalanceAbs, cfg.BalanceRel) {
		i := minLoad(v.Cands, v.Seq)
		return Decision{Index: i, Reason: ReasonBalance, Match: v.Cands[i].Match}
	}
	i := bestMatch(v.Cands, v.Seq)
	if v.Prompt > 0 && float64(v.Cands[i].Match)/float64(v.Prompt) > cfg.Threshold {
		return Decision{Index: i, Reason: ReasonCacheHit, Match: v.Cands[i].Match}
	}
	i = minLoad(v.Cands, v.Seq)
	return Decision{Index: i, Reason: ReasonCacheMiss, Match: v.Cands[i].Match}
}

// kvAware routes by the engines' own cache (docs/profiles.md, kv_aware):
// each candidate's cost, in tokens of prefill work, is OverlapWeight × the
// prompt tokens it would compute (the prompt less its cached prefix) plus
// the uncached prompt tokens already in flight there, and the cheapest
// wins; ties go to the longer cached prefix, then fewer requests, then
// rotate. A request of a hot prefix (one whose recent decisions exceed
// an even share of one candidate, View.Prefix > Recent/n) passes over a
// candidate that took more than LoadFactor × its even share of the
// recent decisions while another is within it, so a hot prefix spreads;
// a cooler prefix stays where it is cached (a rank holding two of six
// system prompts takes a third of the traffic by right, and copying one
// elsewhere would only lose its cache). SMG's imbalance test on requests still overrides
// it, as in cache_aware. Candidates whose events are not live carry the
// radix tree's match; when none is live the decision is cache_aware's,
// marked as a fallback.
func kvAware(cfg CacheAwareConfig, kc KVAwareConfig, v View) Decision {
	live := false
	recent := v.Recent
	sum := recent == 0
	for _, c := range v.Cands {
		live = live || c.Live
		if sum {
			recent += c.Recent
		}
	}
	if !live {
		d := cacheAware(cfg, v)
		d.Reason = FallbackPrefix + d.Reason
		return d
	}
	var d Decision
	if imbalanced(v.Cands, cfg.BalanceAbs, cfg.BalanceRel) {
		i := minLoad(v.Cands, v.Seq)
		d = Decision{Index: i, Reason: ReasonBalance, Match: v.Cands[i].Match}
	} else {
		n := uint64(len(v.Cands))
		// The guard waits for a few decisions per candidate: before that a
		// share says nothing.
		hot := v.Prefix > recent/float64(n)
		warm := kc.LoadFactor > 0 && recent >= 4*float64(n) && hot
		within := func(c Candidate) bool { return !warm || c.Recent <= kc.LoadFactor*recent/float64(n) }
		cost := func(c Candidate) float64 {
			return kc.OverlapWeight*float64(max(v.Prompt-c.Match, 0)) + float64(c.Tokens)
		}
		cheapest := func(ok func(Candidate) bool) int {
			best := -1
			for k := uint64(0); k < n; k++ {
				i := int((v.Seq + k) % n)
				x := v.Cands[i]
				if !ok(x) {
					continue
				}
				if best < 0 {
					best = i
					continue
				}
				b := v.Cands[best]
				cx, cb := cost(x), cost(b)
				if cx < cb || (cx == cb && (x.Match > b.Match || (x.Match == b.Match && x.Reqs < b.Reqs))) {
					best = i
				}
			}
			return best
		}
		all := cheapest(func(Candidate) bool { return true })
		best := cheapest(within)
		if best < 0 {
			best = all // every candidate is over its share: none is passed over
		}
		longest := 0
		for _, c := range v.Cands {
			longest = max(longest, c.Match)
		}
		m := v.Cands[best].Match
		switch {
		case best != all:
			d = Decision{Index: best, Reason: ReasonKVSpread, Match: m}
		case longest == 0:
			d = Decision{Index: best, Reason: ReasonKVMiss}
		case m < longest:
			d = Decision{Index: best, Reason: ReasonKVBounded, Match: m}
		default:
			d = Decision{Index: best, Reason: ReasonKVHit, Match: m}
		}
	}
	if !v.Cands[d.Index].Live {
		d.Reason = FallbackPrefix + d.Reason
	}
	return d
}

// consistentHashing hashes the routing key onto the ring of candidates;
// without a key the request goes to a random one (SMG's anonymous
// fallback).
func consistentHashing(v View) Decision {
	if v.Key == "" || v.Ring == nil {
		return Decision{Index: int(v.Rnd[0] % uint64(len(v.Cands))), Reason: ReasonRandom}
	}
	if i := indexOf(v.Cands, v.Ring.Pick(v.Key)); i >= 0 {
		return Decision{Index: i, Reason: ReasonRing}
	}
	return Decision{Index: int(v.Rnd[0] % uint64(len(v.Cands))), Reason: ReasonRandom}
}

// prefixHash is SMG's prefix_hash: the hash of the prompt's first tokens
// picks a candidate on the ring; if that one carries more than
// LoadFactor × the mean in-flight requests (this request included), the
// least loaded candidate within the bound takes it (all over: the ring's
// choice stays).
func prefixHash(cfg PrefixHashConfig, v View) Decision {
	total := 0
	for _, c := range v.Cands {
		total += c.Reqs
	}
	ok := func(reqs int) bool {
		if total == 0 {
			return true
		}
		return float64(reqs) <= float64(total+1)/float64(len(v.Cands))*cfg.LoadFactor
	}
	i := -1
	if v.Ring != nil {
		i = indexOf(v.Cands, v.Ring.Pick(strconv.FormatUint(v.Hash, 16)))
	}
	if i < 0 {
		return Decision{Index: minLoad(v.Cands, v.Seq), Reason: ReasonLeastLoad}
	}
	if ok(v.Cands[i].Reqs) {
		return Decision{Index: i, Reason: ReasonRing}
	}
	best := -1
	for j, c := range v.Cands {
		if ok(c.Reqs) && (best < 0 || c.Reqs < v.Cands[best].Reqs) {
			best = j
		}
	}
	if best < 0 {
		best = i
	}
	return Decision{Index: best, Reason: ReasonRingLoaded}
}

// manual is SMG's manual: a routing key stays with the first of its
// recorded workers that is still a candidate; a key whose workers are all
// gone, a new key and a request without key get one by the assignment
// mode (Assign tells the Router to record it for the key).
func manual(cfg ManualConfig, v View) Decision {
	if v.Key == "" {
		return Decision{Index: assign(cfg.Assignment, v), Reason: ReasonNoKey}
	}
	for _, name := range v.Sticky {
		if i := indexOf(v.Cands, name); i >= 0 {
			return Decision{Index: i, Reason: ReasonSticky}
		}
	}
	reason := ReasonNewKey
	if len(v.Sticky) > 0 {
		reason = ReasonReassigned
	}
	return Decision{Index: assign(cfg.Assignment, v), Reason: reason, Assign: true}
}

// assign picks a new key's candidate: random, or uniformly among those
// with the fewest requests (min_load) or keys (min_group).
func assign(mode string, v View) int {
	n := len(v.Cands)
	var metric func(Candidate) int
	switch mode {
	case AssignMinLoad:
		metric = func(c Candidate) int { return c.Reqs }
	case AssignMinGroup:
		metric = func(c Candidate) int { return c.Keys }
	default:
		return int(v.Rnd[0] % uint64(n))
	}
	lo := metric(v.Cands[0])
	for _, c := range v.Cands[1:] {
		lo = min(lo, metric(c))
	}
	var tied []int
	for i, c := range v.Cands {
		if metric(c) == lo {
			tied = append(tied, i)
		}
	}
	return tied[v.Rnd[0]%uint64(len(tied))]
}

// BucketView is the bucket policy's state as a decision reads it.
type BucketView struct {
	// Upper[i] is the exclusive upper end of Cands[i]'s prompt-length
	// range; ranges are contiguous in candidate order from 0, and the last
	// candidate takes every longer prompt.
	Upper []int
	// Load[i] is the prompt tokens routed to Cands[i] within the last
	// adjustment interval.
	Load []int
}

// bucket is SMG's bucket for prefill: each candidate serves a range of
// prompt lengths, sized so the ranges carry equal recent load (the Router
// adjusts them); when the recent loads are imbalanced, the least loaded
// candidate takes the request whatever its length.
func bucket(cfg BucketConfig, v View) Decision {
	n := len(v.Cands)
	b := v.Bucket
	if b == nil || len(b.Upper) != n || len(b.Load) != n {
		return Decision{Index: int(v.Rnd[0] % uint64(n)), Reason: ReasonRandom}
	}
	lo, hi, arg := b.Load[0], b.Load[0], 0
	for i, l := range b.Load {
		if l < lo {
			lo, arg = l, i
		}
		hi = max(hi, l)
	}
	if imbalancedLoads(lo, hi, cfg.BalanceAbs, cfg.BalanceRel) {
		return Decision{Index: arg, Reason: ReasonBalance}
	}
	for i, u := range b.Upper[:n-1] {
		if v.Prompt < u {
			return Decision{Index: i, Reason: ReasonBucketRange}
		}
	}
	return Decision{Index: n - 1, Reason: ReasonBucketRange}
}

func indexOf(c []Candidate, name string) int {
	for i, x := range c {
		if x.Name == name {
			return i
		}
	}
	return -1
}

// Package dispatch is the gateway's generation dispatch: the Dispatcher
// (dispatcher.go) behind gen.Engine, which validates a request, picks its
// PD/EPD legs, submits them and drives each request's flight
// (generate.go, epdroute.go). Its routing decisions are pure functions
// (this file): worker choice per policy, decode rank choice, and bootstrap
// rooms (docs/protocol.md §8). The caller supplies counters and random
// bits, so every decision is reproducible in a table test.
package dispatch

// KVIndex is what the kv_aware policy reads of the engines' own KV events.
type KVIndex interface {
	// Match reports, for the worker named by its role instance name (as in
	// the plan, e.g. "prefill" or "prefill-1"), how many leading tokens of
	// prompt each of its attention-DP ranks holds in its prefix cache
	// according to the engine's KV events (perRank[i] is DP rank i; a
	// multiple of the engine's page size), and whether that worker's
	// events are live (subscribed, no unrecovered gap). live=false means
	// route that worker by cache_aware and say so on screen.
	Match(worker string, prompt []int32) (perRank []int, live bool)
}

// Policy names as the profile spells them.
const (
	RoundRobin = "round_robin"
	LeastLoad  = "least_load"
	Random     = "random"
)

// Known reports whether policy is implemented here; the gateway falls back
// to round_robin (and says so) for the others SMG has (cache_aware,
// consistent_hashing, power_of_two, ...).
func Known(policy string) bool {
	switch policy {
	case RoundRobin, LeastLoad, Random:
		return true
	}
	return false
}

// Candidate is one routable worker or rank as a policy sees it.
type Candidate struct {
	InFlight int
}

// Pick returns the index of the chosen candidate, or -1 when there is
// none. seq is the caller's monotonically increasing pick counter for that
// pool (round-robin position and least_load tie-breaker); rnd is random
// bits for the random policy.
func Pick(policy string, cands []Candidate, seq, rnd uint64) int {
	n := uint64(len(cands))
	if n == 0 {
		return -1
	}
	switch policy {
	case LeastLoad:
		// Scan from the round-robin position so ties rotate instead of
		// piling onto the first candidate.
		start := seq % n
		best := int(start)
		for k := uint64(1); k < n; k++ {
			i := int((start + k) % n)
			if cands[i].InFlight < cands[best].InFlight {
				best = i
			}
		}
		return best
	case Random:
		return int(rnd % n)
	default:
		return int(seq % n)
	}
}

// MaxRoom is the exclusive upper bound of bootstrap rooms: SMG draws rooms
// uniformly from [0, 2^63-1), and so does tsd.
const MaxRoom = 1<<63 - 1

// Room turns 64 random bits into a room in [0, MaxRoom).
func Room(bits uint64) uint64 {
	return (bits >> 1) % MaxRoom
}

// PrefillRank is the prefill DP rank that holds a room's KV: the decode
// engine fetches from group room mod dp (docs/protocol.md §8.3), so the prefill leg
// must go there.
func PrefillRank(room uint64, dp int) int {
	if dp <= 1 {
		return 0
	}
	return int(room % uint64(dp))
}

// RoomForRank moves room to the nearest value below it (or above, near 0)
// whose DP group is rank, so a request can avoid a prefill rank that is not
// registered. The result stays in [0, MaxRoom).
func RoomForRank(room uint64, dp, rank int) uint64 {
	if dp <= 1 {
		return room
	}
	d := uint64(dp)
	base := room - room%d
	r := base + uint64(rank)
	if r >= MaxRoom {
		r -= d
	}
	return r
}

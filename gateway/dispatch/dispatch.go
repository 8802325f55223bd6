// Package dispatch is the gateway's generation dispatch: the Dispatcher
// (dispatcher.go) behind tokenapi.Engine, which validates a request, picks
// its route and legs (a PD pair, with encode legs for images, or one leg
// on an aggregated engine: docs/protocol.md §11.12), submits them and
// drives each request's flight and its attempts (flight.go, attempt.go).
// Which route and which worker and DP rank take a leg is
// gateway/routing's decision (route.go turns the lane's ranks into its
// view and its choice into legs); the bootstrap room follows the chosen
// prefill rank (this file, docs/protocol.md §8.3).
package dispatch

import "time"

// KVIndex is what the kv_aware policy reads of the engines' own KV events.
type KVIndex interface {
	// Match reports, for the worker named by its role instance name (as in
	// the plan, e.g. "prefill" or "prefill-1"), how many leading tokens of
	// prompt each of its attention-DP ranks holds in its prefix cache
	// according to the engine's KV events (perRank[i] is DP rank i; a
	// multiple of the engine's page size), and whether that worker's
	// events are live (subscribed, no unrecovered gap). live=false means
	// route that worker by cache_aware and say so on screen. A prompt
	// predicted on a rank (Predict) counts until its events settle it.
	Match(worker string, prompt []int32) (perRank []int, live bool)
	// Predict counts prompt as held by DP rank dpRank of worker for ttl
	// (docs/protocol.md §16.8): kv_aware has just routed it there.
	Predict(worker string, dpRank int, prompt []int32, ttl time.Duration)
}

// MaxRoom is the exclusive upper bound of bootstrap rooms: SMG draws rooms
// uniformly from [0, 2^63-1), and so does tsd.
const MaxRoom = 1<<63 - 1

// Room turns 64 random bits into a room in [0, MaxRoom).
func Room(bits uint64) uint64 {
	return (bits >> 1) % MaxRoom
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

package epd

import "github.com/tsd-project/tsd/gateway/routing"

// DefaultVirtualNodes is how many ring points each encode worker gets: with
// 160 the busiest of a few workers stays within ~10-15% of the mean.
const DefaultVirtualNodes = 160

// NewRing is the encoder ring (docs/protocol.md §9.6: the same image always
// goes to the same encoder, whose embedding cache can then hit): routing's
// consistent-hashing ring over the encode workers, vnodes points each
// (vnodes <= 0: DefaultVirtualNodes). Adding or removing a worker moves
// only the keys that worker gains or loses; build a new ring when the
// worker set changes.
func NewRing(workers []string, vnodes int) *routing.Ring {
	if vnodes <= 0 {
		vnodes = DefaultVirtualNodes
	}
	return routing.NewRingPoints(workers, vnodes)
}

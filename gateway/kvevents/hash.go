package kvevents

// BlockHash is the block hash TokenSpeed's scheduler puts into its events
// (docs/protocol.md §16.3): 64-bit FNV-1a over one flag byte (1 when the
// block has a parent, else 0), then the parent's hash as 8 bytes little
// endian when it has one, then the token count as 8 bytes little endian,
// then each token id as 4 bytes little endian (two's complement).
// ts-fake hashes its blocks with it so its events carry the engine's
// hashes; the gateway's index never needs to recompute it (it links
// blocks by the hashes the events carry and matches prompts by token id).
func BlockHash(tokens []int32, parent uint64, hasParent bool) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	mix := func(b byte) { h ^= uint64(b); h *= prime }
	mix64 := func(v uint64) {
		for i := 0; i < 8; i++ {
			mix(byte(v >> (8 * i)))
		}
	}
	if hasParent {
		mix(1)
		mix64(parent)
	} else {
		mix(0)
	}
	mix64(uint64(len(tokens)))
	for _, t := range tokens {
		u := uint32(t)
		mix(byte(u))
		mix(byte(u >> 8))
		mix(byte(u >> 16))
		mix(byte(u >> 24))
	}
	return h
}

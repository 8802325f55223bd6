package routing

import (
	"hash/fnv"
	"sort"
	"strconv"
)

// VirtualNodes is how many points each member gets on a Ring: SMG places
// 150 per worker, enough for the busiest of a few members to stay within
// ~15% of the mean.
const VirtualNodes = 150

// Ring is a consistent-hashing ring over member names, tsd's one: the
// Router's (consistent_hashing, manual's fallback) and the encoder ring
// (gateway/epd, docs/protocol.md §9.6) are both this. A key belongs to
// the first point at or after its hash, so removing a member moves only
// the keys it owned and adding one takes keys only for itself: routing
// stays put while replicas come and go. A Ring is immutable; build one
// per member set.
type Ring struct {
	points []uint64
	owner  []string // owner[i] owns points[i]
}

// NewRing places VirtualNodes points per distinct member.
func NewRing(members []string) *Ring { return NewRingPoints(members, VirtualNodes) }

// NewRingPoints places perMember points per distinct member (perMember <=
// 0: VirtualNodes); member i's points hash "name#0" … "name#perMember-1".
func NewRingPoints(members []string, perMember int) *Ring {
	if perMember <= 0 {
		perMember = VirtualNodes
	}
	type pt struct {
		h uint64
		m string
	}
	seen := map[string]bool{}
	pts := make([]pt, 0, len(members)*perMember)
	for _, m := range members {
		if seen[m] {
			continue
		}
		seen[m] = true
		for i := range perMember {
			pts = append(pts, pt{HashString(m + "#" + strconv.Itoa(i)), m})
		}
	}
	// Ties (astronomically rare) break by name, so the ring never depends
	// on member order.
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].h != pts[j].h {
			return pts[i].h < pts[j].h
		}
		return pts[i].m < pts[j].m
	})
	r := &Ring{points: make([]uint64, len(pts)), owner: make([]string, len(pts))}
	for i, p := range pts {
		r.points[i], r.owner[i] = p.h, p.m
	}
	return r
}

// Pick is the member owning key, "" on an empty ring.
func (r *Ring) Pick(key string) string {
	if r == nil || len(r.points) == 0 {
		return ""
	}
	h := HashString(key)
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= h })
	if i == len(r.points) {
		i = 0
	}
	return r.owner[i]
}

// HashString is FNV-1a with a 64-bit finaliser: FNV alone bunches keys
// that differ only in their last bytes ("w#1", "w#2"), which would cluster
// a member's points.
func HashString(s string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(s))
	return mix64(f.Sum64())
}

// HashTokens hashes the first n tokens of ids (prefix_hash's key).
func HashTokens(ids []int32, n int) uint64 {
	if n > len(ids) || n <= 0 {
		n = len(ids)
	}
	h := uint64(14695981039346656037) // FNV-1a offset basis, over the ids' little-endian bytes
	for _, id := range ids[:n] {
		u := uint32(id)
		for k := 0; k < 4; k++ {
			h ^= uint64(byte(u >> (8 * k)))
			h *= 1099511628211
		}
	}
	return mix64(h)
}

func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

package epd

import (
	"hash/fnv"
	"sort"
	"strconv"
)

// DefaultVirtualNodes is how many ring points each encode worker gets: with
// 160 the busiest of a few workers stays within ~10-15% of the mean.
const DefaultVirtualNodes = 160

// Ring is a consistent-hashing ring over encode workers (docs/protocol.md
// §9.6: the same image always goes to the same encoder, whose embedding
// cache can then hit). Adding or removing a worker moves only the keys
// that worker gains or loses. A Ring is immutable; build a new one when
// the worker set changes.
type Ring struct {
	points []uint64
	owner  []string // owner[i] owns points[i]
}

// NewRing places vnodes points per worker (vnodes <= 0: DefaultVirtualNodes).
// Duplicate worker names count once.
func NewRing(workers []string, vnodes int) *Ring {
	if vnodes <= 0 {
		vnodes = DefaultVirtualNodes
	}
	seen := map[string]bool{}
	type pt struct {
		h uint64
		w string
	}
	var pts []pt
	for _, w := range workers {
		if seen[w] {
			continue
		}
		seen[w] = true
		for i := 0; i < vnodes; i++ {
			pts = append(pts, pt{hash64(w + "#" + strconv.Itoa(i)), w})
		}
	}
	// Ties (astronomically rare) break by name so the ring does not depend
	// on the order workers were listed in.
	sort.Slice(pts, func(i, j int) bool {
		if pts[i].h != pts[j].h {
			return pts[i].h < pts[j].h
		}
		return pts[i].w < pts[j].w
	})
	r := &Ring{points: make([]uint64, len(pts)), owner: make([]string, len(pts))}
	for i, p := range pts {
		r.points[i], r.owner[i] = p.h, p.w
	}
	return r
}

// Pick returns the worker owning key ("" for an empty ring).
func (r *Ring) Pick(key string) string {
	if len(r.points) == 0 {
		return ""
	}
	h := hash64(key)
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= h })
	if i == len(r.points) {
		i = 0
	}
	return r.owner[i]
}

// PickEncoder chooses the encode worker for an image by consistent hashing
// on its content hash (ItemHash's hex). Build a Ring once per worker set
// when picking often; this convenience builds one per call.
func PickEncoder(hash string, workers []string) string {
	return NewRing(workers, DefaultVirtualNodes).Pick(hash)
}

// hash64 is FNV-1a followed by a 64-bit finaliser: FNV alone clusters keys
// that differ only in their last bytes ("w#1", "w#2"), which would bunch a
// worker's virtual nodes together.
func hash64(s string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(s))
	x := f.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

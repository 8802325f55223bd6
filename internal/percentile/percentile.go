// Package percentile is tsd's one percentile helper. It has the two
// definitions tsd's figures are pinned to, each named for what it is:
//
//   - NearestRank: the smallest value with at least p% of the values at or
//     below it, so always an observed value (a real request's TTFT, a real
//     poll's time). The gateway's p50/p99 (gateway/traffic), the bench's
//     gateway-share and routing figures and gpuprobe's poll times use it.
//   - Linear: linear interpolation between the closest ranks, numpy's
//     percentile default, which the serving benchmarks tsd bench's report
//     is read beside (vLLM's and SGLang's bench_serving) compute their
//     TTFT/TPOT/ITL/E2E percentiles with; loadgen uses it so its numbers
//     compare with theirs.
//
// Both take values sorted ascending and answer the zero value for none.
package percentile

import (
	"cmp"
	"math"
	"slices"
)

// NearestRank is the nearest-rank percentile p (in percent) of sorted: the
// value at rank ⌈p/100 · n⌉ (1-based), clamped to the first and last, so
// p ≤ 0 is the smallest value and p ≥ 100 the largest.
func NearestRank[T cmp.Ordered](sorted []T, p float64) T {
	n := len(sorted)
	if n == 0 {
		var zero T
		return zero
	}
	k := p / 100 * float64(n)
	if r := math.Round(k); math.Abs(k-r) < 1e-9 {
		k = r // 99.9% of 1000 is rank 999, not 1000 by a rounding hair
	}
	i := int(math.Ceil(k))
	return sorted[min(max(i, 1), n)-1]
}

// NearestRankOf is NearestRank of vals in any order; vals stay as they are
// (a sorted copy is ranked).
func NearestRankOf[T cmp.Ordered](vals []T, p float64) T {
	return NearestRank(slices.Sorted(slices.Values(vals)), p)
}

// Linear is the percentile p (in percent, 0 to 100) of sorted by linear
// interpolation between the closest ranks: position p/100 · (n-1) (0-based)
// and the fraction of the way to the next value, as numpy.percentile's
// default ("linear") computes it.
func Linear(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	pos := min(max(p/100*float64(n-1), 0), float64(n-1))
	lo, hi := int(math.Floor(pos)), int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

package tui

import (
	"math"
	"strings"
)

// sparkBlocks are the eight heights of a one-row sparkline.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws vals as one row of width cells scaled to [0, top] (top
// ≤ 0: the largest value). With more values than cells each cell shows the
// largest value of its slice (a short spike stays visible); with fewer,
// the line is right-aligned, the newest at the right edge.
func sparkline(vals []float64, width int, top float64) string {
	if width <= 0 {
		return ""
	}
	cells := bucketMax(vals, width)
	if top <= 0 {
		for _, v := range cells {
			top = math.Max(top, v)
		}
	}
	var b strings.Builder
	b.Grow(width * 3)
	for i := len(cells); i < width; i++ {
		b.WriteByte(' ')
	}
	for _, v := range cells {
		b.WriteRune(sparkBlocks[level(v, top, len(sparkBlocks))])
	}
	return b.String()
}

// level maps v in [0, top] to 0..n-1: 0 for nothing (zero, negative,
// NaN), n-1 at top or above. Any positive value is at least 1, so a little
// traffic never looks like none.
func level(v, top float64, n int) int {
	if top <= 0 || v <= 0 || math.IsNaN(v) {
		return 0
	}
	l := int(math.Round(v / top * float64(n-1)))
	if l < 1 && n > 1 {
		l = 1
	}
	return min(l, n-1)
}

// bucketMax folds vals into at most n buckets (oldest first), each the
// largest value of its slice; fewer values than n are returned as they are.
func bucketMax(vals []float64, n int) []float64 {
	if len(vals) <= n {
		return vals
	}
	out := make([]float64, n)
	for i := range out {
		lo := i * len(vals) / n
		hi := (i + 1) * len(vals) / n
		m := vals[lo]
		for _, v := range vals[lo:hi] {
			m = math.Max(m, v)
		}
		out[i] = m
	}
	return out
}

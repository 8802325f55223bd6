package percentile

import (
	"math"
	"slices"
	"testing"
	"time"
)

// NearestRank's definition, row by row: the value at rank ⌈p/100 · n⌉,
// always one of the values. The 1..100 rows are the gateway's pinned p50
// and p99 (gateway/traffic TestQuantiles).
func TestNearestRank(t *testing.T) {
	t.Parallel()
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	thousand := make([]float64, 1000)
	for i := range thousand {
		thousand[i] = float64(i + 1)
	}
	for _, c := range []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"none", nil, 50, 0},
		{"one value is every percentile", []float64{7}, 99, 7},
		{"p50 of 1..100 is the 50th", hundred, 50, 50},
		{"p99 of 1..100 is the 99th", hundred, 99, 99},
		{"p90 of 1..100", hundred, 90, 90},
		{"p100 is the largest", hundred, 100, 100},
		{"p0 is the smallest", hundred, 0, 1},
		{"below 0 is the smallest", hundred, -5, 1},
		{"above 100 is the largest", hundred, 150, 100},
		{"p50 of an odd count is the middle", []float64{1, 2, 3, 4, 5}, 50, 3},
		{"p50 of an even count is the lower middle", []float64{1, 2, 3, 4}, 50, 2},
		{"a rank between values rounds up", []float64{1, 2, 3, 4}, 51, 3},
		{"p90 of 10", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{"p99 of 3 is the largest", []float64{1, 2, 3}, 99, 3},
		{"a fractional p at an exact rank", thousand, 99.9, 999},
		{"a fractional p between ranks", thousand, 99.95, 1000},
	} {
		if got := NearestRank(c.xs, c.p); got != c.want {
			t.Errorf("%s: NearestRank(p=%g) = %g, want %g", c.name, c.p, got, c.want)
		}
	}
}

// NearestRank works on durations as it does on floats, and NearestRankOf
// ranks a sorted copy, leaving its input in its order.
func TestNearestRankOf(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	in := slices.Clone(ds)
	if got := NearestRankOf(ds, 50); got != 3*time.Millisecond {
		t.Fatalf("p50 %s", got)
	}
	if got := NearestRankOf(ds, 90); got != 5*time.Millisecond {
		t.Fatalf("p90 %s", got)
	}
	if !slices.Equal(ds, in) {
		t.Fatalf("NearestRankOf reordered its input: %v", ds)
	}
	if got := NearestRankOf([]time.Duration(nil), 50); got != 0 {
		t.Fatalf("none: %s", got)
	}
}

// Linear's definition, row by row: numpy.percentile's default, the value
// at position p/100 · (n-1) interpolated between its neighbours. These are
// loadgen's pinned rows, numpy's answers for the same inputs.
func TestLinear(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"none", nil, 50, 0},
		{"one value is every percentile", []float64{7}, 99, 7},
		{"p50 of an even count is the mean of the middle two", []float64{1, 2, 3, 4}, 50, 2.5},
		{"p0 is the smallest", []float64{1, 2, 3, 4}, 0, 1},
		{"p100 is the largest", []float64{1, 2, 3, 4}, 100, 4},
		{"p99 between two values", []float64{0, 10}, 99, 9.9},
		{"p50 of an odd count is the middle", []float64{1, 2, 3, 4, 5}, 50, 3},
		{"p90 of 1..10", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9.1},
		{"below 0 is the smallest", []float64{1, 2}, -1, 1},
		{"above 100 is the largest", []float64{1, 2}, 101, 2},
		{"an exact position next to infinity", []float64{1, 2, math.Inf(1)}, 50, 2},
	} {
		if got := Linear(c.xs, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: Linear(p=%g) = %g, want %g", c.name, c.p, got, c.want)
		}
	}
}

package tui

import (
	"math"
	"sort"
	"time"
)

// series is a bounded ring of samples taken at snapshot times, oldest
// first when read. The dashboard keeps one per trend (a GPU's util, the
// gateway's req/s, …) and folds every snapshot into them in Update; memory
// is fixed by the capacity, so a deployment left up for days costs the
// same as one just started.
type series struct {
	vals  []float64
	times []time.Time
	head  int // next write
	n     int
}

// historyWindow is how much of the past the trends keep: 10 minutes at the
// publisher's 2 snapshots per second, with room to spare.
const (
	historyWindow = 10 * time.Minute
	historyCap    = 1500
)

func newSeries(capacity int) *series {
	return &series{vals: make([]float64, capacity), times: make([]time.Time, capacity)}
}

// add appends one sample; the oldest falls off a full ring.
func (s *series) add(t time.Time, v float64) {
	s.vals[s.head] = v
	s.times[s.head] = t
	s.head = (s.head + 1) % len(s.vals)
	if s.n < len(s.vals) {
		s.n++
	}
}

// len is the number of samples held.
func (s *series) len() int { return s.n }

// at is the i-th oldest sample.
func (s *series) at(i int) (time.Time, float64) {
	j := (s.head - s.n + i + len(s.vals)) % len(s.vals)
	return s.times[j], s.vals[j]
}

// last is the newest sample (zero when empty).
func (s *series) last() float64 {
	if s.n == 0 {
		return 0
	}
	_, v := s.at(s.n - 1)
	return v
}

// since returns the samples not older than d before the newest, oldest
// first, as a fresh slice (the renderer's input).
func (s *series) since(d time.Duration) []float64 {
	if s.n == 0 {
		return nil
	}
	newest, _ := s.at(s.n - 1)
	from := 0
	for from < s.n {
		t, _ := s.at(from)
		if newest.Sub(t) <= d {
			break
		}
		from++
	}
	out := make([]float64, 0, s.n-from)
	for i := from; i < s.n; i++ {
		_, v := s.at(i)
		out = append(out, v)
	}
	return out
}

// buckets folds the samples of the last d into at most n values, oldest
// first, each the largest of its slice (as bucketMax does, without copying
// the window first: a frame renders a dozen series of 1500 samples).
func (s *series) buckets(d time.Duration, n int) []float64 {
	if s.n == 0 || n <= 0 {
		return nil
	}
	newest, _ := s.at(s.n - 1)
	// Samples are in time order: the first one inside the window is found
	// by bisection, and the ring is walked by index, not through at()
	// (this runs for every trend on every frame).
	from := sort.Search(s.n, func(i int) bool {
		t, _ := s.at(i)
		return newest.Sub(t) <= d
	})
	count := s.n - from
	k := min(n, count)
	out := make([]float64, k)
	size := len(s.vals)
	idx := (s.head - s.n + from + size) % size
	for i := range out {
		lo := from + i*count/k
		hi := from + (i+1)*count/k
		m := s.vals[idx]
		idx++
		if idx == size {
			idx = 0
		}
		for j := lo + 1; j < hi; j++ {
			if v := s.vals[idx]; v > m {
				m = v
			}
			idx++
			if idx == size {
				idx = 0
			}
		}
		out[i] = m
	}
	return out
}

// ewma smooths a rate that is sampled at uneven intervals: the weight of
// the past decays with elapsed time (half-life hl), not with the number of
// samples, so a steady 3.8 req/s reads 3.8 whatever the snapshot cadence.
type ewma struct {
	hl    time.Duration
	v     float64
	at    time.Time
	valid bool
}

func (e *ewma) add(t time.Time, x float64) float64 {
	if !e.valid || !t.After(e.at) {
		if !e.valid {
			e.v, e.valid = x, true
		}
		e.at = t
		return e.v
	}
	alpha := 1 - math.Exp2(-float64(t.Sub(e.at))/float64(e.hl))
	e.v += alpha * (x - e.v)
	e.at = t
	return e.v
}

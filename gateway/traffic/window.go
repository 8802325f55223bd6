package traffic

import (
	"slices"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
)

// Rates are the mean of the last RateWindow whole seconds: a sliding
// window of one-second slots. Per-scrape differences of a counter read 0 →
// 2.5 → 8.0 → 4.0 for a steady 3.8 req/s when requests end in bursts; ten
// seconds of slots read 3.8 throughout, and a change shows within a second.
const RateWindow = 10

// second is the whole second of the book's time axis that t falls in.
func second(t time.Duration) int64 { return int64(t / time.Second) }

// window counts events per second over the last RateWindow whole seconds
// plus the current one. The zero value is ready.
type window struct {
	slot [RateWindow + 1]uint64
	sec  int64 // the newest second a slot holds
}

func slotOf(sec int64) int {
	n := int64(RateWindow + 1)
	return int(((sec % n) + n) % n)
}

// advance moves the window to sec, zeroing the slots of the seconds it
// skips; an older sec (never from a monotonic clock) changes nothing.
func (w *window) advance(sec int64) {
	if sec <= w.sec {
		return
	}
	n := min(sec-w.sec, RateWindow+1)
	for i := int64(1); i <= n; i++ {
		w.slot[slotOf(w.sec+i)] = 0
	}
	w.sec = sec
}

func (w *window) add(sec int64, n uint64) {
	w.advance(sec)
	if sec < w.sec {
		sec = w.sec
	}
	w.slot[slotOf(sec)] += n
}

// rate is the events per second over the whole seconds before sec: the
// last RateWindow of them, or all since the book began if fewer (so a
// fresh deployment does not read a tenth of its real rate at first).
func (w *window) rate(sec int64) float64 {
	w.advance(sec)
	span := min(sec, RateWindow)
	if span <= 0 {
		return 0
	}
	var sum uint64
	for i := int64(1); i <= span; i++ {
		sum += w.slot[slotOf(sec-i)]
	}
	return float64(sum) / float64(span)
}

// Percentiles come from the last SampleCap samples no older than
// SampleAge: bounded memory whatever the load, and an idle role's numbers
// fade instead of showing an hour-old p99 forever.
const (
	SampleCap = 1024
	SampleAge = time.Minute
)

// samples is a ring of (time, value) pairs. The zero value is ready.
type samples struct {
	at   [SampleCap]time.Duration
	v    [SampleCap]time.Duration
	next int
	n    int
}

func (s *samples) add(at, v time.Duration) {
	s.at[s.next], s.v[s.next] = at, v
	s.next = (s.next + 1) % SampleCap
	s.n = min(s.n+1, SampleCap)
}

// recent copies the values of the samples of the last SampleAge before
// now, for quantiles to sort outside the book's lock.
func (s *samples) recent(now time.Duration) []time.Duration {
	if s.n == 0 {
		return nil
	}
	vals := make([]time.Duration, 0, s.n)
	for i := 0; i < s.n; i++ {
		if now-s.at[i] <= SampleAge {
			vals = append(vals, s.v[i])
		}
	}
	return vals
}

// quantiles are the nearest-rank p50 and p99 of vals (sorted in place, no
// copy: this runs per role at every snapshot), each an observed sample;
// zero when there are none.
func quantiles(vals []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(vals)
	return percentile.NearestRank(vals, 50), percentile.NearestRank(vals, 99)
}

// Buckets are the upper bounds (seconds) of the histograms /metrics
// exports, the gateway's usual latency buckets.
var Buckets = bucketBounds[:]

var bucketBounds = [...]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// hist is a fixed-bucket, all-time histogram for Prometheus.
type hist struct {
	counts [len(bucketBounds)]uint64 // per bucket of Buckets, not cumulative; the rest is +Inf
	count  uint64
	sum    float64
}

func (h *hist) observe(d time.Duration) {
	s := d.Seconds()
	h.count++
	h.sum += s
	for i, ub := range Buckets {
		if s <= ub {
			h.counts[i]++
			return
		}
	}
}

// cumulative is Prometheus's bucket map: upper bound → observations ≤ it.
func (h *hist) cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, len(Buckets))
	var c uint64
	for i, ub := range Buckets {
		c += h.counts[i]
		m[ub] = c
	}
	return m
}

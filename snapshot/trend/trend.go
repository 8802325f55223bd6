// Package trend keeps a deployment's recent past: bounded rings of the
// gateway's rates, load and latencies and of every GPU's utilisation and
// memory, one sample per period, folded from Snapshots. The daemon keeps
// one in its publisher, so the past survives any dashboard and a new one
// shows it the moment it attaches (snapshot.History in its first
// Snapshot); the dashboard seeds its own from that and folds the live
// stream with the same code. Memory is fixed by the capacity: a daemon up
// for days costs what one just started does (docs/architecture.md, the
// trend rings).
package trend

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// The daemon's default: one sample a second for ten minutes.
const (
	DefaultPeriod = time.Second
	DefaultCap    = 600
	// MaxGPUs bounds the per-GPU series (a host has far fewer; a provider
	// that renumbers its GPUs cannot grow the set without end).
	MaxGPUs = 64
)

// Names of the gateway's series, in the order views list them.
const (
	ReqPerSec = "req/s"
	TokPerSec = "tok/s"
	InFlight  = "in flight"
	Queued    = "queued"
	TTFTp50   = "ttft p50" // milliseconds
	TTFTp99   = "ttft p99"
	ITLp50    = "itl p50"
	ITLp99    = "itl p99"
	// Cached is the share of the prefills' prompt tokens their engines
	// found in the prefix cache over the traffic window, in percent,
	// weighted by each prefill role's prompt tokens.
	Cached = "cached"
)

var gatewaySeries = []string{ReqPerSec, TokPerSec, InFlight, Queued, TTFTp50, TTFTp99, ITLp50, ITLp99, Cached}

// CachedShare is the prompt-weighted cached-token share of the prefill
// roles in rows; ok is false when no role has a prefix cache to show.
func CachedShare(rows []snapshot.RoleTraffic) (share float64, ok bool) {
	var prompt, cached float64
	for _, r := range rows {
		if len(r.Cache) == 0 {
			continue
		}
		ok = true
		prompt += r.PromptTokS
		cached += r.PromptTokS * r.CachedShare
	}
	if prompt > 0 {
		share = cached / prompt
	}
	return share, ok
}

// GPUUtil and GPUMem name GPU i's series (percent of the card).
func GPUUtil(i int) string { return fmt.Sprintf("gpu%d util", i) }
func GPUMem(i int) string  { return fmt.Sprintf("gpu%d mem", i) }

// RateHalfLife smooths the gateway's per-snapshot rates: long enough that
// a steady load reads steady, short enough that a stop shows within a
// few seconds.
const RateHalfLife = 2 * time.Second

// Set is the trend rings of one deployment. It is not safe for
// concurrent use: one goroutine owns it (the publisher's loop, or the
// dashboard's Update).
type Set struct {
	period time.Duration
	cap    int
	series []*Series // gateway series first, then GPUs by index
	byName map[string]*Series
	gpus   []int // GPU indices with series, sorted

	last     time.Time // the newest snapshot folded
	lastSlot int64     // the newest sample's period slot
	sampled  bool
	req, tok ewma
}

// New makes an empty set sampling once per period, capacity samples
// deep (period ≤ 0 and capacity ≤ 0 take the defaults).
func New(period time.Duration, capacity int) *Set {
	if period <= 0 {
		period = DefaultPeriod
	}
	if capacity <= 0 {
		capacity = DefaultCap
	}
	t := &Set{period: period, cap: capacity, byName: map[string]*Series{},
		req: ewma{hl: RateHalfLife}, tok: ewma{hl: RateHalfLife}}
	for _, n := range gatewaySeries {
		t.add(n)
	}
	return t
}

func (t *Set) add(name string) *Series {
	s := &Series{Name: name, vals: make([]float64, t.cap), times: make([]int64, t.cap)}
	t.series = append(t.series, s)
	t.byName[name] = s
	return s
}

// Period is the sample period; Window how far back the rings reach.
func (t *Set) Period() time.Duration { return t.period }
func (t *Set) Window() time.Duration { return t.period * time.Duration(t.cap) }

// Series are every series, in view order.
func (t *Set) Series() []*Series { return t.series }

// Get is the series named name (nil when there is none).
func (t *Set) Get(name string) *Series { return t.byName[name] }

// GPUs are the GPU indices that have series, ascending.
func (t *Set) GPUs() []int { return t.gpus }

// Len is the number of samples held (of the gateway's series).
func (t *Set) Len() int { return t.series[0].n }

// Span is the time between the oldest and the newest sample.
func (t *Set) Span() time.Duration {
	s := t.series[0]
	if s.n < 2 {
		return 0
	}
	first, _ := s.At(0)
	last, _ := s.At(s.n - 1)
	return last.Sub(first)
}

// round keeps what a trend can show (three decimals), so a History is
// small and the dashboard's fold and the daemon's agree exactly.
func round(v float64) float64 { return math.Round(v*1000) / 1000 }

// Fold takes one snapshot: the rates' smoothing sees every one, and a
// sample is taken when the snapshot falls in a new period slot.
// Snapshots without a time, or not newer than the last one folded, are
// ignored (a resubscription repeats the current one). It reports
// whether a sample was taken.
func (t *Set) Fold(s snapshot.Snapshot) bool {
	if s.Time.IsZero() || !s.Time.After(t.last) {
		return false
	}
	t.last = s.Time
	g := s.Gateway
	req := t.req.add(s.Time, g.ReqPerSec)
	tok := t.tok.add(s.Time, g.TokPerSec)
	slot := s.Time.UnixNano() / int64(t.period)
	if t.sampled && slot <= t.lastSlot {
		return false
	}
	t.sampled, t.lastSlot = true, slot
	at := s.Time.UnixNano()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, x := range []struct {
		name string
		v    float64
	}{
		{ReqPerSec, req}, {TokPerSec, tok}, {InFlight, float64(g.InFlight)}, {Queued, float64(g.Queued)},
		{TTFTp50, ms(g.TTFTp50)}, {TTFTp99, ms(g.TTFTp99)}, {ITLp50, ms(g.ITLp50)}, {ITLp99, ms(g.ITLp99)},
		{Cached, cachedPct(g.Roles)},
	} {
		t.byName[x.name].push(at, round(x.v))
	}
	seen := make(map[int]bool, len(s.GPUs))
	for _, gpu := range s.GPUs {
		if !t.hasGPU(gpu.Index) && !t.addGPU(gpu.Index) {
			continue
		}
		seen[gpu.Index] = true
		mem := 0.0
		if gpu.MemTotalB > 0 {
			mem = float64(gpu.MemUsedB) / float64(gpu.MemTotalB) * 100
		}
		t.byName[GPUUtil(gpu.Index)].push(at, round(float64(gpu.UtilPct)))
		t.byName[GPUMem(gpu.Index)].push(at, round(mem))
	}
	// A GPU without a reading this time reads 0 (no reading is no load
	// anyone can show), so every series stays aligned with the newest
	// sample.
	for _, i := range t.gpus {
		if !seen[i] {
			t.byName[GPUUtil(i)].push(at, 0)
			t.byName[GPUMem(i)].push(at, 0)
		}
	}
	return true
}

func cachedPct(rows []snapshot.RoleTraffic) float64 {
	share, _ := CachedShare(rows)
	return share * 100
}

func (t *Set) hasGPU(i int) bool {
	_, ok := t.byName[GPUUtil(i)]
	return ok
}

// addGPU makes GPU i's series, keeping the GPUs in index order.
func (t *Set) addGPU(i int) bool {
	if len(t.gpus) >= MaxGPUs {
		return false
	}
	t.gpus = append(t.gpus, i)
	sort.Ints(t.gpus)
	t.add(GPUUtil(i))
	t.add(GPUMem(i))
	t.series = t.series[:len(gatewaySeries)]
	for _, g := range t.gpus {
		t.series = append(t.series, t.byName[GPUUtil(g)], t.byName[GPUMem(g)])
	}
	return true
}

// History is a copy of the rings for a dashboard that attaches.
func (t *Set) History() *snapshot.History {
	h := &snapshot.History{PeriodMS: t.period.Milliseconds()}
	if t.req.valid {
		h.Rates = &snapshot.TrendRates{ReqPerSec: t.req.v, TokPerSec: t.tok.v, At: t.last}
	}
	base := t.series[0]
	h.TimesMS = make([]int64, base.n)
	for i := range h.TimesMS {
		at, _ := base.At(i)
		h.TimesMS[i] = at.UnixMilli()
	}
	for _, s := range t.series {
		vals := make([]float64, s.n)
		for i := range vals {
			_, vals[i] = s.At(i)
		}
		h.Series = append(h.Series, snapshot.TrendSeries{Name: s.Name, Values: vals})
	}
	return h
}

// FromHistory is a set seeded with the daemon's rings: the same period,
// at least capacity samples deep, the rates' smoothing starting from the
// newest sample. A malformed history (a series longer than its times)
// keeps what lines up.
func FromHistory(h *snapshot.History, capacity int) *Set {
	period := time.Duration(h.PeriodMS) * time.Millisecond
	t := New(period, max(capacity, len(h.TimesMS)))
	n := len(h.TimesMS)
	for _, hs := range h.Series {
		var s *Series
		switch {
		case t.byName[hs.Name] != nil:
			s = t.byName[hs.Name]
		default:
			var i int
			if _, err := fmt.Sscanf(hs.Name, "gpu%d util", &i); err != nil || hs.Name != GPUUtil(i) {
				continue // a series this version does not know
			}
			if !t.hasGPU(i) && !t.addGPU(i) {
				continue
			}
			s = t.byName[hs.Name]
		}
		vals := hs.Values
		if len(vals) > n {
			vals = vals[len(vals)-n:]
		}
		s.reset()
		for j, v := range vals {
			s.push(time.UnixMilli(h.TimesMS[n-len(vals)+j]).UnixNano(), v)
		}
	}
	// GPU memory series come with their util series; fill any the history
	// lacked so the set stays aligned.
	for _, g := range t.gpus {
		if mem := t.byName[GPUMem(g)]; mem.n == 0 {
			for j := n - t.byName[GPUUtil(g)].n; j < n; j++ {
				mem.push(time.UnixMilli(h.TimesMS[j]).UnixNano(), 0)
			}
		}
	}
	if n > 0 {
		last := time.UnixMilli(h.TimesMS[n-1])
		t.last, t.sampled, t.lastSlot = last, true, last.UnixNano()/int64(t.period)
		t.req = ewma{hl: RateHalfLife, v: t.byName[ReqPerSec].Last(), at: last, valid: true}
		t.tok = ewma{hl: RateHalfLife, v: t.byName[TokPerSec].Last(), at: last, valid: true}
	}
	if r := h.Rates; r != nil && !r.At.IsZero() {
		// Go on from the daemon's own smoothing, not the rounded sample.
		t.req = ewma{hl: RateHalfLife, v: r.ReqPerSec, at: r.At, valid: true}
		t.tok = ewma{hl: RateHalfLife, v: r.TokPerSec, at: r.At, valid: true}
		t.last = r.At
	}
	return t
}

// Series is one bounded ring of samples, oldest first when read.
type Series struct {
	Name  string
	vals  []float64
	times []int64 // Unix nanoseconds
	head  int     // next write
	n     int
}

func (s *Series) push(at int64, v float64) {
	s.vals[s.head] = v
	s.times[s.head] = at
	s.head = (s.head + 1) % len(s.vals)
	if s.n < len(s.vals) {
		s.n++
	}
}

func (s *Series) reset() { s.head, s.n = 0, 0 }

// Len is the number of samples held.
func (s *Series) Len() int { return s.n }

// At is the i-th oldest sample.
func (s *Series) At(i int) (time.Time, float64) {
	j := (s.head - s.n + i + len(s.vals)) % len(s.vals)
	return time.Unix(0, s.times[j]), s.vals[j]
}

// Last is the newest sample (0 when empty).
func (s *Series) Last() float64 {
	if s.n == 0 {
		return 0
	}
	_, v := s.At(s.n - 1)
	return v
}

// Buckets folds the samples of the last d (before the newest) into at
// most n values, oldest first, each the largest of its slice, so a short
// spike stays visible; lo and hi are the smallest and largest sample in
// that window (the range views print beside a sparkline).
func (s *Series) Buckets(d time.Duration, n int) (out []float64, lo, hi float64) {
	if s.n == 0 || n <= 0 {
		return nil, 0, 0
	}
	size := len(s.vals)
	newest := s.times[(s.head-1+size)%size]
	// Samples are in time order: the first one inside the window is found
	// by bisection, and the ring is walked by index (this runs for every
	// trend on every frame).
	from := sort.Search(s.n, func(i int) bool {
		return newest-s.times[(s.head-s.n+i+size)%size] <= int64(d)
	})
	count := s.n - from
	k := min(n, count)
	out = make([]float64, k)
	idx := (s.head - s.n + from + size) % size
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range out {
		a := from + i*count/k
		b := from + (i+1)*count/k
		m := math.Inf(-1)
		for j := a; j < b; j++ {
			v := s.vals[idx]
			m = max(m, v)
			lo, hi = min(lo, v), max(hi, v)
			idx++
			if idx == size {
				idx = 0
			}
		}
		out[i] = m
	}
	return out, lo, hi
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

package trend

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

var t0 = time.Date(2026, 11, 29, 9, 30, 0, 0, time.UTC)

func snap(at time.Time, req float64, gpus ...int) snapshot.Snapshot {
	s := snapshot.Snapshot{Time: at, Gateway: snapshot.GatewayStatus{ReqPerSec: req, InFlight: int(req), TTFTp99: time.Duration(req) * time.Millisecond}}
	for _, g := range gpus {
		s.GPUs = append(s.GPUs, snapshot.GPUStatus{Index: g, UtilPct: 10 * g, MemUsedB: 1 << 30, MemTotalB: 4 << 30})
	}
	return s
}

// The real period: one sample a second, ten minutes deep, whatever the
// snapshot cadence (the publisher sends up to ten a second while roles
// change, one a second otherwise).
func TestDefaultPeriod(t *testing.T) {
	if DefaultPeriod != time.Second || DefaultPeriod*DefaultCap != 10*time.Minute {
		t.Fatalf("default %s × %d", DefaultPeriod, DefaultCap)
	}
	set := New(0, 0)
	if set.Period() != time.Second || set.Window() != 10*time.Minute {
		t.Fatalf("New(0, 0): %s, window %s", set.Period(), set.Window())
	}
	// 20 s of snapshots at 10 Hz: 20 samples, one per second.
	for i := 0; i < 200; i++ {
		set.Fold(snap(t0.Add(time.Duration(i)*100*time.Millisecond), 3))
	}
	if n := set.Len(); n != 20 {
		t.Fatalf("%d samples from 20 s at 10 Hz, want 20", n)
	}
	if span := set.Span(); span != 19*time.Second {
		t.Fatalf("span %s", span)
	}
	// A second at 1 Hz after a gap of a minute: one more sample each.
	for i := 0; i < 3; i++ {
		set.Fold(snap(t0.Add(time.Minute+time.Duration(i)*time.Second), 3))
	}
	if n := set.Len(); n != 23 {
		t.Fatalf("%d samples, want 23", n)
	}
}

// The rings are bounded: after twice their capacity they hold exactly
// the newest capacity samples, oldest first.
func TestRingsBounded(t *testing.T) {
	set := New(time.Second, 50)
	for i := 0; i < 100; i++ {
		set.Fold(snap(t0.Add(time.Duration(i)*time.Second), float64(i), 0))
	}
	s := set.Get(InFlight)
	if s.Len() != 50 {
		t.Fatalf("len %d", s.Len())
	}
	if _, v := s.At(0); v != 50 {
		t.Fatalf("oldest %g, want 50", v)
	}
	if s.Last() != 99 || set.Get(GPUUtil(0)).Len() != 50 {
		t.Fatalf("newest %g, gpu len %d", s.Last(), set.Get(GPUUtil(0)).Len())
	}
}

// Snapshots without a time, or not newer than the last, change nothing
// (a resubscription repeats the current one).
func TestFoldIgnoresRepeats(t *testing.T) {
	set := New(time.Second, 10)
	if set.Fold(snapshot.Snapshot{}) {
		t.Fatal("a snapshot without a time was sampled")
	}
	set.Fold(snap(t0, 1))
	if set.Fold(snap(t0, 9)) || set.Fold(snap(t0.Add(-time.Second), 9)) || set.Len() != 1 {
		t.Fatalf("a repeat was sampled: %d", set.Len())
	}
}

// A GPU seen later gets its series then, aligned with the newest
// samples; one that stops reporting reads 0 so every series stays
// aligned.
func TestGPUSeriesAligned(t *testing.T) {
	set := New(time.Second, 10)
	set.Fold(snap(t0, 1, 1))
	set.Fold(snap(t0.Add(time.Second), 1, 0, 1))
	set.Fold(snap(t0.Add(2*time.Second), 1, 0))
	if got := set.GPUs(); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("gpus %v", got)
	}
	if n0, n1 := set.Get(GPUUtil(0)).Len(), set.Get(GPUUtil(1)).Len(); n0 != 2 || n1 != 3 {
		t.Fatalf("gpu0 %d samples, gpu1 %d", n0, n1)
	}
	if v := set.Get(GPUUtil(1)).Last(); v != 0 {
		t.Fatalf("gpu1 without a reading: %g", v)
	}
	names := []string{}
	for _, s := range set.Series() {
		names = append(names, s.Name)
	}
	if fmt.Sprint(names[len(gatewaySeries):]) != "[gpu0 util gpu0 mem gpu1 util gpu1 mem]" {
		t.Fatalf("series order %v", names)
	}
}

// History round-trips through JSON into a set that holds the same
// samples, and from then on the daemon's set and the dashboard's fold
// the same snapshots to the same samples.
func TestHistoryRoundTrip(t *testing.T) {
	daemon := New(time.Second, 100)
	for i := 0; i < 150; i++ {
		gpus := []int{0}
		if i > 120 {
			gpus = append(gpus, 3)
		}
		daemon.Fold(snap(t0.Add(time.Duration(i)*time.Second), float64(i%7)*1.3333333, gpus...))
	}
	b, err := json.Marshal(daemon.History())
	if err != nil {
		t.Fatal(err)
	}
	var h snapshot.History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	dash := FromHistory(&h, 100)
	for i := 150; i < 170; i++ {
		s := snap(t0.Add(time.Duration(i)*time.Second), float64(i%7)*1.3333333, 0, 3)
		daemon.Fold(s)
		dash.Fold(s)
	}
	if len(dash.Series()) != len(daemon.Series()) {
		t.Fatalf("%d series, want %d", len(dash.Series()), len(daemon.Series()))
	}
	for i, ds := range daemon.Series() {
		got := dash.Series()[i]
		if got.Name != ds.Name || got.Len() != ds.Len() {
			t.Fatalf("series %s: %d samples, want %s %d", got.Name, got.Len(), ds.Name, ds.Len())
		}
		for j := 0; j < ds.Len(); j++ {
			wt, wv := ds.At(j)
			gt, gv := got.At(j)
			if wv != gv || wt.UnixMilli() != gt.UnixMilli() {
				t.Fatalf("%s[%d] = %v %g, want %v %g", ds.Name, j, gt, gv, wt, wv)
			}
		}
	}
	if dash.Span() != daemon.Span() || dash.Len() != 100 {
		t.Fatalf("span %s, len %d", dash.Span(), dash.Len())
	}
	// A history that lies (a series longer than its times) keeps what
	// lines up; an unknown series is skipped.
	h.Series = append(h.Series, snapshot.TrendSeries{Name: "bogus", Values: []float64{1}})
	h.Series[0].Values = append(h.Series[0].Values, 1, 2, 3)
	if bad := FromHistory(&h, 10); bad.Get("bogus") != nil || bad.Len() != len(h.TimesMS) {
		t.Fatalf("malformed history: len %d", bad.Len())
	}
}

// Buckets keeps spikes (each cell the largest of its slice) and gives
// the window's range.
func TestBuckets(t *testing.T) {
	set := New(time.Second, 20)
	for i := 0; i < 12; i++ {
		v := 20.0
		if i == 7 {
			v = 90
		}
		s := snap(t0.Add(time.Duration(i)*time.Second), 0)
		s.Gateway.InFlight = int(v)
		set.Fold(s)
	}
	cells, lo, hi := set.Get(InFlight).Buckets(time.Hour, 4)
	if fmt.Sprint(cells) != "[20 20 90 20]" || lo != 20 || hi != 90 {
		t.Fatalf("buckets %v lo %g hi %g", cells, lo, hi)
	}
	cells, lo, hi = set.Get(InFlight).Buckets(3*time.Second, 10)
	if len(cells) != 4 || lo != 20 || hi != 20 {
		t.Fatalf("the last 3s: %v %g %g", cells, lo, hi)
	}
}

// Pins: a steady rate sampled at uneven intervals reads steady, and a step
// is followed at the half-life's pace, whatever the cadence.
func TestEWMA(t *testing.T) {
	e := ewma{hl: 2 * time.Second}
	at := time.Unix(0, 0)
	for _, dt := range []time.Duration{0, 100 * time.Millisecond, 900 * time.Millisecond, 3 * time.Second, 50 * time.Millisecond} {
		at = at.Add(dt)
		if v := e.add(at, 3.8); v != 3.8 {
			t.Fatalf("steady 3.8 read %g", v)
		}
	}
	if v := e.add(at.Add(2*time.Second), 0); v < 1.89 || v > 1.91 {
		t.Fatalf("after one half-life: %g", v)
	}
}

// The per-GPU series are bounded too.
func TestMaxGPUs(t *testing.T) {
	set := New(time.Second, 4)
	for i := 0; i < 3; i++ {
		var gpus []int
		for g := 0; g < MaxGPUs+10; g++ {
			gpus = append(gpus, g+i*100)
		}
		set.Fold(snap(t0.Add(time.Duration(i)*time.Second), 1, gpus...))
	}
	if n := len(set.GPUs()); n != MaxGPUs {
		t.Fatalf("%d GPU series, want at most %d", n, MaxGPUs)
	}
}

// The "cached" series is the prompt-weighted cached-token share of the
// prefill roles, in percent; 0 while no prefill has a prefix cache.
func TestCachedSeries(t *testing.T) {
	set := New(time.Second, 10)
	s := snap(t0, 1)
	set.Fold(s)
	if v := set.Get(Cached).Last(); v != 0 {
		t.Fatalf("no cache: %g", v)
	}
	s = snap(t0.Add(time.Second), 1)
	s.Gateway.Roles = []snapshot.RoleTraffic{
		{Role: "prefill-0", PromptTokS: 300, CachedShare: 0.9, Cache: []snapshot.RankCache{{}}},
		{Role: "prefill-1", PromptTokS: 100, CachedShare: 0.1, Cache: []snapshot.RankCache{{}}},
		{Role: "decode"},
	}
	set.Fold(s)
	if v := set.Get(Cached).Last(); v != 70 {
		t.Fatalf("cached %g, want 70 (300·0.9 + 100·0.1 over 400)", v)
	}
	if _, ok := CachedShare(s.Gateway.Roles[2:]); ok {
		t.Fatal("a decode has a cache to show")
	}
}

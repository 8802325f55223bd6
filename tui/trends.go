package tui

import (
	"fmt"
	"sort"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// trends is the dashboard's memory of the past: the gateway's rates and
// load and every GPU's utilisation and memory, folded from each snapshot
// into bounded rings (view state only; the daemon keeps no history).
type trends struct {
	last     time.Time
	reqRate  ewma
	tokRate  ewma
	req      *series
	tok      *series
	inflight *series
	queued   *series
	// The gateway's latency percentiles over its last minute, in ms.
	ttft50, ttft99, itl50, itl99 *series
	// cached is the share of the prefills' prompt tokens found in the
	// engines' prefix caches (percent), kept once a prefill reports one.
	cached   *series
	hasCache bool
	gpuUtil  map[int]*series // by GPU index
	gpuMem   map[int]*series // percent of the card
	bar      *painter        // the sparklines' colour
}

// rateHalfLife smooths the gateway's per-snapshot rates: long enough that
// a steady load reads steady, short enough that a stop shows within a few
// seconds.
const rateHalfLife = 2 * time.Second

func newTrends() *trends {
	return &trends{
		reqRate: ewma{hl: rateHalfLife}, tokRate: ewma{hl: rateHalfLife},
		req: newSeries(historyCap), tok: newSeries(historyCap), inflight: newSeries(historyCap),
		queued: newSeries(historyCap), ttft50: newSeries(historyCap), ttft99: newSeries(historyCap),
		itl50: newSeries(historyCap), itl99: newSeries(historyCap), cached: newSeries(historyCap),
		gpuUtil: map[int]*series{}, gpuMem: map[int]*series{},
	}
}

// fold takes one snapshot; snapshots without a time, or not newer than
// the last one folded, are ignored (a resubscription repeats the current).
func (t *trends) fold(s snapshot.Snapshot) {
	if s.Time.IsZero() || !s.Time.After(t.last) {
		return
	}
	t.last = s.Time
	g := s.Gateway
	t.req.add(s.Time, t.reqRate.add(s.Time, g.ReqPerSec))
	t.tok.add(s.Time, t.tokRate.add(s.Time, g.TokPerSec))
	t.inflight.add(s.Time, float64(g.InFlight))
	t.queued.add(s.Time, float64(g.Queued))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	t.ttft50.add(s.Time, ms(g.TTFTp50))
	t.ttft99.add(s.Time, ms(g.TTFTp99))
	t.itl50.add(s.Time, ms(g.ITLp50))
	t.itl99.add(s.Time, ms(g.ITLp99))
	if share, ok := cachedShare(g.Roles); ok || t.hasCache {
		t.hasCache = true
		t.cached.add(s.Time, share*100)
	}
	for _, gpu := range s.GPUs {
		if t.gpuUtil[gpu.Index] == nil {
			t.gpuUtil[gpu.Index] = newSeries(historyCap)
			t.gpuMem[gpu.Index] = newSeries(historyCap)
		}
		t.gpuUtil[gpu.Index].add(s.Time, float64(gpu.UtilPct))
		mem := 0.0
		if gpu.MemTotalB > 0 {
			mem = float64(gpu.MemUsedB) / float64(gpu.MemTotalB) * 100
		}
		t.gpuMem[gpu.Index].add(s.Time, mem)
	}
}

// cachedShare is the prompt-weighted share of cached prompt tokens over
// the prefill roles; ok is false when no role has a prefix cache to show.
func cachedShare(roles []snapshot.RoleTraffic) (share float64, ok bool) {
	var prompt, cached float64
	for _, r := range roles {
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

// smoothed are the gateway's rates as the trends read them now.
func (t *trends) smoothed() (reqPerSec, tokPerSec float64) {
	return t.req.last(), t.tok.last()
}

// trendRow is one line of the trends panel.
type trendRow struct {
	label string
	s     *series
	top   float64 // 0: scale to the window's largest value
	value string
}

func (t *trends) rows(device string) []trendRow {
	out := []trendRow{
		{"req/s", t.req, 0, ftoa(t.req.last(), 1)},
		{"tok/s", t.tok, 0, ftoa(t.tok.last(), 0)},
		{"in flight", t.inflight, 0, fmt.Sprintf("%.0f", t.inflight.last())},
		{"queued", t.queued, 0, fmt.Sprintf("%.0f", t.queued.last())},
		{"ttft p50", t.ttft50, 0, msText(t.ttft50.last())},
		{"ttft p99", t.ttft99, 0, msText(t.ttft99.last())},
		{"itl p50", t.itl50, 0, msText(t.itl50.last())},
		{"itl p99", t.itl99, 0, msText(t.itl99.last())},
	}
	if t.hasCache {
		out = append(out, trendRow{"cached", t.cached, 100, fmt.Sprintf("%.0f%%", t.cached.last())})
	}
	idx := make([]int, 0, len(t.gpuUtil))
	for i := range t.gpuUtil {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		out = append(out,
			trendRow{fmt.Sprintf("%s%d util", device, i), t.gpuUtil[i], 100, fmt.Sprintf("%.0f%%", t.gpuUtil[i].last())},
			trendRow{fmt.Sprintf("%s%d mem", device, i), t.gpuMem[i], 100, fmt.Sprintf("%.0f%%", t.gpuMem[i].last())})
	}
	return out
}

// msText is a latency in milliseconds in the dashboard's one duration
// style.
func msText(ms float64) string {
	return snapshot.FormatDuration(time.Duration(ms * float64(time.Millisecond)))
}

// lines renders at most rows lines of width w: a heading, then one
// sparkline per trend over the last 10 minutes, the gateway's first.
func (t *trends) lines(st Styles, device string, w, rows int) []string {
	if rows < 2 || w < 30 || t.req.len() == 0 {
		return nil
	}
	span := time.Duration(0)
	if n := t.req.len(); n > 1 {
		first, _ := t.req.at(0)
		last, _ := t.req.at(n - 1)
		span = min(last.Sub(first), historyWindow)
	}
	out := []string{st.Title.Render("trends") + st.Faint.Render(" · last "+humanDuration(span))}
	const labelW, valueW = 12, 8
	sparkW := w - labelW - valueW - 4
	if t.bar == nil {
		b := painterOf(st.BarFilled) // Render measures the whole line: once is enough
		t.bar = &b
	}
	bar := *t.bar
	for _, r := range t.rows(device) {
		if len(out) == rows {
			break
		}
		spark := sparkline(r.s.buckets(historyWindow, sparkW), sparkW, r.top)
		out = append(out, fmt.Sprintf("  %-*s%s %*s", labelW, r.label, bar.wrap(spark), valueW, r.value))
	}
	return out
}

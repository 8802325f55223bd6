package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/snapshot/trend"
)

// trends is the dashboard's view of the past: the daemon's trend rings
// (snapshot/trend) as its first snapshot brought them, then every
// snapshot folded in with the same code, so attaching shows the past at
// once and a detach loses nothing.
type trends struct {
	set    *trend.Set
	daemon bool     // the rings came from the daemon (an attach)
	bar    *painter // the sparklines' colour
	// cache: some prefill has a prefix cache to show (its "cached" line
	// is drawn from then on).
	cache bool
}

func newTrends() *trends { return &trends{set: trend.New(trend.DefaultPeriod, trend.DefaultCap)} }

// fold takes one snapshot; one that carries the daemon's history (the
// first of an attach) replaces the rings with it.
func (t *trends) fold(s snapshot.Snapshot) {
	if s.History != nil {
		t.set, t.daemon = trend.FromHistory(s.History, trend.DefaultCap), true
	}
	t.set.Fold(s)
	if _, ok := trend.CachedShare(s.Gateway.Roles); ok {
		t.cache = true
	}
}

// trendKind says how a series' numbers read.
type trendKind uint8

const (
	trendCount trendKind = iota // req/s, tok/s, in flight: plain numbers
	trendMS                     // latencies in milliseconds
	trendPct                    // GPU util and memory, 0..100
)

// trendRow is one line of the trends panel.
type trendRow struct {
	label string
	s     *trend.Series
	kind  trendKind
	prec  int // decimals of a count
}

func (t *trends) rows(device string) []trendRow {
	out := []trendRow{
		{"req/s", t.set.Get(trend.ReqPerSec), trendCount, 1},
		{"tok/s", t.set.Get(trend.TokPerSec), trendCount, 0},
		{"in flight", t.set.Get(trend.InFlight), trendCount, 0},
		{"queued", t.set.Get(trend.Queued), trendCount, 0},
		{"ttft p50", t.set.Get(trend.TTFTp50), trendMS, 0},
		{"ttft p99", t.set.Get(trend.TTFTp99), trendMS, 0},
		{"itl p50", t.set.Get(trend.ITLp50), trendMS, 0},
		{"itl p99", t.set.Get(trend.ITLp99), trendMS, 0},
	}
	if t.cache {
		out = append(out, trendRow{"cached", t.set.Get(trend.Cached), trendPct, 0})
	}
	for _, i := range t.set.GPUs() {
		out = append(out,
			trendRow{fmt.Sprintf("%s%d util", device, i), t.set.Get(trend.GPUUtil(i)), trendPct, 0},
			trendRow{fmt.Sprintf("%s%d mem", device, i), t.set.Get(trend.GPUMem(i)), trendPct, 0})
	}
	return out
}

func (r trendRow) text(v float64) string {
	switch r.kind {
	case trendMS:
		return msText(v)
	case trendPct:
		return fmt.Sprintf("%.0f%%", v)
	}
	return ftoa(v, r.prec)
}

// msText is a latency in milliseconds in the dashboard's one duration
// style.
func msText(ms float64) string {
	return snapshot.FormatDuration(time.Duration(ms * float64(time.Millisecond)))
}

// Widths of a trends line: label, the newest value, the window's range.
const trendLabelW, trendValueW, trendRangeW = 12, 8, 13

// lines renders at most rows lines of width w: a heading, then one
// sparkline per trend over the window the rings keep, the gateway's
// first. Each line ends with the newest value and the window's range
// (smallest–largest): a sparkline is scaled to its largest value, so a
// flat 20 ms line draws full bars and the range says it is flat. GPU
// lines are coloured by load as their bars are.
func (t *trends) lines(st Styles, ps *[numPaints]painter, device string, w, rows int) []string {
	set := t.set
	if rows < 2 || w < 40 || set.Len() == 0 {
		return nil
	}
	span := min(set.Span(), set.Window())
	about := " · last " + humanDuration(span) + " · a sample each " + snapshot.FormatDuration(set.Period())
	if t.daemon {
		about += " · kept by the daemon"
	}
	head := st.Title.Render("trends") + st.Faint.Render(about)
	out := []string{head}
	sparkW := w - trendLabelW - trendValueW - trendRangeW - 4
	if t.bar == nil {
		b := painterOf(st.BarFilled) // Render measures the whole line: once is enough
		t.bar = &b
	}
	for _, r := range t.rows(device) {
		if len(out) == rows {
			break
		}
		cells, lo, hi := r.s.Buckets(set.Window(), sparkW)
		top := 0.0
		bar := *t.bar
		if r.kind == trendPct {
			top = 100 // a card's share reads against the whole card
			bar = ps[loadPaint(r.s.Last(), r.label)]
		}
		spark := sparkline(cells, sparkW, top)
		rng := r.text(lo) + "–" + r.text(hi)
		out = append(out, "  "+fit(r.label, trendLabelW)+bar.wrap(spark)+" "+fitRight(r.text(r.s.Last()), trendValueW)+" "+
			ps[pFaint].wrap(fitRight(rng, trendRangeW)))
	}
	return out
}

// Load thresholds (percent), as nvitop colours a GPU: light below the
// first, moderate below the second, heavy from it.
var (
	utilThresholds = [2]float64{10, 75}
	memThresholds  = [2]float64{10, 80}
)

// loadPaint colours a GPU's utilisation or memory share by threshold:
// green light, yellow moderate, red heavy.
func loadPaint(pct float64, label string) paint {
	th := utilThresholds
	if strings.HasSuffix(label, "mem") {
		th = memThresholds
	}
	switch {
	case pct < th[0]:
		return pGood
	case pct < th[1]:
		return pBusy
	}
	return pBad
}

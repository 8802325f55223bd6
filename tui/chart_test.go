package tui

import (
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/snapshot/trend"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// Pins: a sparkline is exactly width cells, right-aligned, scaled to its
// top, and a short spike survives the folding of many samples into few
// cells; a positive value never draws as nothing.
func TestSparkline(t *testing.T) {
	for _, c := range []struct {
		vals  []float64
		width int
		top   float64
		want  string
	}{
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7}, 8, 7, "▁▂▃▄▅▆▇█"},
		{[]float64{4, 8}, 5, 0, "   ▅█"},
		{[]float64{0, 0, 0, 9, 0, 0, 0, 0}, 2, 9, "█▁"},
		{[]float64{0.01, 0}, 2, 100, "▂▁"},
		{nil, 3, 0, "   "},
	} {
		got := sparkline(c.vals, c.width, c.top)
		if got != c.want || utf8.RuneCountInString(got) != c.width {
			t.Errorf("sparkline(%v, %d, %g) = %q, want %q", c.vals, c.width, c.top, got, c.want)
		}
	}
}

// Pins: the braille chart fills from the bottom, one dot row per quarter
// cell, two samples per cell, newest at the right, every line width wide.
func TestBrailleChart(t *testing.T) {
	// 4 samples over 2 cells × 2 rows (8 dot rows): 0, full, half, quarter.
	lines := brailleChart([]float64{0, 8, 4, 2}, 2, 2, 8)
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	// Top row: only the full sample (right half of cell 0) reaches it.
	// Bottom row: cell 0's right half full; cell 1's left half full (4 of
	// 8 dots: the whole bottom row), its right half 2 dots.
	want := []string{
		string(rune(0x2800|0x08|0x10|0x20|0x80)) + string(rune(0x2800)),
		string(rune(0x2800|0x08|0x10|0x20|0x80)) + string(rune(0x2800|0x01|0x02|0x04|0x40|0x20|0x80)),
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("row %d = %q, want %q", i, lines[i], want[i])
		}
	}
	for _, l := range brailleChart(make([]float64, 500), 40, 3, 0) {
		if utf8.RuneCountInString(l) != 40 || strings.Trim(l, "\u2800") != "" {
			t.Fatalf("empty chart line %q", l)
		}
	}
}

func BenchmarkBrailleChart200(b *testing.B) {
	vals := make([]float64, trend.DefaultCap)
	for i := range vals {
		vals[i] = float64(i % 97)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = brailleChart(vals, 200, 4, 0)
	}
}

// Pins: a role's GPU memory reads per card, never as a sum no card holds
// (two 107 GiB shares on 141 GiB cards are "≤107 GiB/GPU", not "214
// GiB"), and says it is per GPU ("2×107 GiB" read as a total).
func TestGPUMemPerCard(t *testing.T) {
	gpuMemText := func(per []gpuMem, sum uint64) string {
		var c cell
		gpuMemCell(&c, per, sum)
		return c.forms[0]
	}
	s := snapshot.Snapshot{GPUs: []snapshot.GPUStatus{
		{Index: 0, MemTotalB: 141 << 30, Processes: []snapshot.GPUProcess{{PID: 1, UsedB: 107 << 30, Role: "decode"}, {PID: 2, UsedB: 3 << 30, Role: "prefill"}}},
		{Index: 1, MemTotalB: 141 << 30, Processes: []snapshot.GPUProcess{{PID: 3, UsedB: 107 << 30, Role: "decode"}}},
	}}
	if got := gpuMemText(roleGPUMem(&s, "decode"), 214<<30); got != "≤107 GiB/GPU" {
		t.Errorf("decode: %q", got)
	}
	if got := gpuMemText(roleGPUMem(&s, "prefill"), 3<<30); got != humanBytes(3<<30) {
		t.Errorf("prefill: %q", got)
	}
	if got := gpuMemText(nil, 0); got != "-" {
		t.Errorf("none: %q", got)
	}
}

// Pins: a role whose log cannot be written says so in red in
// the REASON column, ahead of its reason.
func TestLogErrorShown(t *testing.T) {
	s := tuitest.Deployment(2, 1, 1, t0)
	s.Roles[0].LogError = "log write failed: no space left on device"
	m, _ := newTestModel(t, 160, 30, s)
	if !strings.Contains(plain(m), "log write failed: no space left on device") {
		t.Fatalf("log error not shown:\n%s", plain(m))
	}
}

// brailleChart draws vals as a filled area chart of width × height cells
// in braille dots (2 columns × 4 rows of dots per cell), scaled to
// [0, top] (top ≤ 0: the largest value), newest at the right. It returns
// height lines, top line first, each exactly width cells wide.
func brailleChart(vals []float64, width, height int, top float64) []string {
	if width <= 0 || height <= 0 {
		return nil
	}
	cols := bucketMax(vals, width*2)
	if top <= 0 {
		for _, v := range cols {
			top = math.Max(top, v)
		}
	}
	dotsHigh := height * 4
	// Right-align: column c of the chart shows cols[c-pad].
	pad := width*2 - len(cols)
	lines := make([]string, height)
	var b strings.Builder
	for row := 0; row < height; row++ {
		b.Reset()
		b.Grow(width * 3)
		for cell := 0; cell < width; cell++ {
			var bits rune
			for half := 0; half < 2; half++ {
				c := cell*2 + half - pad
				if c < 0 {
					continue
				}
				h := level(cols[c], top, dotsHigh+1) // dots filled from the bottom
				for dy := 0; dy < 4; dy++ {
					// Dot rows from the bottom of the whole chart.
					fromBottom := (height-1-row)*4 + (3 - dy)
					if fromBottom < h {
						bits |= brailleDot(half, dy)
					}
				}
			}
			b.WriteRune(0x2800 + bits)
		}
		lines[row] = b.String()
	}
	return lines
}

// brailleDot is the bit of the dot in column x (0, 1) and row y (0 top … 3)
// of a braille cell.
func brailleDot(x, y int) rune {
	if y == 3 {
		return [2]rune{0x40, 0x80}[x]
	}
	return rune(1<<(y+3*x)) & 0x3f
}

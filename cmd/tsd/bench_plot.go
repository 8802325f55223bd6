package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/tsd-project/tsd/loadgen"
)

// plotLayouts draws a comparison as a PNG: goodput against offered rate
// on the left (the dashed diagonal is every request meeting the SLO), TTFT
// p90 against offered rate on the right (the dashed line is the TTFT
// objective), one line per layout, under a heading with the workload, the
// SLO and, for simulated figures, that they are simulated. A point sent
// all at once (rate inf) is placed at the throughput it reached.
func plotLayouts(path string, rep layoutReport, slo loadgen.SLO) error {
	good := plot.New()
	good.Title.Text = "Goodput: requests/s that met the SLO"
	if rep.SLO == "" {
		good.Title.Text = "Throughput: completed requests/s (no SLO given)"
	}
	good.X.Label.Text = "offered load (requests/s)"
	good.Y.Label.Text = "requests/s"
	ttft := plot.New()
	ttft.Title.Text = "Time to first token, p90"
	ttft.X.Label.Text = "offered load (requests/s)"
	ttft.Y.Label.Text = "ms"
	maxX := 0.0
	for i, l := range rep.Layouts {
		var g, t plotter.XYs
		for _, p := range l.Points {
			x := p.rate
			if math.IsInf(x, 1) || x <= 0 {
				x = p.Summary.RequestThroughput
			}
			y := p.Summary.RequestThroughput
			if p.Summary.Goodput != nil {
				y = p.Summary.Goodput.Goodput
			}
			g = append(g, plotter.XY{X: x, Y: y})
			if p.Summary.P90TTFTms > 0 { // a log axis has no 0
				t = append(t, plotter.XY{X: x, Y: p.Summary.P90TTFTms})
			}
			maxX = max(maxX, x)
		}
		if len(g) == 0 {
			continue
		}
		byX := func(a, b plotter.XY) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		}
		slices.SortFunc(g, byX)
		slices.SortFunc(t, byX)
		label := l.Name
		if l.Shape != "" {
			label += " (" + l.Shape + ")"
		}
		if l.Name == rep.Winner && len(rep.Layouts) > 1 {
			label += " — winner"
		}
		for _, panel := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{good, g}, {ttft, t}} {
			if len(panel.xys) == 0 {
				continue
			}
			line, pts, err := plotter.NewLinePoints(panel.xys)
			if err != nil {
				return fmt.Errorf("plot %s: %w", l.Name, err)
			}
			line.Color = plotutil.Color(i)
			line.Width = vg.Points(2)
			pts.Color = plotutil.Color(i)
			pts.Shape = plotutil.Shape(i)
			panel.p.Add(line, pts)
			if panel.p == good {
				panel.p.Legend.Add(label, line, pts)
			}
		}
	}
	if maxX > 0 {
		if rep.SLO != "" {
			if diag, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: maxX, Y: maxX}}); err == nil {
				diag.Color = color.Gray{Y: 160}
				diag.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
				good.Add(diag)
				good.Legend.Add("every request met the SLO", diag)
			}
		}
		if slo.TTFT > 0 {
			lim := float64(slo.TTFT.Milliseconds())
			if l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: lim}, {X: maxX, Y: lim}}); err == nil {
				l.Color = color.RGBA{R: 200, A: 255}
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
				ttft.Add(l)
				ttft.Legend.Add(fmt.Sprintf("TTFT objective %d ms", slo.TTFT.Milliseconds()), l)
			}
		}
	}
	good.X.Min, ttft.X.Min, good.Y.Min = 0, 0, 0
	good.X.Tick.Marker, good.Y.Tick.Marker, ttft.X.Tick.Marker = cleanTicks{plot.DefaultTicks{}}, cleanTicks{plot.DefaultTicks{}}, cleanTicks{plot.DefaultTicks{}}
	// TTFT spans orders of magnitude between a layout that keeps up and
	// one whose prefill queue grows: a log axis shows both.
	if lo, hi := ttftRange(rep); lo > 0 && hi/lo > 20 {
		ttft.Y.Scale = plot.LogScale{}
		ttft.Y.Tick.Marker = logTicks{}
		ttft.Y.Label.Text = "ms (log scale)"
	} else {
		ttft.Y.Min = 0
		ttft.Y.Tick.Marker = cleanTicks{plot.DefaultTicks{}}
	}
	good.Legend.Top, good.Legend.Left = true, true
	ttft.Legend.Top, ttft.Legend.Left = true, true
	good.Add(plotter.NewGrid())
	ttft.Add(plotter.NewGrid())

	const w, h = 30 * vg.Centimeter, 13 * vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	heading := plotHeading(rep)
	sty := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, 10), XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	lineH := sty.FontExtents().Height
	top := vg.Length(len(heading))*lineH + vg.Points(8)
	for i, line := range heading {
		st := sty
		if i == 0 {
			st.Font = font.From(plot.DefaultFont, 12)
		}
		dc.FillText(st, vg.Point{X: w / 2, Y: h - vg.Points(4) - vg.Length(i)*lineH}, line)
	}
	body := draw.Crop(dc, 0, 0, 0, -top)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Points(4), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10)}
	cs := plot.Align([][]*plot.Plot{{good, ttft}}, tiles, body)
	good.Draw(cs[0][0])
	ttft.Draw(cs[0][1])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write --plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write --plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write --plot %s: %w", path, err)
	}
	return nil
}

// cleanTicks labels ticks with as few digits as their values need ("25",
// not "25.00").
type cleanTicks struct{ plot.Ticker }

func (t cleanTicks) Ticks(min, max float64) []plot.Tick {
	ts := t.Ticker.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(math.Round(ts[i].Value*1e6)/1e6, 'f', -1, 64)
		}
	}
	return ts
}

// logTicks marks 1..9 × 10^k on a log axis and labels 1, 2 and 5 ×
// 10^k, so a range within one or two decades still reads.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow(10, e)
			if v < min || v > max {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// ttftRange is the smallest and largest TTFT p90 plotted.
func ttftRange(rep layoutReport) (lo, hi float64) {
	for _, l := range rep.Layouts {
		for _, p := range l.Points {
			v := p.Summary.P90TTFTms
			if v <= 0 {
				continue
			}
			if lo == 0 || v < lo {
				lo = v
			}
			hi = max(hi, v)
		}
	}
	return lo, hi
}

// plotHeading is the PNG's heading: what was compared, under which SLO,
// and whether the figures are simulated (wrapped to the image's width).
func plotHeading(rep layoutReport) []string {
	title := "Layouts compared"
	if len(rep.Layouts) == 1 {
		title = "Rate sweep: " + rep.Layouts[0].Name
	}
	if rep.SLO != "" {
		title += " under " + rep.SLO
	}
	lines := []string{title}
	lines = append(lines, wrap(rep.Workload, 150)...)
	if rep.Simulated != "" {
		lines = append(lines, wrap(strings.ToUpper(rep.Simulated[:1])+rep.Simulated[1:], 150)...)
	}
	return lines
}

// wrap splits s into lines of at most n bytes at spaces.
func wrap(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := strings.LastIndexByte(s[:n+1], ' ')
		if i <= 0 {
			i = n
		}
		out = append(out, s[:i])
		s = strings.TrimLeft(s[i:], " ")
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

package loadgen

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Shape is a serving layout's engines by role kind, as a comparison
// names it.
type Shape struct {
	Aggregated, Prefill, Decode, Encode int
}

// String is the shape in the words layouts are usually given:
// "aggregated ×4", "1P+3D", "1E+1P+2D", "2A+1P+1D".
func (s Shape) String() string {
	if s.Prefill == 0 && s.Decode == 0 && s.Encode == 0 {
		if s.Aggregated == 0 {
			return "no engines"
		}
		return fmt.Sprintf("aggregated ×%d", s.Aggregated)
	}
	var parts []string
	for _, p := range []struct {
		n    int
		kind string
	}{{s.Aggregated, "A"}, {s.Encode, "E"}, {s.Prefill, "P"}, {s.Decode, "D"}} {
		if p.n > 0 {
			parts = append(parts, strconv.Itoa(p.n)+p.kind)
		}
	}
	return strings.Join(parts, "+")
}

// LayoutRun is one layout's results for Compare: its points in sweep
// order (the same rates, in the same order, for every layout of a
// comparison).
type LayoutRun struct {
	Name   string
	Shape  Shape
	Points []Point
}

// Point is one measured load of a layout.
type Point struct {
	Rate        float64 // offered requests/s (+Inf: all at once)
	Concurrency int     // the concurrency limit (0: none)
	Throughput  float64 // completed requests/s
	Completed   int
	Failed      int
	Goodput     *Goodput // nil: no SLO given
}

// Load is the point's offered load as the report prints it: "4 req/s",
// "C=8", "inf".
func (p Point) Load() string {
	if !math.IsInf(p.Rate, 1) && p.Rate > 0 {
		s := strconv.FormatFloat(p.Rate, 'f', -1, 64) + " req/s"
		if p.Concurrency > 0 {
			s += fmt.Sprintf(", C=%d", p.Concurrency)
		}
		return s
	}
	if p.Concurrency > 0 {
		return fmt.Sprintf("C=%d", p.Concurrency)
	}
	return "all at once"
}

// score is what a point is ranked by: goodput against the SLO, else
// completed requests/s.
func (p Point) score() float64 {
	if p.Goodput != nil {
		return p.Goodput.Goodput
	}
	return p.Throughput
}

// Verdict is Compare's answer: the winning layout (empty when none served
// a request within the SLO) and why, in words a person reads.
type Verdict struct {
	Winner string `json:"winner"`
	Reason string `json:"reason"`
	// Best is each layout's best point (index into its Points; -1: none).
	Best map[string]int `json:"best_point"`
}

// Compare names the layout with the highest goodput (requests/s that met
// every objective, at its best point of the sweep; completed requests/s
// when no SLO was given) and says why: the winner's figure and the
// objectives it met, and for each other layout its figure at the
// winner's load and the objective it broke most often there, with the
// usual cause for that layout's shape.
//
// Peaks within closeShare of the highest are a tie at a run's size (one
// sample per rate), so they are ranked by their goodput over the whole
// sweep (the sum over its rates: the layout that holds up at the other
// loads), then by SLO attainment at their best point, then by fewer
// failures, then by the order given; the reason says so. It is pure: the
// same runs give the same verdict.
func Compare(runs []LayoutRun) Verdict {
	v := Verdict{Best: map[string]int{}}
	top := 0.0
	for _, r := range runs {
		best := bestPoint(r.Points)
		v.Best[r.Name] = best
		if best >= 0 {
			top = math.Max(top, r.Points[best].score())
		}
	}
	win := -1
	var tied []int // the layouts whose peak is within closeShare of top
	for i, r := range runs {
		j := v.Best[r.Name]
		if j < 0 || top == 0 || r.Points[j].score() < (1-closeShare)*top {
			continue
		}
		tied = append(tied, i)
		if win < 0 || ahead(r, j, runs[win], v.Best[runs[win].Name]) {
			win = i
		}
	}
	slo := ""
	for _, r := range runs {
		for _, p := range r.Points {
			if p.Goodput != nil {
				slo = p.Goodput.SLO
			}
		}
	}
	if win < 0 {
		var why []string
		for _, r := range runs {
			why = append(why, r.Name+": "+shortfall(r, v.Best[r.Name]))
		}
		if slo != "" {
			v.Reason = "no layout served a request within " + slo + " at any load: " + strings.Join(why, "; ")
		} else {
			v.Reason = "no layout completed a request: " + strings.Join(why, "; ")
		}
		return v
	}
	w := runs[win]
	wp := w.Points[v.Best[w.Name]]
	v.Winner = w.Name
	var b strings.Builder
	if wp.Goodput != nil {
		fmt.Fprintf(&b, "%s (%s): %s req/s met %s at %s (%.0f%% of requests)", w.Name, w.Shape, num(wp.Goodput.Goodput), wp.Goodput.SLO, wp.Load(), 100*wp.Goodput.Attainment)
	} else {
		fmt.Fprintf(&b, "%s (%s): %s req/s completed at %s (no SLO given: ranked by throughput; pass --goodput)", w.Name, w.Shape, num(wp.Throughput), wp.Load())
	}
	if len(tied) > 1 {
		var others, sums []string
		for _, i := range tied {
			r := runs[i]
			sums = append(sums, fmt.Sprintf("%s %s", r.Name, num(sweepScore(r.Points))))
			if i != win {
				others = append(others, fmt.Sprintf("%s's %s", r.Name, num(r.Points[v.Best[r.Name]].score())))
			}
		}
		fmt.Fprintf(&b, ", within %.0f%% of %s: a tie at this run's size, ranked by the sweep's total (%s req/s summed over %s)",
			100*closeShare, strings.Join(others, " and "), strings.Join(sums, ", "), plural(len(w.Points), "rate"))
	}
	at := v.Best[w.Name]
	for i, r := range runs {
		if i == win {
			continue
		}
		j := at
		if j >= len(r.Points) {
			j = v.Best[r.Name]
		}
		b.WriteString("; ")
		b.WriteString(r.Name + " (" + r.Shape.String() + "): ")
		if j < 0 {
			b.WriteString("no result")
			continue
		}
		b.WriteString(standing(r.Shape, r.Points[j]))
	}
	v.Reason = b.String()
	return v
}

// closeShare: peaks within this share of the highest are a tie.
const closeShare = 0.05

// ahead: layout a (best point ai) ranks before b (best point bi) among
// tied peaks.
func ahead(a LayoutRun, ai int, b LayoutRun, bi int) bool {
	if sa, sb := sweepScore(a.Points), sweepScore(b.Points); sa != sb {
		return sa > sb
	}
	pa, pb := a.Points[ai], b.Points[bi]
	if pa.Goodput != nil && pb.Goodput != nil && pa.Goodput.Attainment != pb.Goodput.Attainment {
		return pa.Goodput.Attainment > pb.Goodput.Attainment
	}
	return pa.Failed < pb.Failed
}

// sweepScore is a layout's goodput (or throughput) summed over its points.
func sweepScore(ps []Point) float64 {
	sum := 0.0
	for _, p := range ps {
		sum += p.score()
	}
	return sum
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// bestPoint is the index of ps's highest score, the first of equals (-1:
// no points).
func bestPoint(ps []Point) int {
	best := -1
	for i, p := range ps {
		if best < 0 || better(p, ps[best]) {
			best = i
		}
	}
	return best
}

// better: a beats b (higher score; then higher attainment; then fewer
// failures).
func better(a, b Point) bool {
	if a.score() != b.score() {
		return a.score() > b.score()
	}
	if a.Goodput != nil && b.Goodput != nil && a.Goodput.Attainment != b.Goodput.Attainment {
		return a.Goodput.Attainment > b.Goodput.Attainment
	}
	return a.Failed < b.Failed
}

// standing is a losing layout's figure at one point and what it broke.
func standing(s Shape, p Point) string {
	if p.Goodput == nil {
		out := num(p.Throughput) + " req/s completed at " + p.Load()
		if p.Failed > 0 {
			out += fmt.Sprintf(", %d failed", p.Failed)
		}
		return out
	}
	g := p.Goodput
	out := fmt.Sprintf("%s req/s at %s", num(g.Goodput), p.Load())
	name, share := g.Worst()
	switch {
	case name != "":
		out += fmt.Sprintf(", broke %s on %.0f%%", name, 100*share)
		if cause := Cause(s, name); cause != "" {
			out += " (" + cause + ")"
		}
	case g.FailedShare == 0:
		out += ", met every objective"
	}
	if g.FailedShare > 0 {
		out += fmt.Sprintf(", %.0f%% failed", 100*g.FailedShare)
	}
	return out
}

// shortfall is why a layout has no goodput.
func shortfall(r LayoutRun, best int) string {
	if best < 0 {
		return "no result"
	}
	return standing(r.Shape, r.Points[best])
}

// Cause is the usual reason a layout of shape s breaks objective slo, as
// the disaggregation literature (DistServe §2) describes it; "" when
// there is no usual one. It names a cause, not a measurement: the
// report's figures are what was measured.
func Cause(s Shape, slo string) string {
	switch {
	case slo == SLOTPOT && s.Aggregated > 0 && s.Prefill == 0:
		return "prefill interference: long prompts' prefill chunks share steps with the running streams"
	case slo == SLOTTFT && s.Prefill > 0:
		return fmt.Sprintf("prefill queueing: %s every prompt sent to prefill", verb(s.Prefill, "prefill engine", "take"))
	case slo == SLOTPOT && s.Aggregated > 0:
		return "prefill interference on the aggregated engines: long prompts reach them when every prefill counts busy, gateway.conditional.prefill_busy"
	case slo == SLOTPOT && s.Decode > 0:
		return fmt.Sprintf("decode batches: %s every stream", verb(s.Decode, "decode engine", "carry"))
	}
	return ""
}

// verb is "1 prefill engine takes" or "2 prefill engines take".
func verb(n int, what, v string) string {
	if n == 1 {
		if strings.HasSuffix(v, "y") {
			return "1 " + what + " " + strings.TrimSuffix(v, "y") + "ies"
		}
		return "1 " + what + " " + v + "s"
	}
	return fmt.Sprintf("%d %ss %s", n, what, v)
}

// num prints a rate with two significant decimals at most.
func num(x float64) string {
	return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
}

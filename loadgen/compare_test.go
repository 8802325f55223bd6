package loadgen

import (
	"math"
	"strings"
	"testing"
)

func pt(rate, goodput, attain float64, broke map[string]float64) Point {
	return Point{Rate: rate, Throughput: rate, Completed: 100, Goodput: &Goodput{SLO: "ttft<=1000ms tpot<=50ms", Goodput: goodput, Attainment: attain, Broke: broke}}
}

// Compare names the layout with the highest goodput at its best point
// and says why, in words: the winner's figure and objectives, and each
// other layout's figure at the winner's load with the objective it broke
// most and that shape's usual cause.
func TestCompare(t *testing.T) {
	agg := Shape{Aggregated: 4}
	pd13 := Shape{Prefill: 1, Decode: 3}
	mixed := Shape{Aggregated: 2, Prefill: 1, Decode: 1}
	for _, c := range []struct {
		name       string
		runs       []LayoutRun
		winner     string
		reasonHas  []string
		reasonLack []string
	}{
		{
			name: "conditional wins, aggregated broke tpot, PD broke ttft",
			runs: []LayoutRun{
				{"agg-4", agg, []Point{pt(2, 1.9, 0.95, nil), pt(4, 1.8, 0.45, map[string]float64{"tpot": 0.41, "ttft": 0.2})}},
				{"pd-1p3d", pd13, []Point{pt(2, 1.7, 0.85, map[string]float64{"ttft": 0.15}), pt(4, 2.5, 0.62, map[string]float64{"ttft": 0.38})}},
				{"mixed-conditional", mixed, []Point{pt(2, 2, 1, nil), pt(4, 3.1, 0.78, map[string]float64{"ttft": 0.22})}},
			},
			winner:     "mixed-conditional",
			reasonLack: []string{"within 5%"},
			reasonHas: []string{
				"mixed-conditional (2A+1P+1D): 3.1 req/s met ttft<=1000ms tpot<=50ms at 4 req/s (78% of requests)",
				"agg-4 (aggregated ×4): 1.8 req/s at 4 req/s, broke tpot on 41% (prefill interference",
				"pd-1p3d (1P+3D): 2.5 req/s at 4 req/s, broke ttft on 38% (prefill queueing: 1 prefill engine takes every prompt",
			},
		},
		{
			name: "the best point may be a lower rate",
			runs: []LayoutRun{
				{"agg-4", agg, []Point{pt(2, 2, 1, nil), pt(8, 0.5, 0.06, map[string]float64{"tpot": 0.9})}},
				{"pd-2p2d", Shape{Prefill: 2, Decode: 2}, []Point{pt(2, 1.5, 0.75, map[string]float64{"tpot": 0.25}), pt(8, 1.2, 0.15, map[string]float64{"tpot": 0.85})}},
			},
			winner:    "agg-4",
			reasonHas: []string{"agg-4 (aggregated ×4): 2 req/s met", "at 2 req/s", "pd-2p2d (2P+2D): 1.5 req/s at 2 req/s, broke tpot on 25% (decode batches: 2 decode engines carry every stream)"},
		},
		{
			name: "a peak within noise is ranked by the whole sweep",
			runs: []LayoutRun{
				{"mixed-conditional", mixed, []Point{pt(24, 19.92, 0.95, nil), pt(40, 7.17, 0.24, map[string]float64{"tpot": 0.7})}},
				{"pd-2p2d", Shape{Prefill: 2, Decode: 2}, []Point{pt(24, 19.79, 0.95, nil), pt(40, 17.82, 0.62, map[string]float64{"tpot": 0.38})}},
				{"agg-4", agg, []Point{pt(24, 15.07, 0.74, map[string]float64{"tpot": 0.26}), pt(40, 4.32, 0.15, map[string]float64{"tpot": 0.85})}},
			},
			winner: "pd-2p2d",
			reasonHas: []string{
				"pd-2p2d (2P+2D): 19.79 req/s met ttft<=1000ms tpot<=50ms at 24 req/s (95% of requests), within 5% of mixed-conditional's 19.92: " +
					"a tie at this run's size, ranked by the sweep's total (mixed-conditional 27.09, pd-2p2d 37.61 req/s summed over 2 rates)",
				"agg-4 (aggregated ×4): 15.07 req/s at 24 req/s, broke tpot on 26% (prefill interference",
			},
			reasonLack: []string{"agg-4 15.07"},
		},
		{
			name: "a tie goes to the higher attainment",
			runs: []LayoutRun{
				{"a", agg, []Point{pt(4, 3, 0.75, map[string]float64{"tpot": 0.25})}},
				{"b", pd13, []Point{pt(4, 3, 0.9, map[string]float64{"ttft": 0.1})}},
			},
			winner:    "b",
			reasonHas: []string{"within 5% of a's 3: a tie"},
		},
		{
			name: "a full tie goes to the first listed",
			runs: []LayoutRun{
				{"a", agg, []Point{pt(4, 3, 1, nil)}},
				{"b", pd13, []Point{pt(4, 3, 1, nil)}},
			},
			winner:    "a",
			reasonHas: []string{"b (1P+3D): 3 req/s at 4 req/s, met every objective", "within 5% of b's 3: a tie at this run's size"},
		},
		{
			name: "nobody met the SLO",
			runs: []LayoutRun{
				{"agg-4", agg, []Point{pt(8, 0, 0, map[string]float64{"tpot": 1})}},
				{"pd-1p3d", pd13, []Point{pt(8, 0, 0, map[string]float64{"ttft": 0.97})}},
			},
			winner:    "",
			reasonHas: []string{"no layout served a request within ttft<=1000ms tpot<=50ms at any load", "agg-4: 0 req/s at 8 req/s, broke tpot on 100%", "pd-1p3d: 0 req/s at 8 req/s, broke ttft on 97%"},
		},
		{
			name: "no SLO: throughput ranks, and the reason says so",
			runs: []LayoutRun{
				{"a", agg, []Point{{Rate: math.Inf(1), Concurrency: 8, Throughput: 5, Completed: 50}}},
				{"b", pd13, []Point{{Rate: math.Inf(1), Concurrency: 8, Throughput: 6, Completed: 50}}},
			},
			winner:    "b",
			reasonHas: []string{"b (1P+3D): 6 req/s completed at C=8 (no SLO given: ranked by throughput; pass --goodput)", "a (aggregated ×4): 5 req/s completed at C=8"},
		},
		{
			name: "failures are said",
			runs: []LayoutRun{
				{"a", agg, []Point{{Rate: 2, Throughput: 2, Completed: 20, Goodput: &Goodput{SLO: "ttft<=1s", Goodput: 2, Attainment: 1}}}},
				{"b", pd13, []Point{{Rate: 2, Throughput: 1, Completed: 10, Failed: 10, Goodput: &Goodput{SLO: "ttft<=1s", Goodput: 1, Attainment: 0.5, FailedShare: 0.5}}}},
			},
			winner:    "a",
			reasonHas: []string{"b (1P+3D): 1 req/s at 2 req/s, 50% failed"},
		},
		{
			name:      "a layout with no result",
			runs:      []LayoutRun{{"a", agg, []Point{pt(2, 1, 1, nil)}}, {"b", pd13, nil}},
			winner:    "a",
			reasonHas: []string{"b (1P+3D): no result"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Compare(c.runs)
			if v.Winner != c.winner {
				t.Errorf("winner %q, want %q (reason: %s)", v.Winner, c.winner, v.Reason)
			}
			for _, s := range c.reasonHas {
				if !strings.Contains(v.Reason, s) {
					t.Errorf("reason lacks %q:\n%s", s, v.Reason)
				}
			}
			for _, s := range c.reasonLack {
				if strings.Contains(v.Reason, s) {
					t.Errorf("reason has %q:\n%s", s, v.Reason)
				}
			}
			if again := Compare(c.runs); again.Reason != v.Reason || again.Winner != v.Winner {
				t.Errorf("not pure: %q then %q", v.Reason, again.Reason)
			}
		})
	}
}

// Shapes read as layouts are named.
func TestShapeString(t *testing.T) {
	for _, c := range []struct {
		s    Shape
		want string
	}{
		{Shape{Aggregated: 4}, "aggregated ×4"},
		{Shape{Prefill: 1, Decode: 3}, "1P+3D"},
		{Shape{Encode: 1, Prefill: 1, Decode: 2}, "1E+1P+2D"},
		{Shape{Aggregated: 2, Prefill: 1, Decode: 1}, "2A+1P+1D"},
		{Shape{}, "no engines"},
	} {
		if got := c.s.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.s, got, c.want)
		}
	}
}

// Cause names the usual reason only where there is one.
func TestCause(t *testing.T) {
	for _, c := range []struct {
		s    Shape
		slo  string
		want string
	}{
		{Shape{Aggregated: 4}, SLOTPOT, "prefill interference"},
		{Shape{Aggregated: 4}, SLOTTFT, ""},
		{Shape{Prefill: 2, Decode: 2}, SLOTTFT, "prefill queueing: 2 prefill engines"},
		{Shape{Prefill: 1, Decode: 3}, SLOTPOT, "decode batches: 3 decode engines"},
		{Shape{Aggregated: 2, Prefill: 1, Decode: 1}, SLOTPOT, "prefill interference on the aggregated engines: long prompts reach them when every prefill counts busy"},
		{Shape{Aggregated: 2, Prefill: 1, Decode: 1}, SLOTTFT, "prefill queueing: 1 prefill engine"},
		{Shape{Prefill: 1, Decode: 1}, SLOE2EL, ""},
	} {
		if got := Cause(c.s, c.slo); !strings.HasPrefix(got, c.want) || (c.want == "" && got != "") {
			t.Errorf("Cause(%v, %s) = %q, want prefix %q", c.s, c.slo, got, c.want)
		}
	}
}

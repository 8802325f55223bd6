package loadgen

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SLO is a per-request service level objective in the vocabulary of
// vLLM's benchmark (`--goodput ttft:MS tpot:MS e2el:MS`): a request is
// good when it completed and met every objective given. A zero field is
// not part of the objective.
type SLO struct {
	TTFT time.Duration // time to the first output token
	TPOT time.Duration // (latency − TTFT) / (output tokens − 1); 0 for one token
	E2EL time.Duration // end-to-end latency
}

// The objectives' names, in the order they are printed.
const (
	SLOTTFT = "ttft"
	SLOTPOT = "tpot"
	SLOE2EL = "e2el"
)

// ParseSLO reads vLLM's goodput pairs ("ttft:1000", "tpot:50",
// "e2el:20000", milliseconds); a pair may also hold several separated by
// commas or spaces. Names are vLLM's three; values are non-negative. No
// pairs is no objective.
func ParseSLO(pairs []string) (SLO, error) {
	var s SLO
	seen := map[string]bool{}
	for _, arg := range pairs {
		for _, pair := range strings.FieldsFunc(arg, func(r rune) bool { return r == ',' || r == ' ' }) {
			name, val, ok := strings.Cut(pair, ":")
			if !ok {
				return SLO{}, fmt.Errorf("--goodput %q: want NAME:MS (ttft:1000 tpot:50 e2el:20000)", pair)
			}
			name = strings.ToLower(strings.TrimSpace(name))
			ms, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil || ms < 0 || math.IsNaN(ms) || math.IsInf(ms, 0) {
				return SLO{}, fmt.Errorf("--goodput %q: the objective is milliseconds, 0 or more", pair)
			}
			if seen[name] {
				return SLO{}, fmt.Errorf("--goodput %q: %s given twice", pair, name)
			}
			seen[name] = true
			d := time.Duration(ms * float64(time.Millisecond))
			switch name {
			case SLOTTFT:
				s.TTFT = d
			case SLOTPOT:
				s.TPOT = d
			case SLOE2EL:
				s.E2EL = d
			default:
				return SLO{}, fmt.Errorf("--goodput %q: %q is not an objective (ttft, tpot or e2el)", pair, name)
			}
			if d == 0 {
				// vLLM accepts 0; a request can never meet it, which is
				// worth saying rather than silently dropping the objective.
				return SLO{}, fmt.Errorf("--goodput %q: an objective of 0 ms can never be met", pair)
			}
		}
	}
	return s, nil
}

// IsZero reports whether s holds no objective.
func (s SLO) IsZero() bool { return s == SLO{} }

// String is s as the report prints it: "ttft<=1000ms tpot<=50ms".
func (s SLO) String() string {
	var parts []string
	for _, o := range s.objectives() {
		parts = append(parts, o.name+"<="+fmtMS(o.limit))
	}
	return strings.Join(parts, " ")
}

// Pairs is s in the --goodput vocabulary ("ttft:1000 tpot:50").
func (s SLO) Pairs() string {
	var parts []string
	for _, o := range s.objectives() {
		parts = append(parts, o.name+":"+strconv.FormatFloat(ms(o.limit), 'f', -1, 64))
	}
	return strings.Join(parts, " ")
}

type objective struct {
	name  string
	limit time.Duration
}

func (s SLO) objectives() []objective {
	var out []objective
	for _, o := range []objective{{SLOTTFT, s.TTFT}, {SLOTPOT, s.TPOT}, {SLOE2EL, s.E2EL}} {
		if o.limit > 0 {
			out = append(out, o)
		}
	}
	return out
}

func fmtMS(d time.Duration) string {
	return strconv.FormatFloat(ms(d), 'f', -1, 64) + "ms"
}

// TPOT is r's time per output token as vLLM's goodput judges it: the
// time after the first token over the tokens after it, 0 for a request
// of one token.
func (r Result) TPOT() time.Duration {
	if r.OutputTokens <= 1 {
		return 0
	}
	return (r.Latency - r.TTFT) / time.Duration(r.OutputTokens-1)
}

// Check is which of s's objectives the completed request r broke, by
// name in print order; empty: r is good. Only completed requests are
// judged (a failed one is never good; Judge counts it apart).
func (s SLO) Check(r Result) []string {
	var broke []string
	for _, o := range s.objectives() {
		var v time.Duration
		switch o.name {
		case SLOTTFT:
			v = r.TTFT
		case SLOTPOT:
			v = r.TPOT()
		case SLOE2EL:
			v = r.Latency
		}
		if v > o.limit {
			broke = append(broke, o.name)
		}
	}
	return broke
}

// Goodput is how a run's requests fared against an SLO. Goodput is
// DistServe's and vLLM's: completed requests per second that met every
// objective. Attainment is the share of the requests judged (completed
// and failed; never-sent ones are not judged) that met every objective;
// Broke gives, per objective, the share of judged requests that broke it
// (a request may break several), and FailedShare the share that failed.
type Goodput struct {
	SLO         string             `json:"slo"` // "ttft<=1000ms tpot<=50ms"
	Goodput     float64            `json:"request_goodput"`
	Good        int                `json:"good_requests"`
	Judged      int                `json:"judged_requests"`
	Attainment  float64            `json:"slo_attainment"`
	Broke       map[string]float64 `json:"slo_broken,omitempty"`
	FailedShare float64            `json:"failed_share"`
	// ByClass is the same per request class (a mixed dataset's "chat" and
	// "rag"), for the classes the run had.
	ByClass map[string]ClassGoodput `json:"by_class,omitempty"`
}

// ClassGoodput is one request class's share of a Goodput.
type ClassGoodput struct {
	Judged     int                `json:"judged_requests"`
	Good       int                `json:"good_requests"`
	Attainment float64            `json:"slo_attainment"`
	Broke      map[string]float64 `json:"slo_broken,omitempty"`
}

// Judge computes the goodput of results rs over a run of dur against s.
// It is pure: the same results give the same figures.
func Judge(rs []Result, dur time.Duration, s SLO) Goodput {
	g := Goodput{SLO: s.String()}
	broke := map[string]int{}
	failed := 0
	type acc struct {
		judged, good int
		broke        map[string]int
	}
	classes := map[string]*acc{}
	for _, r := range rs {
		if r.NotSent || r.Cancelled {
			continue
		}
		g.Judged++
		var c *acc
		if r.Class != "" {
			if c = classes[r.Class]; c == nil {
				c = &acc{broke: map[string]int{}}
				classes[r.Class] = c
			}
			c.judged++
		}
		if !r.OK {
			failed++
			continue
		}
		b := s.Check(r)
		for _, name := range b {
			broke[name]++
			if c != nil {
				c.broke[name]++
			}
		}
		if len(b) == 0 {
			g.Good++
			if c != nil {
				c.good++
			}
		}
	}
	if sec := dur.Seconds(); sec > 0 {
		g.Goodput = float64(g.Good) / sec
	}
	share := func(n, of int) float64 {
		if of == 0 {
			return 0
		}
		return float64(n) / float64(of)
	}
	g.Attainment = share(g.Good, g.Judged)
	g.FailedShare = share(failed, g.Judged)
	shares := func(m map[string]int, of int) map[string]float64 {
		if len(m) == 0 {
			return nil
		}
		out := make(map[string]float64, len(m))
		for k, n := range m {
			out[k] = share(n, of)
		}
		return out
	}
	g.Broke = shares(broke, g.Judged)
	if len(classes) > 0 {
		g.ByClass = map[string]ClassGoodput{}
		for name, c := range classes {
			g.ByClass[name] = ClassGoodput{Judged: c.judged, Good: c.good, Attainment: share(c.good, c.judged), Broke: shares(c.broke, c.judged)}
		}
	}
	return g
}

// Worst is the objective broken by the largest share of g's requests
// ("" when none was broken), ties going to print order.
func (g Goodput) Worst() (string, float64) {
	name, worst := "", 0.0
	for _, o := range []string{SLOTTFT, SLOTPOT, SLOE2EL} {
		if v := g.Broke[o]; v > worst {
			name, worst = o, v
		}
	}
	return name, worst
}

// classNames are g's classes, sorted.
func (g Goodput) classNames() []string {
	var out []string
	for k := range g.ByClass {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

package planner

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
)

// The trace replay: a recorded day (testdata/*.trace, phases of load)
// replayed in simulated time, an interval at a time, against a small
// queueing model of the engines, with Decide closing the loop as the
// supervisor's planner does (observe, decide, carry the move out). A day
// of 30-second intervals takes milliseconds.
//
// The engine model, stated:
//   - prefill: each replica prefills one prompt at a time at prefillTokS
//     uncached tokens per second; a request goes to the replica free
//     first (FIFO); its TTFT is its wait, its prefill, the KV transfer
//     and the decode's first step.
//   - decode: a step of b plus k per stream the replica holds; with
//     λ requests/s of O output tokens over n replicas the streams settle
//     where ITL = b / (1 − λ·O·k / n) (Little's law), capped at 20·b when
//     the decodes cannot keep up; ITL p90 is 1.15 × that.
//   - a move takes effect as tsd scale carries it out: the donor's replica
//     leaves routing at once (drained), the receiver's serves one
//     interval later (started, ready); no second move starts meanwhile.

const (
	prefillTokS = 25000.0
	decodeBase  = 0.012  // s
	decodeK     = 0.0004 // s per stream per replica
	transfer    = 0.002  // s
)

type phase struct {
	minute               float64
	name                 string
	rate, prompt, output float64
	cached               float64
	start, end           int // intervals [start, end)
}

func readTrace(t *testing.T, path string) []phase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []phase
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fs := strings.Fields(text)
		if len(fs) != 6 {
			t.Fatalf("%s:%d: want 6 fields, got %d", path, line, len(fs))
		}
		var nums [5]float64
		for i, j := range []int{0, 2, 3, 4, 5} {
			if nums[i], err = strconv.ParseFloat(fs[j], 64); err != nil {
				t.Fatalf("%s:%d: %v", path, line, err)
			}
		}
		out = append(out, phase{minute: nums[0], name: fs[1], rate: nums[1], prompt: nums[2], output: nums[3], cached: nums[4]})
	}
	return out
}

// sim is the engines and the load, one interval at a time.
type sim struct {
	rng     *rand.Rand
	clock   float64   // seconds since midnight
	free    []float64 // when each prefill replica is next free
	decodes int
}

type interval struct {
	ttft, itl     time.Duration
	prefill, dec  int
	code          string
	moveStarted   bool
	reason        string
	requests      int
	queuedTokens  int
	phase         string
	ttftOK, itlOK bool
}

// step runs one interval of ph's load and returns the observation.
func (s *sim) step(ph phase, span float64) Observation {
	end := s.clock + span
	lambda, o := ph.rate, ph.output
	load := lambda * o * decodeK / float64(s.decodes)
	itl := decodeBase / max(1-load, 0.05)
	var ttfts []float64
	var prompt, prefilled float64
	for at := s.clock + s.rng.ExpFloat64()/lambda; at < end; at += s.rng.ExpFloat64() / lambda {
		p := ph.prompt * (0.7 + 0.6*s.rng.Float64())
		prompt += p
		i := slices.Index(s.free, slices.Min(s.free))
		start := max(at, s.free[i])
		done := start + p*(1-ph.cached)/prefillTokS
		s.free[i] = done
		prefilled += p * (1 - ph.cached) // (done within the span, or soon: the fluid reading)
		ttfts = append(ttfts, done-at+transfer+itl)
	}
	var queued float64
	for _, f := range s.free {
		queued += max(0, f-end) * prefillTokS
	}
	s.clock = end
	p90 := time.Duration(p90of(ttfts) * float64(time.Second))
	itl90 := time.Duration(1.15 * itl * float64(time.Second))
	n := len(ttfts)
	streams := lambda * o * itl
	return Observation{Span: time.Duration(span * float64(time.Second)), Groups: []GroupObs{
		{Group: "prefill", TTFT: p90, TTFTN: n, Requests: n, Prompt: int(prompt), Cached: ph.cached, InFlight: lambda * p90.Seconds(), Queued: int(queued),
			Prefilled: int(min(prefilled, prefillTokS*span*float64(len(s.free))))},
		{Group: "decode", TTFT: p90, TTFTN: n, ITL: itl90, ITLN: int(float64(n) * o), Requests: n, Prompt: int(prompt), Cached: ph.cached,
			InFlight: streams, OutputToks: int(float64(n) * o)},
	}}
}

func p90of(v []float64) float64 {
	slices.Sort(v)
	return percentile.NearestRank(v, 90)
}

// layoutOf is the Layout of p prefills and d decodes on GPUs 0..3 as tsd
// scale leaves them: prefill replicas on the lowest GPUs they were given,
// decodes on the rest.
func layoutOf(prefillSets, decodeSets [][]string) Layout {
	names := func(entry string, n int) []string {
		if n == 1 {
			return []string{entry}
		}
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", entry, i)
		}
		return out
	}
	return Layout{Groups: []Group{
		{Name: "prefill", Kind: KindPrefill, Instances: names("prefill", len(prefillSets)), Sets: prefillSets, Min: 1},
		{Name: "decode", Kind: KindDecode, Instances: names("decode", len(decodeSets)), Sets: decodeSets, Min: 1},
	}}
}

// replay runs a trace through the loop and returns every interval.
func replay(t *testing.T, path string, c Config) ([]interval, []phase) {
	t.Helper()
	phases := readTrace(t, path)
	span := c.Interval.Seconds()
	total := int(24 * 3600 / span)
	for i := range phases {
		phases[i].start = int(phases[i].minute * 60 / span)
		phases[i].end = total
		if i > 0 {
			phases[i-1].end = phases[i].start
		}
	}
	s := &sim{rng: rand.New(rand.NewPCG(1, 2)), free: []float64{0}, decodes: 3}
	prefillSets, decodeSets := [][]string{{"0"}}, [][]string{{"1"}, {"2"}, {"3"}}
	var h History
	var pending *Move // a move under way: the receiver's replica serves next interval
	out := make([]interval, 0, total)
	midnight := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	pi := 0
	for i := 0; i < total; i++ {
		for pi+1 < len(phases) && i >= phases[pi+1].start {
			pi++
		}
		ph := phases[pi]
		if pending != nil { // the receiver's new replica is ready
			if pending.To == "prefill" {
				prefillSets = append(prefillSets, pending.GPUs)
				s.free = append(s.free, s.clock)
			} else {
				decodeSets = append(decodeSets, pending.GPUs)
				s.decodes++
			}
			pending = nil
		}
		o := s.step(ph, span)
		now := midnight.Add(time.Duration(s.clock * float64(time.Second)))
		d := Decide(h, o, layoutOf(prefillSets, decodeSets), c, now)
		h = d.History
		iv := interval{ttft: o.Groups[0].TTFT, itl: o.Groups[1].ITL, prefill: len(prefillSets), dec: len(decodeSets),
			code: d.Code, reason: d.Reason, requests: o.Groups[0].Requests, queuedTokens: o.Groups[0].Queued, phase: ph.name}
		iv.ttftOK, iv.itlOK = iv.ttft <= c.TTFT, iv.itl <= c.ITL
		if m := d.Move; m != nil {
			iv.moveStarted = true
			pending = m
			if m.From == "prefill" { // drained and stopped: it leaves at once
				prefillSets = prefillSets[:len(prefillSets)-1]
				s.free = s.free[:len(s.free)-1]
			} else if m.From == "decode" {
				decodeSets = decodeSets[:len(decodeSets)-1]
				s.decodes--
			}
		}
		out = append(out, iv)
	}
	return out, phases
}

func replayConfig() Config {
	return Config{TTFT: time.Second, ITL: 50 * time.Millisecond, Interval: 30 * time.Second, Window: 90 * time.Second,
		Cooldown: 2 * time.Minute, Breach: 2, Headroom: 0.7, GPUs: []string{"0", "1", "2", "3"}}
}

func timeline(ivs []interval, from, to int) string {
	var b strings.Builder
	for i := max(from, 0); i < min(to, len(ivs)); i++ {
		v := ivs[i]
		mark := " "
		if v.moveStarted {
			mark = "*"
		}
		fmt.Fprintf(&b, "%s %4d %-6s %dP+%dD ttft %-8s itl %-7s req %4d queued %7d %-9s %s\n", mark, i, v.phase, v.prefill, v.dec,
			v.ttft.Round(time.Millisecond), v.itl.Round(time.Millisecond), v.requests, v.queuedTokens, v.code, v.reason)
	}
	return b.String()
}

// Pins, on a recorded day (night, chat, RAG, chat, night) replayed in
// simulated time: at each shift that breaks the layout the planner starts
// a move within 3 intervals, both targets are met again within 5, and
// within a phase, once met, nothing moves (no flapping); the night moves
// nothing at all.
func TestReplayDay(t *testing.T) {
	c := replayConfig()
	ivs, phases := replay(t, "testdata/day.trace", c)
	moves := 0
	for pi, ph := range phases {
		first := -1
		for i := ph.start; i < ph.end; i++ {
			if ivs[i].moveStarted {
				moves++
				if first < 0 {
					first = i
				}
			}
		}
		broken := !ivs[ph.start].ttftOK || !ivs[ph.start].itlOK || (ph.start+1 < ph.end && (!ivs[ph.start+1].ttftOK || !ivs[ph.start+1].itlOK))
		ctx := func() string { return timeline(ivs, ph.start-2, ph.start+14) }
		if broken && pi > 0 {
			if first < 0 || first > ph.start+2 {
				t.Errorf("%s at interval %d breaks the layout, the first move starts at %d (want within 3 intervals):\n%s", ph.name, ph.start, first, ctx())
			}
			met := ph.start + 5
			for i := met; i < ph.end; i++ {
				if !ivs[i].ttftOK || !ivs[i].itlOK {
					t.Errorf("%s: interval %d (%d after the shift) misses a target (ttft %s, itl %s):\n%s", ph.name, i, i-ph.start,
						ivs[i].ttft.Round(time.Millisecond), ivs[i].itl.Round(time.Millisecond), ctx())
					break
				}
			}
		}
		steady := ph.start + 8
		for i := steady; i < ph.end; i++ {
			if ivs[i].moveStarted {
				t.Errorf("%s: a move at interval %d, %d intervals into the phase (no flapping in a steady phase):\n%s", ph.name, i, i-ph.start, timeline(ivs, i-6, i+3))
			}
		}
		if ph.name == "night" && first >= 0 {
			t.Errorf("the night's light load moved a replica at %d:\n%s", first, ctx())
		}
	}
	if moves > 6 {
		t.Errorf("%d moves in a day of four phases", moves)
	}
	if t.Failed() || testing.Verbose() {
		for _, ph := range phases[1:] {
			t.Logf("around %s:\n%s", ph.name, timeline(ivs, ph.start-1, ph.start+8))
		}
	}
}

// Pins: a burst of one interval at three times the rate breaches the
// decode's ITL once; with slo.breach 2 nothing moves, that interval or
// after it (the predictor's memory of the burst cannot make a breach).
func TestReplaySpike(t *testing.T) {
	ivs, phases := replay(t, "testdata/spike.trace", replayConfig())
	burst := phases[1].start
	if ivs[burst].itlOK {
		t.Fatalf("the burst did not breach ITL, so this test tests nothing:\n%s", timeline(ivs, burst-2, burst+4))
	}
	for i, v := range ivs {
		if v.moveStarted {
			t.Errorf("a move at interval %d:\n%s", i, timeline(ivs, burst-2, i+3))
			break
		}
	}
}

// Pins: the replay itself is deterministic (one seed), so a failure
// reproduces.
func TestReplayDeterministic(t *testing.T) {
	a, _ := replay(t, "testdata/day.trace", replayConfig())
	b, _ := replay(t, "testdata/day.trace", replayConfig())
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("interval %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
	if math.IsNaN(a[len(a)-1].ttft.Seconds()) {
		t.Fatal("NaN")
	}
}

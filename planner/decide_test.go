package planner

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func baseConfig() Config {
	return Config{TTFT: 500 * time.Millisecond, ITL: 50 * time.Millisecond, Interval: 30 * time.Second, Window: 90 * time.Second,
		Cooldown: 2 * time.Minute, Breach: 2, Headroom: 0.7, GPUs: []string{"0", "1", "2", "3"}}
}

// pd13 is one prefill on GPU 0 and three decodes on GPUs 1-3.
func pd13() Layout {
	return Layout{Groups: []Group{
		{Name: "prefill", Kind: KindPrefill, Instances: []string{"prefill"}, Sets: [][]string{{"0"}}, Min: 1},
		{Name: "decode", Kind: KindDecode, Instances: []string{"decode-0", "decode-1", "decode-2"}, Sets: [][]string{{"1"}, {"2"}, {"3"}}, Min: 1},
	}}
}

// obs builds an interval: TTFT p90 of the prefill, ITL p90 of the
// decode, 100 samples each, a steady load.
func obs(ttft, itl time.Duration) Observation {
	return Observation{Span: 30 * time.Second, Groups: []GroupObs{
		{Group: "prefill", TTFT: ttft, TTFTN: 100, Requests: 100, Prompt: 100 * 300, InFlight: 4},
		{Group: "decode", TTFT: ttft, TTFTN: 100, ITL: itl, ITLN: 5000, Requests: 100, Prompt: 100 * 300, InFlight: 20},
	}}
}

// streaks is a History in which the named entries have been over target
// for n intervals, with the layout's replica counts, and load levels
// equal to obs's (so the predictor adds nothing).
func streaks(l Layout, n map[string]int) History {
	h := History{Groups: map[string]GroupHistory{}}
	for _, g := range l.Groups {
		h.Groups[g.Name] = GroupHistory{Replicas: g.Replicas(), Streak: n[g.Name],
			TTFTLoad: Holt{Level: 1000, Seen: 3}, ITLLoad: Holt{Level: map[string]float64{"prefill": 4, "decode": 20}[g.Name], Seen: 3}}
	}
	return h
}

// Pins: every row of the decision — hold, breach for fewer than Breach
// intervals, a move with its reason and numbers, an add on a free GPU,
// and each reason a move is refused — one row per case.
func TestDecide(t *testing.T) {
	type row struct {
		name   string
		h      func(Layout) History
		o      Observation
		l      func() Layout
		c      func(Config) Config
		now    time.Time
		code   string
		move   *Move
		reason string // a substring of the reason (the whole reason when it starts with "=")
	}
	ms := time.Millisecond
	rows := []row{
		{name: "within targets", o: obs(320*ms, 18*ms), code: CodeHold,
			reason: "=within targets: prefill TTFT p90 320 ms, 64% of 500 ms; decode ITL p90 18 ms, 36% of 50 ms"},
		{name: "over target for one interval of two", o: obs(820*ms, 18*ms), code: CodeHold,
			reason: "=over target, not yet for long enough: prefill TTFT p90 820 ms, 164% of 500 ms (1 of 2 intervals); decode ITL p90 18 ms, 36% of 50 ms"},
		{name: "over target for two intervals: a decode GPU moves to prefill",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2}) }, o: obs(820*ms, 18*ms), code: CodeMove,
			move:   &Move{To: "prefill", From: "decode", FromInstance: "decode-2", ToInstance: "prefill-1", GPUs: []string{"3"}, Replicas: map[string]int{"prefill": 2, "decode": 2}},
			reason: "=prefill TTFT p90 820 ms > 500 ms for 3 intervals; decode ITL p90 18 ms with headroom (54% of 50 ms with 2 replicas): move GPU 3 from decode-2 to prefill-1"},
		{name: "decode over target: prefill has one replica, its min",
			h: func(l Layout) History { return streaks(l, map[string]int{"decode": 1}) }, o: obs(100*ms, 70*ms), code: CodeNoDonor,
			reason: "=decode ITL p90 70 ms > 50 ms for 2 intervals; no GPU to spare: prefill has 1 replica(s), its min; no free GPU in the set"},
		{name: "the donor would breach with one replica fewer",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 1}) }, o: obs(820*ms, 40*ms), code: CodeNoDonor,
			reason: "decode ITL p90 40 ms with 2 replica(s) would be at 120% of its target (headroom 70%)"},
		{name: "the receiver changed recently",
			h: func(l Layout) History {
				h := streaks(l, map[string]int{"prefill": 2})
				g := h.Groups["prefill"]
				g.Changed = t0.Add(-40 * time.Second)
				h.Groups["prefill"] = g
				return h
			}, o: obs(820*ms, 18*ms), code: CodeCooldown,
			reason: "=prefill TTFT p90 820 ms > 500 ms for 3 intervals; prefill changed 40s ago: cooldown for 1m20s more"},
		{name: "the donor changed recently",
			h: func(l Layout) History {
				h := streaks(l, map[string]int{"prefill": 2})
				g := h.Groups["decode"]
				g.Changed = t0.Add(-time.Minute)
				h.Groups["decode"] = g
				return h
			}, o: obs(820*ms, 18*ms), code: CodeNoDonor, reason: "decode changed recently (cooldown)"},
		{name: "a cooldown past is no cooldown",
			h: func(l Layout) History {
				h := streaks(l, map[string]int{"prefill": 2})
				g := h.Groups["prefill"]
				g.Changed = t0.Add(-3 * time.Minute)
				h.Groups["prefill"] = g
				return h
			}, o: obs(820*ms, 18*ms), code: CodeMove},
		{name: "the receiver is at its max",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2}) }, o: obs(820*ms, 18*ms),
			l: func() Layout { l := pd13(); l.Groups[0].Max = 1; return l }, code: CodeAtMax,
			reason: "prefill is at its max of 1 replica(s) (slo.roles.prefill.max)"},
		{name: "a free GPU in the set takes the new replica",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2}) }, o: obs(820*ms, 18*ms),
			c:    func(c Config) Config { c.GPUs = append(c.GPUs, "4"); return c },
			code: CodeAdd, move: &Move{To: "prefill", ToInstance: "prefill-1", GPUs: []string{"4"}, Replicas: map[string]int{"prefill": 2}},
			reason: "=prefill TTFT p90 820 ms > 500 ms for 3 intervals: add prefill-1 on free GPU 4"},
		{name: "a GPU another role holds is not free",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2}) }, o: obs(820*ms, 18*ms),
			l:    func() Layout { l := pd13(); l.Other = []string{"4"}; return l },
			c:    func(c Config) Config { c.GPUs = append(c.GPUs, "4"); return c },
			code: CodeMove},
		{name: "resized since the last decision: the streak restarts and the cooldown begins",
			h: func(l Layout) History {
				h := streaks(l, map[string]int{"prefill": 5})
				g := h.Groups["prefill"]
				g.Replicas = 2
				h.Groups["prefill"] = g
				return h
			}, o: obs(820*ms, 18*ms), code: CodeHold, reason: "(1 of 2 intervals)"},
		{name: "too few samples read as idle",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2}) },
			o: func() Observation {
				o := obs(3*time.Second, 18*ms)
				o.Groups[0].TTFTN = MinSamples - 1
				return o
			}(), code: CodeHold, reason: "prefill idle (7 TTFT, 0 ITL samples)"},
		{name: "replicas of another size do not trade",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2}) }, o: obs(820*ms, 18*ms),
			l: func() Layout {
				l := pd13()
				l.Groups[1].Sets = [][]string{{"1", "2"}, {"3", "4"}}
				l.Groups[1].Instances = l.Groups[1].Instances[:2]
				return l
			}, c: func(c Config) Config { c.GPUs = []string{"0", "1", "2", "3", "4"}; return c }, code: CodeNoDonor,
			reason: "decode's replicas take 2 GPU(s), prefill's 1"},
		{name: "a donor's GPUs outside slo.gpus stay",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2}) }, o: obs(820*ms, 18*ms),
			c:    func(c Config) Config { c.GPUs = []string{"0", "1", "2"}; return c },
			code: CodeNoDonor, reason: "decode's last replica holds GPU 3, outside slo.gpus"},
		{name: "a rising load brings the move one interval sooner",
			h: func(l Layout) History {
				h := streaks(l, map[string]int{"prefill": 1})
				g := h.Groups["prefill"]
				g.TTFTLoad = Holt{Level: 600, Trend: 300, Seen: 3} // load 1000 now: forecast 1300+
				h.Groups["prefill"] = g
				return h
			}, o: obs(480*ms, 18*ms), code: CodeMove,
			reason: "prefill TTFT p90 480 ms, rising to a predicted 1"},
		{name: "a growing queue is a breach before the p90 shows it",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 1}) },
			o: func() Observation {
				o := obs(400*ms, 18*ms)
				o.Groups[0].Queued, o.Groups[0].Prefilled = 60000, 750000 // 25,000 tokens/s: 2.4 s of queue
				return o
			}(), code: CodeMove,
			reason: "=prefill TTFT p90 400 ms, its queue (60000 prompt tokens, 2.4 s at the 25000 tokens/s it prefilled) over 500 ms for 2 intervals; decode ITL p90 18 ms with headroom (54% of 50 ms with 2 replicas): move GPU 3 from decode-2 to prefill-1"},
		{name: "a short queue changes nothing",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 1}) },
			o: func() Observation {
				o := obs(100*ms, 18*ms)
				o.Groups[0].Queued, o.Groups[0].Prefilled = 2500, 750000 // 0.1 s
				return o
			}(), code: CodeHold, reason: "=within targets: prefill TTFT p90 100 ms, 20% of 500 ms; decode ITL p90 18 ms, 36% of 50 ms"},
		{name: "the queue over target for one interval of two",
			o: func() Observation {
				o := obs(400*ms, 18*ms)
				o.Groups[0].Queued, o.Groups[0].Prefilled = 60000, 750000
				return o
			}(), code: CodeHold, reason: "prefill TTFT p90 400 ms, queue 2.4 s, 480% of 500 ms (1 of 2 intervals)"},
		{name: "no target for the kind: the entry is a donor, never a receiver",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2}) }, o: obs(820*ms, 90*ms),
			c:    func(c Config) Config { c.ITL = 0; return c },
			code: CodeMove, reason: "decode not judged (no itl_p90): move GPU 3 from decode-2 to prefill-1"},
		{name: "an aggregated entry is judged on its larger pressure",
			h: func(l Layout) History {
				return History{Groups: map[string]GroupHistory{
					"agg":     {Replicas: 2, Streak: 1, TTFTLoad: Holt{Level: 1000, Seen: 3}, ITLLoad: Holt{Level: 10, Seen: 3}},
					"prefill": {Replicas: 1}, "decode": {Replicas: 1},
				}}
			},
			l: func() Layout {
				return Layout{Groups: []Group{
					{Name: "agg", Kind: KindAggregated, Instances: []string{"agg-0", "agg-1"}, Sets: [][]string{{"0"}, {"1"}}, Min: 1},
					{Name: "prefill", Kind: KindPrefill, Instances: []string{"prefill"}, Sets: [][]string{{"2"}}, Min: 1},
					{Name: "decode", Kind: KindDecode, Instances: []string{"decode"}, Sets: [][]string{{"3"}}, Min: 1},
				}}
			},
			o: Observation{Span: 30 * time.Second, Groups: []GroupObs{
				{Group: "agg", TTFT: 300 * ms, TTFTN: 50, ITL: 80 * ms, ITLN: 900, Prompt: 30000, InFlight: 10},
			}},
			code: CodeNoDonor, reason: "=agg ITL p90 80 ms > 50 ms for 2 intervals; no GPU to spare: prefill has 1 replica(s), its min; decode has 1 replica(s), its min; no free GPU in the set"},
		{name: "two over target: the more pressed one is served first",
			h: func(l Layout) History { return streaks(l, map[string]int{"prefill": 2, "decode": 2}) },
			o: obs(600*ms, 90*ms), code: CodeNoDonor, reason: "=decode ITL p90 90 ms > 50 ms for 3 intervals; no GPU to spare: prefill has 1 replica(s), its min; no free GPU in the set"},
		{name: "nothing to resize", l: func() Layout { return Layout{} }, o: obs(820*ms, 18*ms), code: CodeNoTargets},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			l := pd13()
			if r.l != nil {
				l = r.l()
			}
			c := baseConfig()
			if r.c != nil {
				c = r.c(c)
			}
			var h History
			if r.h != nil {
				h = r.h(l)
			}
			now := r.now
			if now.IsZero() {
				now = t0
			}
			d := Decide(h, r.o, l, c, now)
			if d.Code != r.code {
				t.Errorf("code = %s, want %s (%s)", d.Code, r.code, d.Reason)
			}
			if r.move != nil && !reflect.DeepEqual(d.Move, r.move) {
				t.Errorf("move = %+v, want %+v", d.Move, r.move)
			}
			if (d.Move != nil) != (r.code == CodeMove || r.code == CodeAdd) {
				t.Errorf("code %s with move %+v", d.Code, d.Move)
			}
			if want, exact := strings.CutPrefix(r.reason, "="); exact && d.Reason != want {
				t.Errorf("reason:\n got %q\nwant %q", d.Reason, want)
			} else if !exact && !strings.Contains(d.Reason, r.reason) {
				t.Errorf("reason %q lacks %q", d.Reason, r.reason)
			}
			for _, v := range d.Groups {
				want := v.Replicas
				if d.Move != nil {
					if n, ok := d.Move.Replicas[v.Group]; ok {
						want = n
					}
				}
				if v.Proposed != want {
					t.Errorf("%s proposed %d, want %d", v.Group, v.Proposed, want)
				}
			}
		})
	}
}

// Pins: Decide is pure: the same arguments give the same decision, and
// the History passed in is not changed.
func TestDecideIsPure(t *testing.T) {
	l := pd13()
	h := streaks(l, map[string]int{"prefill": 2})
	before := streaks(l, map[string]int{"prefill": 2})
	o := obs(820*time.Millisecond, 18*time.Millisecond)
	a := Decide(h, o, l, baseConfig(), t0)
	b := Decide(h, o, l, baseConfig(), t0)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two calls differ:\n%+v\n%+v", a, b)
	}
	if !reflect.DeepEqual(h, before) {
		t.Fatalf("Decide changed the history it was given")
	}
}

// Pins: the History carries the streak, the replica count and the
// predictor between calls; a move's layout starts the cooldown of both
// entries at the next decision.
func TestDecideCarriesHistory(t *testing.T) {
	ms := time.Millisecond
	l, c := pd13(), baseConfig()
	var h History
	for i := 1; i <= 2; i++ {
		d := Decide(h, obs(820*ms, 18*ms), l, c, t0.Add(time.Duration(i)*c.Interval))
		h = d.History
		if got := h.Groups["prefill"].Streak; got != i {
			t.Fatalf("interval %d: streak %d", i, got)
		}
		if i == 2 && d.Code != CodeMove {
			t.Fatalf("interval 2: %s (%s)", d.Code, d.Reason)
		}
	}
	moved := Layout{Groups: []Group{
		{Name: "prefill", Kind: KindPrefill, Instances: []string{"prefill-0", "prefill-1"}, Sets: [][]string{{"0"}, {"3"}}, Min: 1},
		{Name: "decode", Kind: KindDecode, Instances: []string{"decode-0", "decode-1"}, Sets: [][]string{{"1"}, {"2"}}, Min: 1},
	}}
	at := t0.Add(3 * c.Interval)
	d := Decide(h, obs(820*ms, 18*ms), moved, c, at)
	for _, v := range d.Groups {
		want := map[string]int{"prefill": 1, "decode": 0}[v.Group] // the run of breaches restarts
		if v.CooldownUntil != at.Add(c.Cooldown) || v.Streak != want {
			t.Errorf("%s after the move: cooldown until %v, streak %d", v.Group, v.CooldownUntil, v.Streak)
		}
	}
	if d.Code != CodeHold {
		t.Errorf("the interval after a move: %s (%s)", d.Code, d.Reason)
	}
}

// Pins: the predictor's formulas: α = 2/(N+1), β = α/2, the first value
// sets the level, a steady series forecasts itself and a ramp is
// followed with its slope.
func TestHolt(t *testing.T) {
	a, b := Smoothing(30*time.Second, 90*time.Second)
	if a != 0.5 || b != 0.25 {
		t.Fatalf("α, β = %v, %v; want 0.5, 0.25", a, b)
	}
	if a, _ := Smoothing(30*time.Second, 10*time.Second); a != 1 {
		t.Fatalf("a window below the interval: α = %v, want 1 (the last interval alone)", a)
	}
	var h Holt
	for range 10 {
		h = h.Fold(100, a, b)
	}
	if f := h.Forecast(); f != 100 {
		t.Fatalf("steady 100: forecast %v", f)
	}
	h = Holt{}
	for i := range 40 {
		h = h.Fold(float64(100+10*i), a, b)
	}
	if f := h.Forecast(); f < 495 || f > 505 {
		t.Fatalf("a ramp of 10 per interval ending at 490: forecast %v, want about 500", f)
	}
	if got := predicted(0.9, 100, 110); math.Abs(got-0.99) > 1e-9 {
		t.Errorf("predicted(0.9, 100→110) = %v", got)
	}
	if got := predicted(1.2, 100, 50); got != 1.2 {
		t.Errorf("a falling forecast hides a breach: %v", got)
	}
	if got := predicted(0.8, 100, 1000); math.Abs(got-0.8*MaxLift) > 1e-9 {
		t.Errorf("a forecast ten times the load: %v, want at most MaxLift times", got)
	}
}

package planner

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Decide reads one interval (o) against the layout that runs (l) and the
// targets (c) at now, and answers what to change (at most one replica
// move), why, each entry's numbers, and the History to pass next time.
// Pure: the same arguments give the same Decision (TestDecideIsPure).
func Decide(h History, o Observation, l Layout, c Config, now time.Time) Decision {
	if len(l.Groups) == 0 {
		return Decision{Code: CodeNoTargets, Reason: "no prefill, decode or aggregated entry to resize", History: History{Groups: map[string]GroupHistory{}}}
	}
	alpha, beta := Smoothing(c.Interval, c.Window)
	obs := make(map[string]GroupObs, len(o.Groups))
	for _, g := range o.Groups {
		obs[g.Group] = g
	}
	span := o.Span.Seconds()
	if span <= 0 {
		span = c.Interval.Seconds()
	}
	next := History{Groups: make(map[string]GroupHistory, len(l.Groups))}
	vs := make([]Verdict, len(l.Groups))
	for i, g := range l.Groups {
		gh := h.Groups[g.Name]
		n := g.Replicas()
		if gh.Replicas != 0 && gh.Replicas != n {
			// Resized since the last decision (by the planner, tsd scale
			// or tsd apply): the cooldown starts, the run of breaches
			// belonged to the old count.
			gh.Changed, gh.Streak = now, 0
		}
		gh.Replicas = n
		v := Verdict{Group: g.Name, Kind: g.Kind, Replicas: n, Proposed: n}
		ob, seen := obs[g.Name]
		var ttftLoad, itlLoad float64
		if seen && span > 0 {
			ttftLoad = float64(ob.Prompt) * (1 - min(max(ob.Cached, 0), 1)) / span
			itlLoad = ob.InFlight
			gh.TTFTLoad = gh.TTFTLoad.Fold(ttftLoad, alpha, beta)
			gh.ITLLoad = gh.ITLLoad.Fold(itlLoad, alpha, beta)
			v.TTFT, v.ITL, v.TTFTN, v.ITLN = ob.TTFT, ob.ITL, ob.TTFTN, ob.ITLN
			v.Cached, v.InFlight, v.Queued = ob.Cached, ob.InFlight, ob.Queued
			if ob.Prefilled > 0 {
				v.PrefillRate = float64(ob.Prefilled) / span
				v.Backlog = time.Duration(float64(ob.Queued) / v.PrefillRate * float64(time.Second))
			}
			v.RequestsPerSec = float64(ob.Requests) / span
			v.OutputTokPerSec = float64(ob.OutputToks) / span
			if ob.Requests > 0 {
				v.PromptPerReq = float64(ob.Prompt) / float64(ob.Requests)
			}
		}
		if judgesTTFT(g.Kind) && c.TTFT > 0 && (v.TTFTN >= MinSamples || v.Backlog > 0) {
			var p float64
			if v.TTFTN >= MinSamples {
				p = ratio(v.TTFT, c.TTFT)
			}
			q := max(predicted(p, ttftLoad, gh.TTFTLoad.Forecast()), ratio(v.Backlog, c.TTFT))
			if q >= v.Predicted {
				v.Pressure, v.Predicted, v.Judged, v.Load, v.Forecast = p, q, "ttft", ttftLoad, gh.TTFTLoad.Forecast()
			}
		}
		if judgesITL(g.Kind) && c.ITL > 0 && v.ITLN >= MinSamples {
			p := ratio(v.ITL, c.ITL)
			if q := predicted(p, itlLoad, gh.ITLLoad.Forecast()); q > v.Predicted {
				v.Pressure, v.Predicted, v.Judged, v.Load, v.Forecast = p, q, "itl", itlLoad, gh.ITLLoad.Forecast()
			}
		}
		if v.Predicted > 1 {
			gh.Streak++
		} else {
			gh.Streak = 0
		}
		v.Streak = gh.Streak
		if !gh.Changed.IsZero() && now.Before(gh.Changed.Add(c.Cooldown)) {
			v.CooldownUntil = gh.Changed.Add(c.Cooldown)
		}
		next.Groups[g.Name] = gh
		vs[i] = v
	}
	d := decide(l, c, vs, now)
	d.Groups, d.History = vs, next
	if d.Move != nil {
		for i := range d.Groups {
			if n, ok := d.Move.Replicas[d.Groups[i].Group]; ok {
				d.Groups[i].Proposed = n
			}
		}
	}
	return d
}

func judgesTTFT(kind string) bool { return kind == KindPrefill || kind == KindAggregated }
func judgesITL(kind string) bool  { return kind == KindDecode || kind == KindAggregated }

func ratio(v, target time.Duration) float64 { return float64(v) / float64(target) }

// decide picks the move, given every entry's verdict.
func decide(l Layout, c Config, vs []Verdict, now time.Time) Decision {
	breach := max(c.Breach, 1)
	var order []int // entries over target for Breach intervals, most pressed first
	for i, v := range vs {
		if v.Streak >= breach {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return Decision{Code: CodeHold, Reason: holdText(vs, c)}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case vs[a].Predicted > vs[b].Predicted:
			return -1
		case vs[a].Predicted < vs[b].Predicted:
			return 1
		}
		return 0
	})
	free := freeGPUs(l, c.GPUs)
	var first Decision
	for k, ri := range order {
		r, v := l.Groups[ri], vs[ri]
		why := breachText(v, c)
		var blocked Decision
		switch {
		case !v.CooldownUntil.IsZero():
			blocked = Decision{Code: CodeCooldown, Reason: fmt.Sprintf("%s; %s changed %s ago: cooldown for %s more",
				why, r.Name, human(now.Sub(v.CooldownUntil.Add(-c.Cooldown))), human(v.CooldownUntil.Sub(now)))}
		case r.Max > 0 && r.Replicas() >= r.Max:
			blocked = Decision{Code: CodeAtMax, Reason: fmt.Sprintf("%s; %s is at its max of %d replica(s) (slo.roles.%s.max)", why, r.Name, r.Max, r.Name)}
		case r.per() > 0 && len(free) >= r.per():
			gpus := free[:r.per()]
			to := instanceName(r.Name, r.Replicas())
			return Decision{Code: CodeAdd, Move: &Move{To: r.Name, ToInstance: to, GPUs: gpus, Replicas: map[string]int{r.Name: r.Replicas() + 1}},
				Reason: fmt.Sprintf("%s: add %s on free %s", why, to, gpuText(gpus))}
		default:
			di, refusals := donor(l, c, vs, ri)
			if di >= 0 {
				dg, dv := l.Groups[di], vs[di]
				last := len(dg.Sets) - 1
				gpus := dg.Sets[last]
				to := instanceName(r.Name, r.Replicas())
				m := &Move{To: r.Name, From: dg.Name, FromInstance: dg.Instances[last], ToInstance: to, GPUs: append([]string(nil), gpus...),
					Replicas: map[string]int{r.Name: r.Replicas() + 1, dg.Name: dg.Replicas() - 1}}
				return Decision{Code: CodeMove, Move: m, Reason: fmt.Sprintf("%s; %s: move %s from %s to %s",
					why, headroomText(dv, c, dg.Replicas()-1), gpuText(gpus), m.FromInstance, to)}
			}
			reason := why + "; no GPU to spare: " + strings.Join(refusals, "; ")
			if len(c.GPUs) > 0 {
				reason += "; no free GPU in the set"
			}
			blocked = Decision{Code: CodeNoDonor, Reason: reason}
		}
		if k == 0 {
			first = blocked
		}
	}
	return first
}

// donor is the entry that best gives receiver ri a replica (-1: none),
// and why each other entry cannot.
func donor(l Layout, c Config, vs []Verdict, ri int) (int, []string) {
	r := l.Groups[ri]
	inSet := map[string]bool{}
	for _, g := range c.GPUs {
		inSet[g] = true
	}
	best, bestAfter := -1, 0.0
	var refusals []string
	for i, d := range l.Groups {
		if i == ri {
			continue
		}
		v := vs[i]
		n := d.Replicas()
		after := v.Predicted * float64(n) / float64(max(n-1, 1))
		switch {
		case n <= max(d.Min, 1):
			refusals = append(refusals, fmt.Sprintf("%s has %d replica(s), its min", d.Name, n))
		case d.per() != r.per():
			refusals = append(refusals, fmt.Sprintf("%s's replicas take %d GPU(s), %s's %d", d.Name, d.per(), r.Name, r.per()))
		case !allIn(d.Sets[n-1], inSet):
			refusals = append(refusals, fmt.Sprintf("%s's last replica holds %s, outside slo.gpus", d.Name, gpuText(d.Sets[n-1])))
		case !v.CooldownUntil.IsZero():
			refusals = append(refusals, fmt.Sprintf("%s changed recently (cooldown)", d.Name))
		case after >= c.Headroom:
			refusals = append(refusals, fmt.Sprintf("%s with %d replica(s) would be at %s of its target (headroom %s)", latencyText(v, c), n-1, pct(after), pct(c.Headroom)))
		case best < 0 || after < bestAfter:
			best, bestAfter = i, after
		}
	}
	return best, refusals
}

func allIn(set []string, in map[string]bool) bool {
	for _, g := range set {
		if !in[g] {
			return false
		}
	}
	return true
}

// freeGPUs are the set's GPUs no local role holds, in the set's order.
func freeGPUs(l Layout, set []string) []string {
	held := map[string]bool{}
	for _, g := range l.Other {
		held[g] = true
	}
	for _, gr := range l.Groups {
		for _, s := range gr.Sets {
			for _, g := range s {
				held[g] = true
			}
		}
	}
	var out []string
	for _, g := range set {
		if !held[g] {
			out = append(out, g)
		}
	}
	return out
}

// instanceName is the name replica i of entry takes once it has more
// than one (profiles Role.Instance).
func instanceName(entry string, i int) string { return entry + "-" + strconv.Itoa(i) }

// The words of a decision. Latencies as people read them ("820 ms",
// "1.2 s"), shares as percentages of the target.

func metricName(judged string) string {
	if judged == "itl" {
		return "ITL"
	}
	return "TTFT"
}

func target(judged string, c Config) time.Duration {
	if judged == "itl" {
		return c.ITL
	}
	return c.TTFT
}

func observed(v Verdict) time.Duration {
	if v.Judged == "itl" {
		return v.ITL
	}
	return v.TTFT
}

// breachText: "prefill TTFT p90 820 ms > 500 ms for 3 intervals".
func breachText(v Verdict, c Config) string {
	m, t, o := metricName(v.Judged), target(v.Judged, c), observed(v)
	s := fmt.Sprintf("%s %s p90 %s", v.Group, m, ms(o))
	switch {
	case v.Pressure > 1:
		s += " > " + ms(t)
	case backlogged(v, c):
		s += fmt.Sprintf(", its queue (%d prompt tokens, %s at the %.0f tokens/s it prefilled) over %s", v.Queued, ms(v.Backlog), v.PrefillRate, ms(t))
	default:
		s += fmt.Sprintf(", rising to a predicted %s of %s", pct(v.Predicted), ms(t))
	}
	return s + fmt.Sprintf(" for %d interval%s", v.Streak, plural(v.Streak))
}

// backlogged: the entry's queue, not its p90 or trend, is what puts it
// over its TTFT target.
func backlogged(v Verdict, c Config) bool {
	return v.Judged == "ttft" && c.TTFT > 0 && v.Backlog > c.TTFT && ratio(v.Backlog, c.TTFT) >= v.Predicted
}

// latencyText: "decode ITL p90 18 ms", or "decode idle".
func latencyText(v Verdict, c Config) string {
	if v.Judged == "" {
		return v.Group + " " + idleText(v, c)
	}
	return fmt.Sprintf("%s %s p90 %s", v.Group, metricName(v.Judged), ms(observed(v)))
}

func idleText(v Verdict, c Config) string {
	switch {
	case judgesTTFT(v.Kind) && c.TTFT > 0 || judgesITL(v.Kind) && c.ITL > 0:
		return fmt.Sprintf("idle (%d TTFT, %d ITL samples)", v.TTFTN, v.ITLN)
	case v.Kind == KindDecode:
		return "not judged (no itl_p90)"
	}
	return "not judged (no ttft_p90)"
}

// headroomText: "decode ITL p90 18 ms with headroom (54% of 50 ms with 2 replicas)".
func headroomText(v Verdict, c Config, left int) string {
	after := v.Predicted * float64(v.Replicas) / float64(max(left, 1))
	if v.Judged == "" {
		return latencyText(v, c)
	}
	return fmt.Sprintf("%s with headroom (%s of %s with %d replica%s)", latencyText(v, c), pct(after), ms(target(v.Judged, c)), left, plural(left))
}

// holdText says each entry's standing when nothing moves.
func holdText(vs []Verdict, c Config) string {
	parts := make([]string, 0, len(vs))
	over := false
	for _, v := range vs {
		switch {
		case v.Judged == "":
			parts = append(parts, v.Group+" "+idleText(v, c))
		case v.Predicted > 1:
			over = true
			queue := ""
			if backlogged(v, c) {
				queue = ", queue " + ms(v.Backlog)
			}
			parts = append(parts, fmt.Sprintf("%s %s p90 %s%s, %s of %s (%d of %d intervals)", v.Group, metricName(v.Judged), ms(observed(v)), queue,
				pct(v.Predicted), ms(target(v.Judged, c)), v.Streak, max(c.Breach, 1)))
		default:
			parts = append(parts, fmt.Sprintf("%s %s p90 %s, %s of %s", v.Group, metricName(v.Judged), ms(observed(v)), pct(v.Pressure), ms(target(v.Judged, c))))
		}
	}
	head := "within targets: "
	if over {
		head = "over target, not yet for long enough: "
	}
	return head + strings.Join(parts, "; ")
}

func gpuText(gpus []string) string {
	if len(gpus) == 1 {
		return "GPU " + gpus[0]
	}
	return "GPUs " + strings.Join(gpus, ",")
}

// ms writes a latency for people: "18 ms", "820 ms", "1.2 s".
func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 0, 64) + " s"
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d >= 10*time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

func pct(f float64) string { return strconv.FormatFloat(f*100, 'f', 0, 64) + "%" }

func human(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

package traffic

import (
	"slices"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
	"github.com/tsd-project/tsd/snapshot"
)

// The SLO planner's side of the account (supervisor's planner loop,
// docs/architecture.md §4.5): each interval it reads every role's TTFT
// and ITL p90 over the interval, and counters it differences between two
// readings: prompt tokens that came in, prefilled and cached, output
// tokens, requests ended and their summed latency (whose growth over a
// span is the mean in flight, by Little's law), and the prompt tokens
// queued for a prefill now.

// planAcct is one row's counters for the planner.
type planAcct struct {
	promptIn uint64  // prompt tokens of requests that took a leg here
	busy     float64 // seconds: summed latency of the requests that ended here
	queued   int     // prompt tokens of requests whose prefill here is not done
}

// queuesPrompt: a leg on an engine of this kind prefills the prompt
// (prefill, aggregated), so the request waits on it for its first token.
func queuesPrompt(kind string) bool { return kind == "prefill" || kind == "aggregated" }

// queueLocked books the request's prompt as waiting on x's role, unless
// it is booked already or its first token came; b.mu held.
func (r *Rec) queueLocked(x *roleRef) {
	if !r.counted || r.first || r.ended || x.queued > 0 || r.prompt <= 0 || !queuesPrompt(x.kind) {
		return
	}
	x.queued = r.prompt
	r.b.row(x.name).plan.queued += r.prompt
}

// unqueueLocked takes back what queueLocked booked on x's role; b.mu held.
func (r *Rec) unqueueLocked(x *roleRef) {
	if x.queued <= 0 {
		return
	}
	if a, ok := r.b.roles[x.name]; ok {
		a.plan.queued -= x.queued
	}
	x.queued = 0
}

// Observe reads every role's row (GatewayRole first, then the roles in
// Options order): p90s over the samples of the last window (at most
// SampleAge, and at most the newest SampleCap samples of the row), the
// planner's counters, and the in-flight and queued prompt tokens now;
// and for each named set of roles in groups (a profile entry's
// instances), the p90s over the union of their samples.
func (b *Book) Observe(window time.Duration, groups map[string][]string) snapshot.TrafficWindow {
	window = min(max(window, time.Second), SampleAge)
	b.mu.Lock()
	now := b.elapsed()
	out := snapshot.TrafficWindow{Window: window, Roles: make([]snapshot.RoleWindow, 0, len(b.order))}
	ttft := make([][]time.Duration, 0, len(b.order))
	itl := make([][]time.Duration, 0, len(b.order))
	for _, name := range b.order {
		a := b.roles[name]
		rw := snapshot.RoleWindow{Role: name, Requests: a.requests, PromptIn: a.plan.promptIn, Output: a.tokens,
			BusySec: a.plan.busy, InFlight: a.inflight, Queued: max(a.plan.queued, 0)}
		for _, c := range b.caches[name] {
			rw.Prefilled += c.prompt
			rw.Cached += c.cached
		}
		out.Roles = append(out.Roles, rw)
		ttft = append(ttft, a.ttft.within(now, window))
		itl = append(itl, a.itl.within(now, window))
	}
	b.mu.Unlock()
	at := make(map[string]int, len(out.Roles))
	for i, r := range out.Roles {
		at[r.Role] = i
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	slices.Sort(names)
	for _, g := range names {
		gw := snapshot.RoleWindow{Role: g}
		var gt, gi []time.Duration
		for _, r := range groups[g] {
			if i, ok := at[r]; ok {
				gt, gi = append(gt, ttft[i]...), append(gi, itl[i]...)
			}
		}
		gw.TTFTp90, gw.TTFTN = p90(gt)
		gw.ITLp90, gw.ITLN = p90(gi)
		out.Groups = append(out.Groups, gw)
	}
	// Sorted outside the lock, as Status does.
	for i := range out.Roles {
		out.Roles[i].TTFTp90, out.Roles[i].TTFTN = p90(ttft[i])
		out.Roles[i].ITLp90, out.Roles[i].ITLN = p90(itl[i])
	}
	return out
}

// within copies the values of the samples of the last d before now.
func (s *samples) within(now, d time.Duration) []time.Duration {
	var vals []time.Duration
	for i := 0; i < s.n; i++ {
		if now-s.at[i] <= d {
			vals = append(vals, s.v[i])
		}
	}
	return vals
}

// p90 is the nearest-rank 90th percentile of vals (sorted in place) and
// how many there were.
func p90(vals []time.Duration) (time.Duration, int) {
	if len(vals) == 0 {
		return 0, 0
	}
	slices.Sort(vals)
	return percentile.NearestRank(vals, 90), len(vals)
}

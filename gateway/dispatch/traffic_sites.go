package dispatch

import (
	"context"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/traffic"
	"github.com/tsd-project/tsd/profiles"
)

// The dispatch's side of the traffic account (gateway/traffic):
// the HTTP layer begins and ends each request's record; these name what
// only the dispatch knows. Each is one call at its site, so the sites are
// easy to move when the dispatch moves.

// recordLegs tells the request's record which roles serve its legs, once
// every leg was submitted: from then on it counts on them, not on the
// gateway row.
func recordLegs(ctx context.Context, a *attempt, promptTokens int) {
	reqtime.Mark(ctx, reqtime.LegsSent) // the engine's share of TTFT starts here
	rec := traffic.FromContext(ctx)
	if rec == nil {
		return
	}
	rec.Prompt(promptTokens)
	for _, s := range a.encodeLegs() {
		rec.Role(s.Worker().Kind(), s.Worker().Role())
	}
	for _, w := range a.workers() {
		rec.Role(w.Kind(), w.Role())
	}
}

// recordOutput records one output of the decode leg on role carrying n
// tokens: the first token's time (also the request's reqtime.FirstToken,
// stamped by the record), or the gap since the last output spread
// over its tokens.
func recordOutput(rec *traffic.Rec, role string, first bool, gap time.Duration, n int) {
	rec.Output(role, first, gap, n)
}

// recordPrefill records a prefill leg (or an aggregated engine's one
// leg) that ended well: its prompt tokens and how many of them its
// rank's prefix cache held (cached_tokens), on that DP rank.
func recordPrefill(rec *traffic.Rec, ps *lane.Stream, out lane.Output) {
	if rec == nil {
		return
	}
	if w := ps.Worker(); w.Kind() != profiles.KindAggregated {
		rec.Mark(reqtime.Prefilled) // the prefill phase ends, the KV transfer begins (reqtime)
	}
	w := ps.Worker()
	rec.Prefill(w.Role(), ps.Identity-w.Plan().EngineIndex, out.PromptTokens, out.CachedTokens)
}

// recordEncoded marks every encode leg of the attempt done: the encode
// phase ends, the prefill's begins (reqtime).
func recordEncoded(rec *traffic.Rec) { rec.Mark(reqtime.Encoded) }

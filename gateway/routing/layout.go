package routing

// Which route a request takes when the deployment has more than one
// (docs/profiles.md "Layouts"): prefill → decode, or one leg on an
// aggregated engine. gateway.disaggregation says always, never, or
// conditional: per request, by Dynamo's rule (its
// --router-conditional-disagg and defaults) over what the aggregated
// policy would pick.

// Layouts, as the access line and the metric name them.
const (
	LayoutPD         = "pd"
	LayoutAggregated = "aggregated"
)

// Disaggregation settings (gateway.disaggregation).
const (
	DisaggAlways      = "always"
	DisaggNever       = "never"
	DisaggConditional = "conditional"
)

// Reasons a layout decision gives (the access line's layout_reason, the
// reason label of tsd_gateway_layout_routes_total).
const (
	LayoutReasonAlways      = "always"               // disaggregation: always
	LayoutReasonNever       = "never"                // disaggregation: never
	LayoutReasonImage       = "image"                // images need the encode → prefill → decode route
	LayoutReasonNoAgg       = "no_aggregated_worker" // conditional, but no aggregated rank is routable
	LayoutReasonNoPD        = "no_pd_worker"         // conditional, but no prefill or no decode rank is routable
	LayoutReasonUncached    = "uncached"             // uncached prompt within both limits: aggregated
	LayoutReasonBusy        = "prefill_busy"         // every prefill busier than prefill_busy: aggregated
	LayoutReasonUncachedToo = "uncached_tokens"      // more uncached prompt tokens than max_uncached_tokens: pd
	LayoutReasonRatioTooHi  = "uncached_ratio"       // a larger uncached share than max_uncached_ratio: pd
)

// LayoutConfig is gateway.disaggregation with gateway.conditional's
// thresholds.
type LayoutConfig struct {
	Mode              string  // always | never | conditional; "" is always
	MaxUncachedTokens int     // conditional: at most this many uncached prompt tokens …
	MaxUncachedRatio  float64 // … and at most this share of the prompt go aggregated
	PrefillBusy       int     // a prefill with more queued prompt tokens is busy; 0: never busy
}

// LayoutFacts is what one layout decision reads: the request and the
// pools as the Router saw them just before.
type LayoutFacts struct {
	Prompt int  // the request's prompt tokens
	Images bool // it carries images: only the prefill → decode route (encode first) takes them
	// Aggregated and PD: a routable aggregated rank; a routable prefill
	// and decode rank.
	Aggregated, PD bool
	// Uncached is the prompt tokens not cached on the aggregated rank the
	// aggregated policy picks (the prompt less that rank's match in the
	// policy's tree or KV index).
	Uncached int
	// PrefillQueued is, per routable prefill worker, the prompt tokens
	// queued on it: its prefill legs' uncached prompt tokens, from
	// submission until their prefill ends (docs/protocol.md §11.12).
	PrefillQueued []int
}

// LayoutDecision is the route a request takes and why.
type LayoutDecision struct {
	Layout string // LayoutPD or LayoutAggregated
	Reason string
	// Counted says Uncached and Ratio were weighed (conditional, with an
	// aggregated candidate): the access line shows them.
	Counted  bool
	Uncached int
	Ratio    float64
}

// DecideLayout is the route decision: a pure function of the request's
// facts and the settings, whose reason a person can read.
//
// Under conditional, a text request goes to the aggregated engine the
// aggregated policy picks when its uncached prompt tokens are at most
// MaxUncachedTokens and at most MaxUncachedRatio of the prompt, or when
// every prefill is busier than PrefillBusy; otherwise prefill → decode.
// A route with no routable worker yields to the other; an image request
// always takes prefill → decode.
func DecideLayout(f LayoutFacts, c LayoutConfig) LayoutDecision {
	pd := func(reason string) LayoutDecision { return LayoutDecision{Layout: LayoutPD, Reason: reason} }
	agg := func(reason string) LayoutDecision { return LayoutDecision{Layout: LayoutAggregated, Reason: reason} }
	switch c.Mode {
	case DisaggNever:
		return agg(LayoutReasonNever)
	case DisaggConditional:
	default:
		return pd(LayoutReasonAlways)
	}
	switch {
	case f.Images:
		return pd(LayoutReasonImage)
	case !f.Aggregated:
		return pd(LayoutReasonNoAgg)
	case !f.PD:
		return agg(LayoutReasonNoPD)
	}
	d := LayoutDecision{Counted: true, Uncached: max(f.Uncached, 0)}
	if f.Prompt > 0 {
		d.Ratio = float64(d.Uncached) / float64(f.Prompt)
	}
	switch {
	case d.Uncached <= c.MaxUncachedTokens && d.Ratio <= c.MaxUncachedRatio:
		d.Layout, d.Reason = LayoutAggregated, LayoutReasonUncached
	case allBusy(f.PrefillQueued, c.PrefillBusy):
		d.Layout, d.Reason = LayoutAggregated, LayoutReasonBusy
	case d.Uncached > c.MaxUncachedTokens:
		d.Layout, d.Reason = LayoutPD, LayoutReasonUncachedToo
	default:
		d.Layout, d.Reason = LayoutPD, LayoutReasonRatioTooHi
	}
	return d
}

// allBusy: every prefill has more than busy prompt tokens queued (busy 0:
// none ever is).
func allBusy(queued []int, busy int) bool {
	if busy <= 0 || len(queued) == 0 {
		return false
	}
	for _, q := range queued {
		if q <= busy {
			return false
		}
	}
	return true
}

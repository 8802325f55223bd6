// Package planner is the SLO planner's decision: given what the last
// interval showed (per profile entry: TTFT and ITL p90, the load that came
// in), the layout that runs (each entry's replicas and their GPUs) and the
// targets (profile key slo:), it says which replica counts hold the
// targets on the GPUs it may use, and why, in words with the numbers.
//
// Decide is a pure function, as supervisor/restart.go Decide and
// gateway/dispatch/retry.go DecideRetry are: the clock comes in, the
// memory it needs between intervals (the predictor's level and trend,
// each entry's run of intervals over target, when it last changed) comes
// in as a History value and goes out as the next one. So a recorded day
// replays in simulated time (replay_test.go), and the supervisor's loop
// (supervisor/planner.go) only observes, asks and carries the answer out
// through tsd scale's steps.
//
// The model, stated (docs/architecture.md §4.5):
//
//   - pressure: an entry's observed p90 over its target, per target it is
//     judged on (prefill: TTFT; decode: ITL; aggregated: both, the larger
//     counts). Fewer than MinSamples samples in the interval: no reading
//     (pressure 0, "idle").
//   - prediction: each entry's load (prefill: uncached prompt tokens
//     arriving per second; decode: mean streams in flight; aggregated:
//     the one of the two behind its larger pressure) is smoothed by
//     Holt's linear method (level and trend, α = 2/(N+1), β = α/2, N =
//     window / interval); the predicted pressure is the observed one
//     times the forecast over the load now, clamped to [1, MaxLift]
//     (a trend may bring a move sooner, never hide a breach, and a burst
//     the level still remembers cannot make one). For TTFT, the queue
//     is a second, leading reading: a request arriving now waits for the
//     prompt tokens queued before it at the rate the entry prefilled
//     last interval (the backlog), so the predicted pressure is at least
//     backlog / target — a queue that grows is seen before the p90 of
//     the requests it already served shows it.
//   - scaling: latency is taken as proportional to load per replica, so
//     an entry with n replicas would show pressure p·n/(n−1) with one
//     fewer and p·n/(n+1) with one more.
//   - hysteresis: an entry is moved to only after Breach consecutive
//     intervals with predicted pressure over 1; an entry gives a replica
//     away only if its pressure with one fewer stays under Headroom (so a
//     move never makes the donor the next breach); no entry changes twice
//     within Cooldown; one move per decision.
//   - safety: no entry goes below its min (at least 1: the routing needs
//     every kind the profile has) or above its max; a replica moves only
//     between entries whose replicas take as many GPUs (tp × dp), and
//     only GPUs of the set the planner was given.
package planner

import "time"

// Role kinds the planner resizes (profiles.KindPrefill, KindDecode,
// KindAggregated; planner imports nothing of tsd).
const (
	KindPrefill    = "prefill"
	KindDecode     = "decode"
	KindAggregated = "aggregated"
)

// MinSamples is the fewest latency samples an interval needs for its p90
// to count: below it an entry reads as idle (pressure 0).
const MinSamples = 8

// Config is the profile's slo: as the decision reads it.
type Config struct {
	TTFT time.Duration // target of TTFT p90; 0: not judged
	ITL  time.Duration // target of ITL p90; 0: not judged
	// Interval is one observation; Window the predictor's memory
	// (N = Window / Interval intervals).
	Interval, Window time.Duration
	Cooldown         time.Duration // no second change to one entry sooner
	Breach           int           // consecutive intervals over target before a move
	Headroom         float64       // a donor's pressure with one replica fewer must stay under this
	GPUs             []string      // the GPUs the planner may use
}

// Group is one profile entry the planner may resize, as it runs now.
type Group struct {
	Name string
	Kind string
	// Instances are its instance names and Sets their GPUs, in replica
	// order: the last is the one a scale-down removes.
	Instances []string
	Sets      [][]string
	Min, Max  int // replica bounds; Max 0: none but the GPU set
}

// Replicas is how many replicas the entry has.
func (g Group) Replicas() int { return len(g.Sets) }

// per is how many GPUs one replica takes (tp × dp).
func (g Group) per() int {
	if len(g.Sets) == 0 {
		return 0
	}
	return len(g.Sets[0])
}

// Layout is what runs: the entries the planner may resize, in profile
// order, and the GPUs every other local role holds (encode entries,
// entries outside slo).
type Layout struct {
	Groups []Group
	Other  []string
}

// Observation is one interval as the gateway saw it, per entry.
type Observation struct {
	Span   time.Duration // how long the numbers cover
	Groups []GroupObs
}

// GroupObs is one entry's interval: the p90s over the samples of all its
// instances, and the load that came in.
type GroupObs struct {
	Group      string
	TTFT, ITL  time.Duration // p90s; 0 with no samples
	TTFTN      int           // TTFT samples (requests that got their first token)
	ITLN       int           // ITL samples
	Requests   int           // requests that ended
	Prompt     int           // prompt tokens of requests that came in
	Cached     float64       // share of prefilled prompt tokens the engines found cached, 0..1
	InFlight   float64       // mean requests in flight over the span
	Queued     int           // prompt tokens waiting for a prefill at the end of the span
	Prefilled  int           // prompt tokens the entry prefilled over the span
	OutputToks int           // output tokens streamed
}

// History is what Decide remembers between intervals; the zero value
// starts fresh. Treat it as opaque: pass back the one Decide returned.
type History struct {
	Groups map[string]GroupHistory
}

// GroupHistory is one entry's memory.
type GroupHistory struct {
	Replicas int       // at the last decision: a different count now is a change
	Changed  time.Time // when its replicas last changed (zero: never seen change)
	Streak   int       // consecutive intervals with predicted pressure over 1
	TTFTLoad Holt      // uncached prompt tokens per second
	ITLLoad  Holt      // mean streams in flight
}

// Codes of a decision (the /metrics label tsd_planner_decisions_total{reason}).
const (
	CodeHold      = "hold"       // every entry within its target (or breaching for fewer than Breach intervals)
	CodeMove      = "move"       // a replica moves from one entry to another
	CodeAdd       = "add"        // a replica is added on GPUs no role holds
	CodeNoDonor   = "no_donor"   // an entry breaches and no GPU can be spared
	CodeCooldown  = "cooldown"   // an entry breaches but changed too recently
	CodeAtMax     = "at_max"     // an entry breaches at its max
	CodeNoTargets = "no_targets" // nothing to judge (no entry to resize)
)

// Move is a change of replica counts: one replica to To, from From (""
// when on GPUs no role holds).
type Move struct {
	To   string // the entry that gains a replica
	From string // the entry that loses its last replica; "" when none does
	// FromInstance is the instance that goes, ToInstance the one that
	// comes (its name once the entry has one more replica).
	FromInstance, ToInstance string
	GPUs                     []string // the GPUs that change hands
	// Replicas are the two entries' counts after the move.
	Replicas map[string]int
}

// Decision is Decide's answer.
type Decision struct {
	Code   string
	Reason string
	Move   *Move // nil: keep the layout
	// Groups are each entry's numbers as the decision read them, in
	// layout order (the dashboard's and /metrics' planner rows).
	Groups  []Verdict
	History History // pass to the next Decide
}

// Verdict is one entry as the decision judged it.
type Verdict struct {
	Group, Kind     string
	Replicas        int // now
	Proposed        int // after the decision's move
	TTFT, ITL       time.Duration
	TTFTN, ITLN     int
	Pressure        float64 // observed p90 / target (the larger of the entry's targets); 0 idle
	Predicted       float64 // with the load the predictor expects next
	Judged          string  // "ttft", "itl" or "" (idle / no target for its kind)
	Load, Forecast  float64 // the judged target's load now and as predicted
	Streak          int
	CooldownUntil   time.Time // zero: free to change
	PromptPerReq    float64   // mean prompt tokens of the requests that came in
	Cached          float64
	InFlight        float64
	Queued          int
	RequestsPerSec  float64
	OutputTokPerSec float64
	// Backlog is how long a request arriving now waits for the prompt
	// tokens queued before it, at the rate the entry prefilled last
	// interval (Queued / PrefillRate); 0 when it prefilled nothing.
	Backlog     time.Duration
	PrefillRate float64 // prompt tokens prefilled per second
}

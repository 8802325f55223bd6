package snapshot

import "time"

// TrafficWindow is the gateway's account as the SLO planner reads it
// each interval (gateway/traffic Observe): per role instance, the
// latency percentiles of a recent window and cumulative counters the
// planner differences between two readings. It travels in the daemon
// only (the supervisor's PlannerGateway), never as JSON.
type TrafficWindow struct {
	Window time.Duration // the span the percentiles cover
	Roles  []RoleWindow
	// Groups are the p90s over the union of the samples of each set of
	// roles asked for (a profile entry's instances); Role is the set's name.
	Groups []RoleWindow
}

// RoleWindow is one role instance's share of a TrafficWindow.
type RoleWindow struct {
	Role string
	// p90 of the window's samples (0 with none) and how many there were.
	TTFTp90, ITLp90 time.Duration
	TTFTN, ITLN     int
	// Counters since the gateway started: requests that ended having a
	// leg here, prompt tokens of requests that took a leg here, prompt
	// tokens of the prefill legs that finished here and how many of them
	// the engine found cached, output tokens.
	Requests, PromptIn, Prefilled, Cached, Output uint64
	// BusySec is the summed latency (seconds) of the requests that ended
	// here: its growth over a span, divided by the span, is the mean
	// number in flight (Little's law).
	BusySec float64
	// Now: requests in flight, and prompt tokens of requests whose
	// prefill here has not finished (queued prompt tokens).
	InFlight, Queued int
}

// PlannerStatus is the SLO planner as the daemon runs it (supervisor's
// planner loop): the targets, each entry's numbers, the proposal, what it
// waits for, and the recent decisions. Nil on a Snapshot: no slo: in the
// profile.
type PlannerStatus struct {
	Mode     string        `json:"mode"` // advise | act
	Paused   bool          `json:"paused,omitempty"`
	TTFT     time.Duration `json:"-"` // target of TTFT p90 (0: none); JSON ttft_p90_ms
	ITL      time.Duration `json:"-"` // target of ITL p90 (0: none); JSON itl_p90_ms
	Interval time.Duration `json:"-"` // JSON interval_ms
	Cooldown time.Duration `json:"-"` // JSON cooldown_ms
	GPUs     []string      `json:"gpus"`
	// Last is when the last decision was made, Next when the next is due.
	Last time.Time `json:"last,omitzero"`
	Next time.Time `json:"next,omitzero"`
	// Code and Reason are the last decision's (codes: planner.Code*).
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Proposal is the last decision's move as words ("move GPU 3 from
	// decode-2 to prefill-1"), "" when it keeps the layout.
	Proposal string `json:"proposal,omitempty"`
	// Waiting says what holds an act-mode proposal back: a drain, an
	// apply in progress, a role not ready, pause, or advise mode.
	Waiting string          `json:"waiting,omitempty"`
	Groups  []PlannerGroup  `json:"groups"`
	Recent  []PlannerChange `json:"recent,omitempty"` // decisions that changed (or proposed changing) the layout, newest last
	// Decisions counts decisions by code since start (/metrics
	// tsd_planner_decisions_total{reason}).
	Decisions map[string]uint64 `json:"decisions,omitempty"`
	// Moves counts layout changes carried out, Failed those that failed
	// (and were rolled back), since start.
	Moves  uint64 `json:"moves"`
	Failed uint64 `json:"failed,omitempty"`
}

// PlannerGroup is one profile entry as the planner judged it last.
type PlannerGroup struct {
	Group    string `json:"group"`
	Kind     string `json:"kind"`
	Replicas int    `json:"replicas"`
	Proposed int    `json:"proposed"`
	Min      int    `json:"min"`
	Max      int    `json:"max,omitempty"`
	// The interval's p90s (JSON: ttft_p90_ms, itl_p90_ms) and sample counts.
	TTFT  time.Duration `json:"-"`
	ITL   time.Duration `json:"-"`
	TTFTN int           `json:"first_token_samples"`
	ITLN  int           `json:"token_gap_samples"`
	// Pressure is the observed p90 over its target (the larger of the
	// entry's targets), Predicted the same with the load the predictor
	// expects; Judged names the target ("ttft", "itl"; "" idle).
	Pressure  float64 `json:"pressure"`
	Predicted float64 `json:"predicted"`
	Judged    string  `json:"judged,omitempty"`
	Streak    int     `json:"streak"`
	// CooldownUntil: no change to the entry before it.
	CooldownUntil time.Time `json:"cooldown_until,omitzero"`
	ReqPerSec     float64   `json:"req_per_sec"`
	PromptPerReq  float64   `json:"prompt_per_req"`
	CachedShare   float64   `json:"cached_share"`
	InFlight      float64   `json:"in_flight"`
	QueuedPrompt  int       `json:"queued_prompt_tokens"`
	// Backlog is how long a request arriving now would wait for the
	// queued prompt tokens at the rate the entry prefilled (JSON backlog_ms).
	Backlog        time.Duration `json:"-"`
	OutputTokPerS  float64       `json:"output_tok_per_sec"`
	PressureSeries []float64     `json:"pressure_series,omitempty"` // the last intervals' pressures, oldest first (the dashboard's trend)
}

// PlannerChange is one decision that moved (or, in advise mode, proposed
// moving) a replica, or a rollback.
type PlannerChange struct {
	Time   time.Time `json:"time"`
	Code   string    `json:"code"`
	Reason string    `json:"reason"`
	// Outcome: proposed (advise), carried out (done), failed (rolled
	// back) or running.
	Outcome string `json:"outcome"`
}

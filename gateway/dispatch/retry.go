package dispatch

// Retries and migration (docs/protocol.md §11.9): what to do when an
// attempt of a request fails is one pure decision, DecideRetry, over what
// failed, how many attempts were made and what the client already has.
// The flight (generate.go) executes it.

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/profiles"
)

// RetryConfig is gateway.retry.
type RetryConfig struct {
	// MaxAttempts counts the first try, as SMG's max_retries does; ≤ 1:
	// never again.
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
	Multiplier  float64
	Jitter      float64
	// Migrate continues a stream whose decode died after tokens were sent.
	Migrate bool
}

// RetryConfigOf reads the plan's gateway.retry.
func RetryConfigOf(p profiles.RetryPlan) RetryConfig {
	return RetryConfig{MaxAttempts: p.MaxRetries, Initial: time.Duration(p.InitialBackoffMS) * time.Millisecond,
		Max: time.Duration(p.MaxBackoffMS) * time.Millisecond, Multiplier: p.BackoffMultiplier, Jitter: p.JitterFactor, Migrate: p.Migrate}
}

// Backoff is the delay before attempt index+1 (index counts from 0, the
// first try), SMG's formula: min(initial × multiplier^index, max), then
// scaled by 1 + jitter × (2u − 1) for u uniform in [0, 1).
func Backoff(c RetryConfig, index int, u float64) time.Duration {
	mult := c.Multiplier
	if mult < 1 {
		mult = 1
	}
	d := float64(c.Initial) * math.Pow(mult, float64(index))
	if c.Max > 0 && d > float64(c.Max) {
		d = float64(c.Max)
	}
	j := math.Min(math.Max(c.Jitter, 0), 1)
	d *= 1 + j*(2*u-1)
	return time.Duration(math.Max(d, 0))
}

// Failure is what ended an attempt, as the retry decision sees it.
type Failure int

const (
	// FailRefused: a leg was refused at submission (its worker left
	// routing, its rank is not registered or stalled): it reached no engine.
	FailRefused Failure = iota
	// FailDied: the engine under a leg died or restarted (its input
	// connection closed, ENGINE_CORE_DEAD, silence, a new HELLO).
	FailDied
	// FailStalled: the stall verdict ended a leg.
	FailStalled
	// FailEnded: tsd ended the leg (a restart, or a drain that gave up).
	FailEnded
	// FailAborted: an engine finished a leg with abort or error (a failed
	// KV transfer or bootstrap, ...).
	FailAborted
	// FailEncode: an encode leg failed or its encoder died holding the
	// embedding.
	FailEncode
	// FailFatal: not worth another attempt (the request itself, the
	// gateway going away, no routable worker within queue_timeout).
	FailFatal
)

func (f Failure) String() string {
	return [...]string{"refused", "died", "stalled", "ended", "aborted", "encode", "fatal"}[f]
}

// Verdict is what the flight does after a failed attempt.
type Verdict int

const (
	// VerdictFail ends the request with the attempt's failure.
	VerdictFail Verdict = iota
	// VerdictRetry sends the request again from scratch (nothing reached
	// the client), both PD legs to a fresh pair with a fresh room and rid.
	VerdictRetry
	// VerdictMigrate continues it on a fresh pair: the prompt plus the
	// tokens sent, the rest of the token budget, into the same response.
	VerdictMigrate
	// VerdictContinue ignores the failure: a prefill leg that fails after
	// the decode streamed tokens has already handed its KV over.
	VerdictContinue
)

func (v Verdict) String() string {
	return [...]string{"fail", "retry", "migrate", "continue"}[v]
}

// Attempted is what the decision needs to know of the request.
type Attempted struct {
	Attempts int // attempts made so far, the failed one included (≥ 1)
	Sent     int // tokens already handed to the client's front end
	// Streaming: the failed attempt's decode already sent tokens, so it
	// holds the KV and its prefill is no longer needed.
	Streaming bool
	Decode    bool          // the failure is the decode leg's
	Left      time.Duration // until the request's deadline
}

// DecideRetry decides what follows a failed attempt and after what delay,
// with why for the log. u is a uniform draw in [0, 1) for the jitter.
func DecideRetry(c RetryConfig, f Failure, a Attempted, u float64) (Verdict, time.Duration, string) {
	if a.Streaming && !a.Decode {
		return VerdictContinue, 0, "the decode already streams: the prefill's failure changes nothing"
	}
	switch {
	case f == FailFatal:
		return VerdictFail, 0, "not retryable"
	case a.Sent > 0 && f == FailAborted:
		return VerdictFail, 0, "the engine aborted the stream after tokens were sent"
	case a.Sent > 0 && !c.Migrate:
		return VerdictFail, 0, "tokens were sent and gateway.retry.migrate is off"
	case a.Attempts >= c.MaxAttempts:
		return VerdictFail, 0, fmt.Sprintf("%d of %d attempts made", a.Attempts, max(c.MaxAttempts, 1))
	}
	d := Backoff(c, a.Attempts-1, u)
	if d >= a.Left {
		return VerdictFail, 0, fmt.Sprintf("the next attempt's backoff (%s) would pass the request deadline", d.Round(time.Millisecond))
	}
	if a.Sent > 0 {
		return VerdictMigrate, d, fmt.Sprintf("the decode leg %s after %d tokens", f, a.Sent)
	}
	return VerdictRetry, d, fmt.Sprintf("a leg %s before the first token", f)
}

// legFailureKind classifies a leg's stream error.
func legFailureKind(err error) Failure {
	switch {
	case errors.Is(err, lane.ErrRankStalled):
		return FailStalled
	case errors.Is(err, lane.ErrRoleAborted):
		return FailEnded
	case errors.Is(err, lane.ErrLaneClosed), errors.Is(err, lane.ErrAborted):
		// The gateway is going away, or ended the leg itself.
		return FailFatal
	}
	// Disconnects, ENGINE_CORE_DEAD, silence, a new HELLO, a send that
	// found the rank gone: the engine under the leg is no longer there.
	return FailDied
}

// submitFailureKind classifies a refusal at submission.
func submitFailureKind(err error) Failure {
	if errors.Is(err, lane.ErrLaneClosed) {
		return FailFatal
	}
	// Not routed, not registered, stalled, a rid clash: a routing race
	// another worker (or the same one a moment later) does not have.
	return FailRefused
}

// blames says whether a failure counts against the worker's breaker:
// engines that die or abort do; a refusal (a routing race), an end tsd
// itself ordered (a restart) and a stall do not: a stalled rank is out of
// routing already and comes back when it speaks again (docs/protocol.md
// §7.5), which a breaker opened by its stalled requests would undo for
// timeout_duration_secs.
func blames(f Failure) bool {
	switch f {
	case FailDied, FailAborted, FailEncode:
		return true
	}
	return false
}

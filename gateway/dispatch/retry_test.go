package dispatch

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/profiles"
)

// DecideRetry, row per case: every failure kind before the first token,
// after it (migration on and off), the attempt bound, the deadline, and a
// prefill failure behind a decode that already streams.
func TestDecideRetry(t *testing.T) {
	t.Parallel()
	c := RetryConfig{MaxAttempts: 3, Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2, Migrate: true}
	noMig := c
	noMig.Migrate = false
	long := time.Hour
	for _, tc := range []struct {
		name  string
		c     RetryConfig
		f     Failure
		a     Attempted
		want  Verdict
		delay time.Duration
	}{
		{"refused before a token: retry", c, FailRefused, Attempted{Attempts: 1, Left: long}, VerdictRetry, 50 * time.Millisecond},
		{"engine died before a token: retry", c, FailDied, Attempted{Attempts: 1, Left: long}, VerdictRetry, 50 * time.Millisecond},
		{"stall verdict before a token: retry", c, FailStalled, Attempted{Attempts: 1, Left: long}, VerdictRetry, 50 * time.Millisecond},
		{"a restart ended it before a token: retry", c, FailEnded, Attempted{Attempts: 1, Left: long}, VerdictRetry, 50 * time.Millisecond},
		{"engine abort (bootstrap) before a token: retry", c, FailAborted, Attempted{Attempts: 1, Left: long}, VerdictRetry, 50 * time.Millisecond},
		{"encode leg failed: retry", c, FailEncode, Attempted{Attempts: 1, Left: long}, VerdictRetry, 50 * time.Millisecond},
		{"second retry backs off longer", c, FailDied, Attempted{Attempts: 2, Left: long}, VerdictRetry, 100 * time.Millisecond},
		{"attempts spent", c, FailDied, Attempted{Attempts: 3, Left: long}, VerdictFail, 0},
		{"max_retries 1 never retries", RetryConfig{MaxAttempts: 1, Migrate: true}, FailDied, Attempted{Attempts: 1, Left: long}, VerdictFail, 0},
		{"zero config (a hand-written plan) never retries", RetryConfig{}, FailDied, Attempted{Attempts: 1, Left: long}, VerdictFail, 0},
		{"fatal is never retried", c, FailFatal, Attempted{Attempts: 1, Left: long}, VerdictFail, 0},
		{"backoff past the deadline", c, FailDied, Attempted{Attempts: 1, Left: 40 * time.Millisecond}, VerdictFail, 0},
		{"decode died after tokens: migrate", c, FailDied, Attempted{Attempts: 1, Sent: 7, Streaming: true, Decode: true, Left: long}, VerdictMigrate, 50 * time.Millisecond},
		{"decode stalled after tokens: migrate", c, FailStalled, Attempted{Attempts: 1, Sent: 7, Streaming: true, Decode: true, Left: long}, VerdictMigrate, 50 * time.Millisecond},
		{"decode ended by a restart after tokens: migrate", c, FailEnded, Attempted{Attempts: 1, Sent: 7, Streaming: true, Decode: true, Left: long}, VerdictMigrate, 50 * time.Millisecond},
		{"after tokens, migration off: fail", noMig, FailDied, Attempted{Attempts: 1, Sent: 7, Streaming: true, Decode: true, Left: long}, VerdictFail, 0},
		{"after tokens, the engine's own abort: fail", c, FailAborted, Attempted{Attempts: 1, Sent: 7, Streaming: true, Decode: true, Left: long}, VerdictFail, 0},
		{"after tokens, attempts spent: fail", c, FailDied, Attempted{Attempts: 3, Sent: 7, Streaming: true, Decode: true, Left: long}, VerdictFail, 0},
		{"prefill fails behind a streaming decode: continue", c, FailDied, Attempted{Attempts: 1, Sent: 7, Streaming: true, Left: long}, VerdictContinue, 0},
		{"prefill fails behind a streaming decode, migration off: continue", noMig, FailDied, Attempted{Attempts: 3, Sent: 7, Streaming: true, Left: long}, VerdictContinue, 0},
		{"a migration's prefill fails before its decode streams: migrate again", c, FailDied, Attempted{Attempts: 2, Sent: 7, Left: long}, VerdictMigrate, 100 * time.Millisecond},
		{"a migration's legs refused: migrate again", c, FailRefused, Attempted{Attempts: 2, Sent: 7, Decode: true, Left: long}, VerdictMigrate, 100 * time.Millisecond},
		{"a migration's encode leg fails: migrate again", c, FailEncode, Attempted{Attempts: 2, Sent: 7, Left: long}, VerdictMigrate, 100 * time.Millisecond},
	} {
		// u = 0.5 is no jitter at all (1 + j(2u-1) = 1).
		v, d, why := DecideRetry(tc.c, tc.f, tc.a, 0.5)
		if v != tc.want || d != tc.delay || why == "" {
			t.Errorf("%s: %s after %s (%q), want %s after %s", tc.name, v, d, why, tc.want, tc.delay)
		}
	}
}

// Backoff is SMG's: initial × multiplier^attempt, capped, then jittered
// within ±jitter; SMG's documented progression with its defaults.
func TestBackoff(t *testing.T) {
	t.Parallel()
	smg := RetryConfigOf(profiles.RetryPlan{MaxRetries: 5, InitialBackoffMS: 50, MaxBackoffMS: 30000, BackoffMultiplier: 1.5, JitterFactor: 0.2})
	for i, want := range []time.Duration{50 * time.Millisecond, 75 * time.Millisecond, 112500 * time.Microsecond, 168750 * time.Microsecond, 253125 * time.Microsecond} {
		if got := Backoff(smg, i, 0.5); got != want {
			t.Errorf("attempt %d: %s, want %s", i, got, want)
		}
	}
	capped := RetryConfig{Initial: 100 * time.Millisecond, Max: 250 * time.Millisecond, Multiplier: 2}
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond} {
		if got := Backoff(capped, i, 0.5); got != want {
			t.Errorf("capped attempt %d: %s, want %s", i, got, want)
		}
	}
	j := RetryConfig{Initial: 400 * time.Millisecond, Max: time.Minute, Multiplier: 1, Jitter: 0.5}
	if lo, hi := Backoff(j, 0, 0), Backoff(j, 0, 0.999999); lo != 200*time.Millisecond || hi < 599*time.Millisecond || hi > 600*time.Millisecond {
		t.Errorf("jitter bounds %s .. %s, want 200ms .. 600ms", lo, hi)
	}
	if d := Backoff(RetryConfig{Initial: 10 * time.Millisecond, Multiplier: 0.5, Jitter: 3}, 3, 0); d != 0 {
		t.Errorf("multiplier < 1 and jitter > 1 are clamped: %s", d)
	}
}

// The lane's errors map onto the failure kinds the decision knows.
func TestFailureKinds(t *testing.T) {
	t.Parallel()
	wrap := func(e error) error { return fmt.Errorf("decode rank 0: %w", e) }
	for _, tc := range []struct {
		err          error
		leg, submit  Failure
		blamesWorker bool
	}{
		{wrap(lane.ErrRankDown), FailDied, FailRefused, true},
		{wrap(lane.ErrEngineDead), FailDied, FailRefused, true},
		{wrap(lane.ErrEngineSilent), FailDied, FailRefused, true},
		{wrap(lane.ErrRankRestarted), FailDied, FailRefused, true},
		{fmt.Errorf("send request: %w", lane.ErrNoPeer), FailDied, FailRefused, true},
		{&lane.StallError{Msg: "decode rank 0 stalled"}, FailStalled, FailRefused, false},
		{fmt.Errorf("%w: restart", lane.ErrRoleAborted), FailEnded, FailRefused, false},
		{wrap(lane.ErrNotRouted), FailDied, FailRefused, true},
		{wrap(lane.ErrLaneClosed), FailFatal, FailFatal, false},
		{lane.ErrAborted, FailFatal, FailRefused, false},
		{errors.New("anything else"), FailDied, FailRefused, true},
	} {
		if got := legFailureKind(tc.err); got != tc.leg {
			t.Errorf("%v on a stream: %s, want %s", tc.err, got, tc.leg)
		}
		if got := submitFailureKind(tc.err); got != tc.submit {
			t.Errorf("%v at submit: %s, want %s", tc.err, got, tc.submit)
		}
		if blames(legFailureKind(tc.err)) != tc.blamesWorker {
			t.Errorf("%v: blames the worker %v, want %v", tc.err, !tc.blamesWorker, tc.blamesWorker)
		}
	}
	if blames(FailRefused) || blames(FailEnded) || blames(FailStalled) || blames(FailFatal) || !blames(FailAborted) || !blames(FailEncode) {
		t.Error("refusals, tsd's own ends, stalls and fatal failures never count against a breaker; engine aborts and encode failures do")
	}
}

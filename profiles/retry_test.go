package profiles

import (
	"strings"
	"testing"
)

// Pins: gateway.retry and gateway.circuit_breaker default to SMG's
// values, carry into the plan as written, and refuse what SMG's config
// validation refuses, naming the file, line and key.
func TestRetryAndBreakerKeys(t *testing.T) {
	t.Parallel()
	roles := "roles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"
	plan := func(t *testing.T, src string) *Plan {
		t.Helper()
		p, errs := Parse("x.yaml", []byte(src))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", src, errs)
		}
		pl, errs := MakePlan(p, fixedFacts())
		if len(errs) > 0 {
			t.Fatalf("%s: %v", src, errs)
		}
		return pl
	}
	def := plan(t, "model: m\n"+roles).Gateway
	if want := (RetryPlan{MaxRetries: 5, InitialBackoffMS: 50, MaxBackoffMS: 30000, BackoffMultiplier: 1.5, JitterFactor: 0.2, Migrate: true}); def.Retry != want {
		t.Errorf("retry defaults %+v, want %+v", def.Retry, want)
	}
	if want := (CircuitBreakerPlan{FailureThreshold: 10, SuccessThreshold: 3, TimeoutDurationSecs: 60, WindowDurationSecs: 120}); def.CircuitBreaker != want {
		t.Errorf("circuit_breaker defaults %+v, want %+v", def.CircuitBreaker, want)
	}
	set := plan(t, "model: m\ngateway:\n  retry: {max_retries: 1, initial_backoff_ms: 10, max_backoff_ms: 10, backoff_multiplier: 1, jitter_factor: 0, migrate: false}\n"+
		"  circuit_breaker: {failure_threshold: 2, success_threshold: 1, timeout_duration_secs: 1, window_duration_secs: 5}\n"+roles).Gateway
	if want := (RetryPlan{MaxRetries: 1, InitialBackoffMS: 10, MaxBackoffMS: 10, BackoffMultiplier: 1}); set.Retry != want {
		t.Errorf("retry %+v, want %+v", set.Retry, want)
	}
	if want := (CircuitBreakerPlan{FailureThreshold: 2, SuccessThreshold: 1, TimeoutDurationSecs: 1, WindowDurationSecs: 5}); set.CircuitBreaker != want {
		t.Errorf("circuit_breaker %+v, want %+v", set.CircuitBreaker, want)
	}
	for _, c := range []struct{ yaml, want string }{
		{"retry: {max_retries: 0}", "x.yaml:3:11: gateway.retry.max_retries: must be between 1 and 100, got 0"},
		{"retry: {backoff_multiplier: 0.5}", "gateway.retry.backoff_multiplier: must be between 1 and 100, got 0.5"},
		{"retry: {jitter_factor: 1.5}", "gateway.retry.jitter_factor: must be between 0 and 1, got 1.5"},
		{"retry: {jitter_factor: lots}", `gateway.retry.jitter_factor: must be a number, got "lots"`},
		{"retry: {initial_backoff_ms: 500, max_backoff_ms: 100}", "gateway.retry: max_backoff_ms (100) is below initial_backoff_ms (500)"},
		{"retry: {max_retrys: 3}", `gateway.retry.max_retrys: unknown key (did you mean "max_retries"?)`},
		{"circuit_breaker: {failure_threshold: 0}", "gateway.circuit_breaker.failure_threshold: must be between 1 and 1000000, got 0"},
		{"circuit_breaker: {timeout_duration_secs: 0}", "gateway.circuit_breaker.timeout_duration_secs: must be between 1 and 86400, got 0"},
		{"circuit_breaker: {window: 5}", "gateway.circuit_breaker.window: unknown key"},
	} {
		src := "model: m\ngateway:\n  " + c.yaml + "\n" + roles
		_, errs := Parse("x.yaml", []byte(src))
		if errs == nil || !strings.Contains(errs.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.yaml, errs, c.want)
		}
	}
}

package tui

import (
	"fmt"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// The gateway's circuit breaker of a role (docs/protocol.md §11.9): a
// marker after the role row's state while it is not closed, and a line in
// the rank inspector.

// breakerOf is role's breaker in the snapshot; false when the gateway
// keeps none (breakers off, or not a routed role).
func breakerOf(s *snapshot.Snapshot, role string) (snapshot.BreakerStatus, bool) {
	if role == "" {
		return snapshot.BreakerStatus{}, false
	}
	for _, b := range s.Gateway.Breakers {
		if b.Role == role {
			return b, true
		}
	}
	return snapshot.BreakerStatus{}, false
}

// breakerMark is what the role row adds to its state: nothing while the
// breaker is closed.
func breakerMark(s *snapshot.Snapshot, role string) string {
	b, ok := breakerOf(s, role)
	switch {
	case !ok:
		return ""
	case b.State == snapshot.BreakerOpen:
		return " · breaker open"
	case b.State == snapshot.BreakerHalfOpen:
		return " · breaker half-open"
	}
	return ""
}

// breakerLine is the inspector's line for role's breaker, "" without one.
func breakerLine(s *snapshot.Snapshot, role string, now time.Time) string {
	b, ok := breakerOf(s, role)
	if !ok {
		return ""
	}
	l := "  circuit breaker " + b.State
	switch b.State {
	case snapshot.BreakerOpen:
		l += " for " + humanDuration(now.Sub(b.Since).Round(time.Second))
		if !b.Until.IsZero() {
			l += " · half-open in " + countdown(b.Until, now)
		}
	case snapshot.BreakerHalfOpen:
		l += fmt.Sprintf(" · %d successes so far", b.Successes)
	default:
		l += fmt.Sprintf(" · %d failures in a row", b.Failures)
	}
	if b.Reason != "" {
		l += " (" + b.Reason + ")"
	}
	if b.Opened > 0 {
		l += fmt.Sprintf(" · opened %d× since it registered", b.Opened)
	}
	return l
}

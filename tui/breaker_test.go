package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// A role whose circuit breaker is not closed says so after its state on
// its row and in the inspector; closed breakers add nothing to the row.
func TestBreakerMarker(t *testing.T) {
	t.Parallel()
	s := deployment()
	s.Gateway.Breakers = []snapshot.BreakerStatus{
		{Role: s.Roles[1].Name, State: snapshot.BreakerClosed, Since: t0},
		{Role: s.Roles[2].Name, State: snapshot.BreakerOpen, Failures: 10, Since: t0.Add(-5 * time.Second), Until: t0.Add(55 * time.Second), Reason: "10 failures in a row", Opened: 1},
		{Role: s.Roles[3].Name, State: snapshot.BreakerHalfOpen, Successes: 1, Since: t0},
	}
	m, _ := newTestModel(t, 160, 40, s)
	screen := plain(m)
	lineOf := func(role string) string {
		for _, l := range strings.Split(screen, "\n") {
			if strings.Contains(l, role+" ") {
				return l
			}
		}
		t.Fatalf("no row for %s:\n%s", role, screen)
		return ""
	}
	if l := lineOf(s.Roles[1].Name); strings.Contains(l, "breaker") {
		t.Errorf("a closed breaker marks the row: %q", l)
	}
	if l := lineOf(s.Roles[2].Name); !strings.Contains(l, "breaker open") {
		t.Errorf("open breaker not on its row: %q", l)
	}
	if l := lineOf(s.Roles[3].Name); !strings.Contains(l, "breaker half-open") {
		t.Errorf("half-open breaker not on its row: %q", l)
	}
	if got := breakerLine(&s, s.Roles[2].Name, t0); got != "  circuit breaker open for 5s · half-open in 55s (10 failures in a row) · opened 1× since it registered" {
		t.Errorf("inspector line %q", got)
	}
	if got := breakerLine(&s, s.Roles[0].Name, t0); got != "" {
		t.Errorf("a role without a breaker: %q", got)
	}
	press(m, "down", "down", "enter")
	if !strings.Contains(plain(m), "circuit breaker open") {
		t.Errorf("the inspector of %s lacks its breaker:\n%s", m.inspector.role, plain(m))
	}
}

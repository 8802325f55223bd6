package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// StepBreaker over every (state, event) pair, plus the edges: the
// thresholds, the window, an early (stale) timer and outcomes that arrive
// while open.
func TestStepBreaker(t *testing.T) {
	t.Parallel()
	cfg := BreakerConfig{FailureThreshold: 3, SuccessThreshold: 2, Timeout: 10 * time.Second, Window: time.Minute}
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	closed := func(fails int, run time.Time) Breaker {
		return Breaker{State: snapshot.BreakerClosed, Failures: fails, RunStart: run, Since: t0}
	}
	open := Breaker{State: snapshot.BreakerOpen, Since: t0, Opened: 1, Reason: "3 failures in a row", Failures: 3, RunStart: t0}
	half := func(succ int) Breaker {
		return Breaker{State: snapshot.BreakerHalfOpen, Since: at(10), Successes: succ, Opened: 1, Reason: "open for 10s"}
	}
	rows := []struct {
		name    string
		b       Breaker
		ev      BreakerEvent
		now     time.Time
		want    Breaker
		changed bool
	}{
		// closed
		{"closed success clears the run", closed(2, t0), BreakerSuccess, at(1), closed(0, time.Time{}), false},
		{"closed first failure starts a run", closed(0, time.Time{}), BreakerFailure, at(1), closed(1, at(1)), false},
		{"closed failure inside the window adds to the run", closed(1, at(1)), BreakerFailure, at(30), closed(2, at(1)), false},
		{"closed failure past the window starts a new run", closed(2, at(1)), BreakerFailure, at(62), closed(1, at(62)), false},
		{"closed threshold-th failure opens", closed(2, at(1)), BreakerFailure, at(5),
			Breaker{State: snapshot.BreakerOpen, Failures: 3, RunStart: at(1), Since: at(5), Opened: 1, Reason: "3 failures in a row"}, true},
		{"closed timeout is nothing", closed(1, at(1)), BreakerTimeout, at(100), closed(1, at(1)), false},
		{"closed registered: a new worker", closed(2, at(1)), BreakerRegistered, at(7), Breaker{State: snapshot.BreakerClosed, Since: at(7)}, false},
		{"zero value is closed", Breaker{}, BreakerFailure, at(1), Breaker{State: snapshot.BreakerClosed, Failures: 1, RunStart: at(1)}, false},
		// open
		{"open success (sent before it opened) changes nothing", open, BreakerSuccess, at(2), open, false},
		{"open failure does not extend the open time", open, BreakerFailure, at(2), open, false},
		{"open early timer is stale", open, BreakerTimeout, at(9), open, false},
		{"open timeout goes half-open", open, BreakerTimeout, at(10), half(0), true},
		{"open registered: a new worker, closed", open, BreakerRegistered, at(3),
			Breaker{State: snapshot.BreakerClosed, Since: at(3), Reason: "the worker registered anew"}, true},
		// half-open
		{"half-open success counts", half(0), BreakerSuccess, at(11), half(1), false},
		{"half-open success_threshold-th success closes", half(1), BreakerSuccess, at(12),
			Breaker{State: snapshot.BreakerClosed, Since: at(12), Opened: 1, Reason: "2 successes in a row while half-open"}, true},
		{"half-open failure opens again", half(1), BreakerFailure, at(12),
			Breaker{State: snapshot.BreakerOpen, Since: at(12), Opened: 2, Reason: "a request failed while half-open"}, true},
		{"half-open timeout is nothing", half(1), BreakerTimeout, at(50), half(1), false},
		{"half-open registered: closed", half(1), BreakerRegistered, at(13),
			Breaker{State: snapshot.BreakerClosed, Since: at(13), Reason: "the worker registered anew"}, true},
	}
	covered := map[string]bool{}
	for _, tc := range rows {
		covered[tc.b.state()+"/"+tc.ev.String()] = true
		got, changed := StepBreaker(tc.b, tc.ev, tc.now, cfg)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || changed != tc.changed {
			t.Errorf("%s:\n got %+v changed=%v\nwant %+v changed=%v", tc.name, got, changed, tc.want, tc.changed)
		}
	}
	// Every (state, event) pair has a row above.
	for _, s := range []string{snapshot.BreakerClosed, snapshot.BreakerOpen, snapshot.BreakerHalfOpen} {
		for ev := BreakerSuccess; ev <= BreakerRegistered; ev++ {
			if !covered[s+"/"+ev.String()] {
				t.Errorf("no row for %s on %s", s, ev)
			}
		}
	}
	if open.Allows() || !half(0).Allows() || !closed(5, t0).Allows() || !(Breaker{}).Allows() {
		t.Error("Allows: only an open breaker refuses")
	}
}

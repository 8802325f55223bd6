package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The whole deployment's stop (`tsd stop`, the dashboard's quit with s, a
// signal to the daemon) drains like a restart (docs/architecture.md §5):
// the gateway stops taking requests and lets those in flight finish for
// the profile's restart.drain_timeout (PlanDrain; `tsd stop --timeout`
// changes it, `--now` skips it), then cuts the rest with a clean error,
// and only then do the engines stop. Snapshot.Stopping says where it is;
// `tsd stop` follows it (serveStop) and says at the end how many requests
// finished and how many were cut.

// unbindGrace bounds the gateway's unbinding once its drain is over.
const unbindGrace = 10 * time.Second

// PlanDrain is how long a whole stop of plan waits for requests in
// flight: the longest restart.drain_timeout of its local roles (the
// profile's, unless a role sets its own).
func PlanDrain(plan *profiles.Plan) time.Duration {
	d := time.Duration(0)
	for _, r := range plan.Roles {
		if r.Local {
			d = max(d, r.Restart.DrainTimeout.D())
		}
	}
	if d <= 0 {
		return profiles.DefaultDrainTimeout
	}
	return d
}

// stopper owns the whole deployment's stop: the request (Shutdown, or
// ShutdownDrain with its limit), the cut a second Ctrl-C makes (Kill),
// where the stop is (Snapshot.Stopping) and its end.
type stopper struct {
	drain    atomic.Pointer[time.Duration] // tsd stop's limit; nil: Options', else the plan's
	askOnce  sync.Once
	asked    chan struct{} // closed by the first stop request
	killOnce sync.Once
	killed   chan struct{} // closed by Kill: a drain under way cuts at once
	status   atomic.Pointer[snapshot.StopStatus]
	done     chan struct{} // closed once every role has stopped, before the control socket closes
	grace    time.Duration // Options.ShutdownGrace
}

func newStopper(grace time.Duration) *stopper {
	return &stopper{asked: make(chan struct{}), killed: make(chan struct{}), done: make(chan struct{}), grace: grace}
}

// shutdown asks Run to tear everything down.
func (st *stopper) shutdown() { st.askOnce.Do(func() { close(st.asked) }) }

// shutdownDrain is shutdown with the gateway's drain bounded by d (0: no
// drain); the first stop's limit holds.
func (st *stopper) shutdownDrain(d time.Duration) {
	d = max(d, 0)
	st.drain.CompareAndSwap(nil, &d)
	st.shutdown()
}

// kill cuts a drain under way.
func (st *stopper) kill() { st.killOnce.Do(func() { close(st.killed) }) }

// limit is the drain of this stop of plan: tsd stop's, else Options',
// else the plan's.
func (st *stopper) limit(plan *profiles.Plan) time.Duration {
	if d := st.drain.Load(); d != nil {
		return *d
	}
	if st.grace > 0 {
		return st.grace
	}
	return PlanDrain(plan)
}

// shuttingDown is closed once a stop was asked for; stopped once every
// role has stopped; progress says where the stop is (nil before it).
func (st *stopper) shuttingDown() <-chan struct{}  { return st.asked }
func (st *stopper) stopped() <-chan struct{}       { return st.done }
func (st *stopper) progress() *snapshot.StopStatus { return st.status.Load() }

// drainGateway drains the gateway (Run's teardown): new requests are
// refused, requests in flight get until the drain's deadline (a Kill cuts
// it short), then the rest are cut; then it unbinds. Snapshot.Stopping
// shows each step; event records its lines.
func (st *stopper) drainGateway(gw Gateway, plan *profiles.Plan, now time.Time, event func(role, msg string)) {
	if gw == nil {
		st.status.Store(&snapshot.StopStatus{Phase: snapshot.StopStopping, Started: now})
		return
	}
	limit := st.limit(plan)
	cur := snapshot.StopStatus{Phase: snapshot.StopDraining, Started: now, Deadline: now.Add(limit), InFlight: gw.Status().InFlight}
	st.status.Store(&cur)
	event("", drainBegins(cur.InFlight, limit))
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	go func() {
		select {
		case <-st.killed:
			cancel()
		case <-ctx.Done():
		}
	}()
	res := gw.Drain(ctx)
	cancel()
	done := cur
	done.Phase, done.InFlight, done.Drain = snapshot.StopStopping, 0, res
	st.status.Store(&done)
	event("", DrainSummary(res, limit))
	sctx, cancelUnbind := context.WithTimeout(context.Background(), unbindGrace)
	if err := gw.Shutdown(sctx); err != nil {
		event("", "gateway shutdown: "+err.Error())
	}
	cancelUnbind()
}

// drainBegins is the event a drain starts with.
func drainBegins(inflight int, limit time.Duration) string {
	if limit <= 0 {
		return fmt.Sprintf("stopping: no drain, %s in flight cut now", requests(inflight))
	}
	return fmt.Sprintf("stopping: draining %s in flight, up to %s", requests(inflight), HumanDuration(limit))
}

// DrainSummary says what a stop's drain did: "all 3 requests in flight
// finished", "2 requests finished, 1 cut when the drain of 30s ended".
func DrainSummary(r snapshot.DrainResult, limit time.Duration) string {
	switch {
	case r.InFlight == 0 && r.Finished == 0 && r.Cut == 0:
		return "drained: no request was in flight"
	case r.Cut == 0:
		return fmt.Sprintf("drained: %s finished, none cut", requests(r.Finished))
	case limit <= 0:
		return fmt.Sprintf("drain skipped (--now): %s finished, %d cut", requests(r.Finished), r.Cut)
	}
	return fmt.Sprintf("drain of %s ended: %s finished, %d cut (ended with error code shutdown)", HumanDuration(limit), requests(r.Finished), r.Cut)
}

// requests is "1 request" or "3 requests".
func requests(n int) string {
	if n == 1 {
		return "1 request"
	}
	return fmt.Sprintf("%d requests", n)
}

// stopQuery is the drain a control "stop" of the whole deployment asks
// for: now=1 none, timeout=D that long, else the plan's (ok false).
func stopQuery(now, timeout string) (d time.Duration, ok bool, err error) {
	if now == "1" {
		return 0, true, nil
	}
	if timeout == "" {
		return 0, false, nil
	}
	d, err = time.ParseDuration(timeout)
	if err != nil || d < 0 {
		return 0, false, fmt.Errorf("stop: timeout %q is not a duration of 0 or more", timeout)
	}
	return d, true, nil
}

// stopLine is the drain's end as serveStop streams it ("drained {…}").
type stopLine struct {
	Drain   snapshot.DrainResult `json:"drain"`
	LimitMS int64                `json:"limit_ms"`
}

// StopLine reads a "drained {…}" line of a followed stop: the drain's
// counts and its limit.
func StopLine(l string) (snapshot.DrainResult, time.Duration, bool) {
	js, ok := strings.CutPrefix(l, "drained ")
	if !ok {
		return snapshot.DrainResult{}, 0, false
	}
	var v stopLine
	if json.Unmarshal([]byte(js), &v) != nil {
		return snapshot.DrainResult{}, 0, false
	}
	return v.Drain, time.Duration(v.LimitMS) * time.Millisecond, true
}

package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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

// ShutdownDrain asks Run to tear everything down, as Shutdown does, with
// the gateway's drain bounded by d instead of the plan's drain_timeout
// (0: no drain, requests in flight are cut at once).
func (s *Supervisor) ShutdownDrain(d time.Duration) {
	d = max(d, 0)
	s.stopDrain.CompareAndSwap(nil, &d) // the first stop's limit holds
	s.Shutdown()
}

// drainLimit is the drain of this stop: tsd stop's, else Options', else
// the plan's.
func (s *Supervisor) drainLimit() time.Duration {
	if d := s.stopDrain.Load(); d != nil {
		return *d
	}
	if s.opts.ShutdownGrace > 0 {
		return s.opts.ShutdownGrace
	}
	return PlanDrain(s.Plan())
}

// drainGateway drains the gateway (Run's teardown): new requests are
// refused, requests in flight get until the drain's deadline (a Kill cuts
// it short), then the rest are cut; then it unbinds. Snapshot.Stopping
// shows each step.
func (s *Supervisor) drainGateway() {
	start := s.now()
	if s.gw == nil {
		s.stopping.Store(&snapshot.StopStatus{Phase: snapshot.StopStopping, Started: start})
		return
	}
	limit := s.drainLimit()
	st := snapshot.StopStatus{Phase: snapshot.StopDraining, Started: start, Deadline: start.Add(limit), InFlight: s.gw.Status().InFlight}
	s.stopping.Store(&st)
	s.pub.event("", drainBegins(st.InFlight, limit))
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	go func() {
		select {
		case <-s.killCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	res := s.gw.Drain(ctx)
	cancel()
	done := st
	done.Phase, done.InFlight, done.Drain = snapshot.StopStopping, 0, res
	s.stopping.Store(&done)
	s.pub.event("", DrainSummary(res, limit))
	sctx, cancelUnbind := context.WithTimeout(context.Background(), unbindGrace)
	if err := s.gw.Shutdown(sctx); err != nil {
		s.pub.event("", "gateway shutdown: "+err.Error())
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

// serveStop stops the whole deployment and, with follow=1, answers as it
// goes: a line when the drain begins and when it ends, then "stopped" once
// every role has stopped (just before the control socket closes), so
// `tsd stop` can say what its stop did. Without follow it answers "ok" at
// once, as before.
func (s *Supervisor) serveStop(w http.ResponseWriter, r *http.Request, quit <-chan struct{}) {
	q := r.URL.Query()
	d, set, err := stopQuery(q.Get("now"), q.Get("timeout"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if set {
		s.ShutdownDrain(d)
	} else {
		s.Shutdown()
	}
	if q.Get("follow") != "1" {
		fmt.Fprintln(w, "ok")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fl, _ := w.(http.Flusher)
	line := func(msg string) {
		fmt.Fprintln(w, msg)
		if fl != nil {
			fl.Flush()
		}
	}
	line("stopping " + s.Plan().Name)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	told := false
	tell := func() {
		if st := s.stopping.Load(); !told && st != nil && st.Phase == snapshot.StopStopping {
			told = true
			b, _ := json.Marshal(stopLine{Drain: st.Drain, LimitMS: s.drainLimit().Milliseconds()})
			line("drained " + string(b))
		}
	}
	for {
		tell()
		select {
		case <-s.stopDone:
			tell() // the stop's phase was set before stopDone closed
			line("stopped")
			return
		case <-quit:
			return
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
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

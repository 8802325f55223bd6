package dispatch

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

var onePTwoD = [][2]string{{"prefill", profiles.KindPrefill}, {"decode-0", profiles.KindDecode}, {"decode-1", profiles.KindDecode}}

func withRetry(migrate bool, attempts int) func(*profiles.GatewayPlan) {
	return func(g *profiles.GatewayPlan) {
		g.Retry = profiles.RetryPlan{MaxRetries: attempts, InitialBackoffMS: 1, MaxBackoffMS: 5, BackoffMultiplier: 2, JitterFactor: 0.2, Migrate: migrate}
	}
}

func (fl *fakeLane) other(r *fakeRank) *fakeRank {
	if r.role == "decode-0" {
		return fl.ranks["decode-1"]
	}
	return fl.ranks["decode-0"]
}

func attempts(m *Metrics, f Failure, v Verdict) float64 {
	return testutil.ToFloat64(m.Attempts.WithLabelValues(f.String(), v.String()))
}

// A decode that dies before the first token: both legs go again, to the
// other decode, under a fresh rid and bootstrap room; the client gets one
// clean stream with every token it asked for.
func TestRetryBeforeFirstToken(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, withRetry(true, 3), onePTwoD...)
	events, err := fl.d.Generate(context.Background(), request(4, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	p1 := pre.next()
	dead, d1 := fl.decodeOf("decode-0", "decode-1")
	if d1.RID != p1.RID || roomOf(d1) != roomOf(p1) || !strings.HasPrefix(p1.RID, "req-") {
		t.Fatalf("first pair: prefill %s room %s, decode %s room %s", p1.RID, roomOf(p1), d1.RID, roomOf(d1))
	}
	fl.kill(dead.role)

	p2 := pre.next()
	alive := fl.other(dead)
	d2 := alive.next()
	if p2.RID == p1.RID || roomOf(p2) == roomOf(p1) || d2.RID != p2.RID || roomOf(d2) != roomOf(p2) {
		t.Fatalf("retry reused the dead attempt's rid or room: %s/%s then %s/%s (decode %s/%s)", p1.RID, roomOf(p1), p2.RID, roomOf(p2), d2.RID, roomOf(d2))
	}
	if !slices.Equal(p2.InputIDs, p1.InputIDs) || *p2.Sampling.MaxNewTokens != 4 {
		t.Fatalf("a retry sends the request as it was: %v max %d", p2.InputIDs, *p2.Sampling.MaxNewTokens)
	}
	pre.prefillDone(p2)
	alive.emit(d2.RID, 4, []int32{1, 5}, nil, "", 2)
	alive.emit(d2.RID, 4, []int32{6, 7}, nil, wire.FinishLength, 4)
	toks, _, last, errs := collect(t, events)
	if len(errs) > 0 || !slices.Equal(toks, []int32{1, 5, 6, 7}) || last.Finish == nil || last.Finish.Reason != tokenapi.FinishLength || last.OutputTokens != 4 || last.PromptTokens != 4 {
		t.Fatalf("client saw %v, last %+v, errors %v", toks, last, errs)
	}
	if n := attempts(fl.m, FailDied, VerdictRetry); n != 1 {
		t.Fatalf("died/retry counted %v times", n)
	}
	if n := testutil.ToFloat64(fl.m.ReqErrors.WithLabelValues("decode_failed")); n != 0 {
		t.Fatalf("a retried failure counted as a request error: %v", n)
	}
	dead.none()
	alive.none()
}

// A decode that dies after tokens went out: the request continues on the
// other decode, prefilled with the prompt plus the tokens sent, for the
// rest of max_new_tokens and min_tokens; the client's stream goes on with
// its counts, logprobs and prompt_tokens unbroken.
func TestMigrateAfterTokens(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, withRetry(true, 3), onePTwoD...)
	events, err := fl.d.Generate(context.Background(), request(6, 4, true))
	if err != nil {
		t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	p1 := pre.next()
	pre.prefillDone(p1)
	dead, d1 := fl.decodeOf("decode-0", "decode-1")
	dead.emit(d1.RID, 4, []int32{1}, []float64{-0.1}, "", 1)
	if ev := event(t, events); !slices.Equal(ev.TokenIDs, []int32{1}) || ev.PromptTokens != 4 || ev.OutputTokens != 1 {
		t.Fatalf("first event %+v", ev)
	}
	dead.emit(d1.RID, 4, []int32{21, 22}, []float64{-0.2, -0.3}, "", 3)
	if ev := event(t, events); !slices.Equal(ev.TokenIDs, []int32{21, 22}) || ev.OutputTokens != 3 {
		t.Fatalf("second event %+v", ev)
	}
	fl.kill(dead.role)

	p2 := pre.next()
	alive := fl.other(dead)
	d2 := alive.next()
	want := []int32{11, 12, 13, 14, 1, 21, 22}
	if !slices.Equal(p2.InputIDs, want) || !slices.Equal(d2.InputIDs, want) {
		t.Fatalf("migration prompt: prefill %v decode %v, want %v", p2.InputIDs, d2.InputIDs, want)
	}
	if *p2.Sampling.MaxNewTokens != 3 || p2.Sampling.MinNewTokens != 1 || !p2.ReturnLogprob {
		t.Fatalf("migration budget: max %d min %d logprobs %v, want 3, 1, true", *p2.Sampling.MaxNewTokens, p2.Sampling.MinNewTokens, p2.ReturnLogprob)
	}
	if p2.RID == p1.RID || roomOf(p2) == roomOf(p1) || d2.RID != p2.RID {
		t.Fatalf("migration reused rid or room: %s/%s then %s/%s", p1.RID, roomOf(p1), p2.RID, roomOf(p2))
	}
	pre.prefillDone(p2)
	alive.emit(d2.RID, 7, []int32{31}, []float64{-0.4}, "", 1)
	alive.emit(d2.RID, 7, []int32{32, 33}, []float64{-0.5, -0.6}, wire.FinishLength, 3)
	toks, lps, last, errs := collect(t, events)
	if len(errs) > 0 || !slices.Equal(toks, []int32{31, 32, 33}) || !slices.Equal(lps, []float64{-0.4, -0.5, -0.6}) {
		t.Fatalf("after the seam: %v %v errors %v", toks, lps, errs)
	}
	if last.Finish == nil || last.Finish.Reason != tokenapi.FinishLength || last.OutputTokens != 6 || last.PromptTokens != 4 {
		t.Fatalf("last event %+v: want length, 6 completion tokens, the client's 4 prompt tokens", last)
	}
	if n := attempts(fl.m, FailDied, VerdictMigrate); n != 1 {
		t.Fatalf("died/migrate counted %v times", n)
	}
}

// With gateway.retry.migrate off, nothing is sent again once a token went
// out: the client sees the decode's failure.
func TestNoRetryAfterTokensWithoutMigration(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, withRetry(false, 5), onePTwoD...)
	events, err := fl.d.Generate(context.Background(), request(6, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	pre.prefillDone(pre.next())
	dead, d1 := fl.decodeOf("decode-0", "decode-1")
	dead.emit(d1.RID, 4, []int32{1, 2}, nil, "", 2)
	event(t, events)
	fl.kill(dead.role)
	toks, _, _, errs := collect(t, events)
	if len(toks) != 0 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "decode leg failed") {
		t.Fatalf("after the kill: tokens %v errors %v", toks, errs)
	}
	pre.none()
	fl.other(dead).none()
	if n := attempts(fl.m, FailDied, VerdictFail); n != 1 {
		t.Fatalf("died/fail counted %v times", n)
	}
}

// Retries stop at max_retries attempts: the failure of the last one is
// what the client sees.
func TestRetriesBoundedByMaxRetries(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, withRetry(true, 2), onePTwoD...)
	events, err := fl.d.Generate(context.Background(), request(4, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	pre.next()
	first, _ := fl.decodeOf("decode-0", "decode-1")
	fl.kill(first.role)
	pre.next()
	second := fl.other(first)
	second.next()
	fl.kill(second.role)
	toks, _, _, errs := collect(t, events)
	if len(toks) != 0 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "decode leg failed") || !strings.Contains(errs[0].Error(), second.role) {
		t.Fatalf("after two attempts: tokens %v errors %v", toks, errs)
	}
	pre.none()
	if r, f := attempts(fl.m, FailDied, VerdictRetry), attempts(fl.m, FailDied, VerdictFail); r != 1 || f != 1 {
		t.Fatalf("retry %v fail %v, want 1 and 1", r, f)
	}
	if n := testutil.ToFloat64(fl.m.ReqErrors.WithLabelValues("decode_failed")); n != 1 {
		t.Fatalf("the request's failure counted %v times", n)
	}
}

// An engine's abort before any token (a failed KV transfer, say) is worth
// another pair; once tokens went out the client sees it.
func TestEngineAbortRetriedOnlyBeforeTokens(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, withRetry(true, 3), onePTwoD...)
	events, err := fl.d.Generate(context.Background(), request(3, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	pre.prefillDone(pre.next())
	first, d1 := fl.decodeOf("decode-0", "decode-1")
	first.emit(d1.RID, 4, nil, nil, wire.FinishAbort, 0)
	p2 := pre.next()
	pre.prefillDone(p2)
	second := fl.other(first)
	d2 := second.next()
	second.emit(d2.RID, 4, []int32{4}, nil, "", 1)
	event(t, events)
	second.emit(d2.RID, 4, []int32{5}, nil, wire.FinishAbort, 2)
	toks, _, last, errs := collect(t, events)
	if len(errs) != 0 || !slices.Equal(toks, []int32{5}) || last.Finish == nil || last.Finish.Reason != tokenapi.FinishAbort {
		t.Fatalf("an abort after tokens: %v, last %+v, errors %v", toks, last, errs)
	}
	pre.none()
	first.none()
	if r, f := attempts(fl.m, FailAborted, VerdictRetry), attempts(fl.m, FailAborted, VerdictFail); r != 1 || f != 1 {
		t.Fatalf("aborted/retry %v, aborted/fail %v", r, f)
	}
}

// A prefill that dies after its decode streamed has handed its KV over:
// the stream goes on, nothing is sent again.
func TestPrefillDeathBehindStreamingDecode(t *testing.T) {
	t.Parallel()
	// The breaker is only the test's window on the flight: the prefill's
	// failure counts on it when the flight has decided what follows.
	fl := newFakeLane(t, func(g *profiles.GatewayPlan) {
		withRetry(true, 3)(g)
		g.CircuitBreaker = profiles.CircuitBreakerPlan{FailureThreshold: 100, SuccessThreshold: 1, TimeoutDurationSecs: 60, WindowDurationSecs: 60}
	}, onePTwoD...)
	events, err := fl.d.Generate(context.Background(), request(3, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	pre.next() // never answered: it dies still "sending"
	dec, q := fl.decodeOf("decode-0", "decode-1")
	dec.emit(q.RID, 4, []int32{1}, nil, "", 1)
	event(t, events)
	fl.kill("prefill")
	waitFailures(t, fl.d, "prefill", 1)
	dec.emit(q.RID, 4, []int32{2, 3}, nil, wire.FinishLength, 3)
	toks, _, last, errs := collect(t, events)
	if len(errs) != 0 || !slices.Equal(toks, []int32{2, 3}) || last.Finish == nil || last.Finish.Reason != tokenapi.FinishLength {
		t.Fatalf("after the prefill's death: %v last %+v errors %v", toks, last, errs)
	}
	fl.other(dec).none()
	if n := attempts(fl.m, FailDied, VerdictContinue); n != 1 {
		t.Fatalf("died/continue counted %v times", n)
	}
}

// A request queued for a decode while none is routable is dispatched as
// soon as one registers; a retry waits for one the same way.
func TestRetryWaitsForARoutableDecode(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, withRetry(true, 3), [][2]string{{"prefill", profiles.KindPrefill}, {"decode", profiles.KindDecode}}...)
	events, err := fl.d.Generate(context.Background(), request(2, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	pre.next()
	fl.ranks["decode"].next()
	fl.kill("decode")
	dec := fl.dial("decode") // the restarted engine: a new worker
	p2 := pre.next()
	pre.prefillDone(p2)
	d2 := dec.next()
	dec.emit(d2.RID, 4, []int32{8, 9}, nil, wire.FinishLength, 2)
	toks, _, last, errs := collect(t, events)
	if len(errs) != 0 || !slices.Equal(toks, []int32{8, 9}) || last.Finish == nil {
		t.Fatalf("after the restart: %v last %+v errors %v", toks, last, errs)
	}
}

func breakerOf(d *Dispatcher, role string) snapshot.BreakerStatus {
	for _, b := range d.Breakers() {
		if b.Role == role {
			return b
		}
	}
	return snapshot.BreakerStatus{}
}

// waitBreaker waits, on the book's own change signal, until role's
// breaker is in state.
func waitBreaker(t *testing.T, d *Dispatcher, role, state string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		v := d.breakers.current()
		if breakerOf(d, role).State == state {
			return
		}
		select {
		case <-v.changed():
		case <-deadline:
			t.Fatalf("%s breaker %+v, want %s", role, breakerOf(d, role), state)
		}
	}
}

// serve answers one whole request: whichever decode it lands on serves it
// unless that decode is bad, which aborts it (before any token: the
// request is retried on the other).
func (fl *fakeLane) serve(bad string) (served string) {
	fl.t.Helper()
	events, err := fl.d.Generate(context.Background(), request(1, 0, false))
	if err != nil {
		fl.t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	for {
		pre.prefillDone(pre.next())
		dec, q := fl.decodeOf("decode-0", "decode-1")
		if dec.role == bad {
			dec.emit(q.RID, 4, nil, nil, wire.FinishAbort, 0)
			continue
		}
		dec.emit(q.RID, 4, []int32{3}, nil, wire.FinishLength, 1)
		if _, _, last, errs := collect(fl.t, events); len(errs) > 0 || last.Finish == nil || last.Finish.Reason != tokenapi.FinishLength {
			fl.t.Fatalf("request on %s: last %+v errors %v", dec.role, last, errs)
		}
		return dec.role
	}
}

// A flapping decode (it aborts what it gets) opens its breaker after
// failure_threshold failures: routing leaves it alone, its requests were
// retried on the other decode; after timeout_duration_secs it is
// half-open, admitted again, and success_threshold successes close it.
func TestBreakerOpensAndCloses(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, func(g *profiles.GatewayPlan) {
		withRetry(true, 3)(g)
		g.CircuitBreaker = profiles.CircuitBreakerPlan{FailureThreshold: 2, SuccessThreshold: 1, TimeoutDurationSecs: 1, WindowDurationSecs: 60}
	}, onePTwoD...)
	if b := breakerOf(fl.d, "decode-0"); b.State != snapshot.BreakerClosed {
		t.Fatalf("breaker at start %+v", b)
	}
	// The book applies outcomes on its own goroutine, so a request may
	// still find decode-0 closed after its second failure: it fails there
	// too and is retried, which changes nothing of an open breaker.
	for breakerOf(fl.d, "decode-0").State == snapshot.BreakerClosed {
		fl.serve("decode-0")
	}
	waitBreaker(t, fl.d, "decode-0", snapshot.BreakerOpen)
	if b := breakerOf(fl.d, "decode-0"); b.Reason != "2 failures in a row" || b.Until.IsZero() || b.Opened != 1 {
		t.Fatalf("open breaker %+v", b)
	}
	// Open: every request goes to decode-1, none to decode-0.
	for range 4 {
		if served := fl.serve(""); served != "decode-1" {
			t.Fatalf("a request went to %s while its breaker was open", served)
		}
	}
	waitBreaker(t, fl.d, "decode-0", snapshot.BreakerHalfOpen)
	// Half-open admits requests again: round robin reaches decode-0 within
	// two requests, and one success closes it.
	for fl.serve("") != "decode-0" {
	}
	waitBreaker(t, fl.d, "decode-0", snapshot.BreakerClosed)
	for _, tr := range [][2]string{{"closed", "open"}, {"open", "half_open"}, {"half_open", "closed"}} {
		if n := testutil.ToFloat64(fl.m.BreakerTransitions.WithLabelValues("decode-0", tr[0], tr[1])); n != 1 {
			t.Errorf("transition %s → %s counted %v times", tr[0], tr[1], n)
		}
	}
	if b := breakerOf(fl.d, "decode-1"); b.State != snapshot.BreakerClosed || b.Opened != 0 {
		t.Errorf("the healthy decode's breaker %+v", b)
	}
}

// An engine that registers again is a new worker: its breaker starts
// closed, and a late outcome of its previous run counts for nothing.
func TestBreakerClosedForARestartedEngine(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, func(g *profiles.GatewayPlan) {
		withRetry(true, 3)(g)
		g.CircuitBreaker = profiles.CircuitBreakerPlan{FailureThreshold: 1, SuccessThreshold: 1, TimeoutDurationSecs: 3600, WindowDurationSecs: 60}
	}, onePTwoD...)
	for breakerOf(fl.d, "decode-0").State == snapshot.BreakerClosed {
		fl.serve("decode-0")
	}
	waitBreaker(t, fl.d, "decode-0", snapshot.BreakerOpen)
	old := fl.d.breakers.current().epoch("decode-0")
	fl.kill("decode-0")
	fl.dial("decode-0")
	waitBreaker(t, fl.d, "decode-0", snapshot.BreakerClosed)
	if b := breakerOf(fl.d, "decode-0"); b.Reason != "the worker registered anew" || b.Opened != 0 {
		t.Fatalf("after the restart %+v", b)
	}
	// A failure reported against the old run is dropped.
	fl.d.breakers.report(outcome{role: "decode-0", epoch: old, ev: BreakerFailure}, fl.shut)
	fl.d.breakers.report(outcome{role: "decode-1", epoch: fl.d.breakers.current().epoch("decode-1"), ev: BreakerSuccess}, fl.shut)
	waitBreakerSeen(t, fl.d)
	if b := breakerOf(fl.d, "decode-0"); b.State != snapshot.BreakerClosed || b.Failures != 0 {
		t.Fatalf("a stale outcome counted: %+v", b)
	}
}

// waitFailures waits, on the book's change signal, until role's breaker
// counts n failures in a row.
func waitFailures(t *testing.T, d *Dispatcher, role string, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		v := d.breakers.current()
		if breakerOf(d, role).Failures >= n {
			return
		}
		select {
		case <-v.changed():
		case <-deadline:
			t.Fatalf("%s breaker %+v, want %d failures", role, breakerOf(d, role), n)
		}
	}
}

// waitBreakerSeen waits until the book has applied everything reported
// so far: it applies in order, so one more outcome that changes the view
// marks it.
func waitBreakerSeen(t *testing.T, d *Dispatcher) {
	t.Helper()
	v := d.breakers.current()
	d.breakers.report(outcome{role: "decode-1", epoch: v.epoch("decode-1"), ev: BreakerFailure}, nil)
	select {
	case <-v.changed():
	case <-time.After(10 * time.Second):
		t.Fatal("the breaker book applied nothing")
	}
	for breakerOf(d, "decode-1").Failures != 1 {
		select {
		case <-d.breakers.current().changed():
		case <-time.After(10 * time.Second):
			t.Fatal("the marker outcome was never applied")
		}
	}
}

// A stream its reader closes mid-generation (the client went, a local
// stop) ends as a client cancel does: counted client_disconnected, out of
// the in-flight count, and Next has nothing more.
func TestStreamCloseEndsTheRequest(t *testing.T) {
	t.Parallel()
	fl := newFakeLane(t, nil, onePTwoD...)
	st, err := fl.d.Stream(context.Background(), request(8, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	pre := fl.ranks["prefill"]
	p := pre.next()
	dec, d := fl.decodeOf("decode-0", "decode-1")
	pre.prefillDone(p)
	dec.emit(d.RID, 4, []int32{1, 5}, nil, "", 2)
	ev, ok := st.Next()
	if !ok || ev.Err != nil || !slices.Equal(ev.TokenIDs, []int32{1, 5}) {
		t.Fatalf("first event %+v ok %v", ev, ok)
	}
	if n := fl.d.InFlight(); n != 1 {
		t.Fatalf("in flight %d while streaming", n)
	}
	st.Close()
	st.Close() // idempotent
	if ev, ok := st.Next(); ok {
		t.Fatalf("Next after Close gave %+v", ev)
	}
	if n := fl.d.InFlight(); n != 0 {
		t.Fatalf("in flight %d after Close", n)
	}
	if n := testutil.ToFloat64(fl.m.ReqErrors.WithLabelValues("client_disconnected")); n != 1 {
		t.Fatalf("client_disconnected counted %v times", n)
	}
}

package admission

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// queueFixture is a Queue whose waits are announced on a channel, so a
// test knows a request waits before it goes on.
type queueFixture struct {
	t      *testing.T
	q      *Queue
	queued chan int
}

func newQueueFixture(t *testing.T, cfg Config) *queueFixture {
	f := &queueFixture{t: t, queued: make(chan int, 64)}
	f.q = New(cfg, Options{OnQueue: func(d int) { f.queued <- d }})
	t.Cleanup(f.q.Close)
	return f
}

type entered struct {
	tk  *Ticket
	ref *Refusal
}

// enter starts Enter in a goroutine and waits until it has waited or
// been answered.
func (f *queueFixture) enter(ctx context.Context, tenant string, a Ask) chan entered {
	f.t.Helper()
	out := make(chan entered, 1)
	go func() {
		tk, ref := f.q.Enter(ctx, "prefill", tenant, a)
		out <- entered{tk, ref}
	}()
	return out
}

// waits asserts the request behind out is waiting now (requests leaving
// the queue meanwhile are passed over).
func (f *queueFixture) waits(out chan entered) {
	f.t.Helper()
	select {
	case d := <-f.queued:
		if d != 1 {
			f.waits(out)
		}
	case e := <-out:
		f.t.Fatalf("answered instead of waiting: %+v %+v", e.tk, e.ref)
	case <-time.After(10 * time.Second):
		f.t.Fatal("neither waited nor answered")
	}
}

func (f *queueFixture) answer(out chan entered) entered {
	f.t.Helper()
	select {
	case e := <-out:
		return e
	case <-time.After(10 * time.Second):
		f.t.Fatal("no answer")
		return entered{}
	}
}

func ask(class, tokens int) Ask { return Ask{Class: class, Tokens: tokens, Arrived: time.Now()} }

// The queue end to end in one process: room admits at once, a full
// engine makes requests wait, a full queue sheds (429) unless the new
// request outranks the lowest waiting one (displaced, 503), higher
// classes leave first as room frees, and a wait ends at its deadline
// (503).
func TestQueueOrdersShedsAndDisplaces(t *testing.T) {
	f := newQueueFixture(t, Config{Kinds: map[string]KindConfig{"prefill": {RequestsPerRank: 1, QueueRequests: 2, QueueTokens: 1000}}})
	ctx := t.Context()
	a := f.answer(f.enter(ctx, "", ask(0, 10)))
	if a.tk == nil || a.ref != nil {
		t.Fatalf("the first request: %+v", a)
	}
	b := f.enter(ctx, "", ask(0, 10))
	f.waits(b)
	c := f.enter(ctx, "", ask(1, 10))
	f.waits(c)
	if d := f.answer(f.enter(ctx, "", ask(0, 10))); d.ref == nil || d.ref.Status != http.StatusTooManyRequests || d.ref.Reason != ReasonQueueFull || d.ref.After < time.Second {
		t.Fatalf("a request at a full queue: %+v %+v", d.tk, d.ref)
	}
	e := f.enter(ctx, "", ask(2, 10))
	if got := <-f.queued; got != -1 { // b leaves...
		t.Fatalf("queue change %d", got)
	}
	f.waits(e) // ...and e takes its place
	if got := f.answer(b); got.ref == nil || got.ref.Reason != ReasonDisplaced || got.ref.Status != http.StatusServiceUnavailable {
		t.Fatalf("the displaced request: %+v %+v", got.tk, got.ref)
	}
	a.tk.Done(0)
	ge := f.answer(e)
	if ge.tk == nil {
		t.Fatalf("the system request after the first ended: %+v", ge.ref)
	}
	ge.tk.Started()
	ge.tk.Done(5)
	gc := f.answer(c)
	if gc.tk == nil {
		t.Fatalf("the interactive request last: %+v", gc.ref)
	}
	// A request whose deadline passes while it waits.
	late := ask(0, 10)
	late.Deadline = time.Now().Add(20 * time.Millisecond)
	g := f.enter(ctx, "", late)
	f.waits(g)
	if got := f.answer(g); got.ref == nil || got.ref.Reason != ReasonDeadline || got.ref.Status != http.StatusServiceUnavailable {
		t.Fatalf("past its deadline: %+v %+v", got.tk, got.ref)
	}
	// A client gone while it waits.
	cctx, cancel := context.WithCancel(ctx)
	h := f.enter(cctx, "", ask(0, 10))
	f.waits(h)
	cancel()
	if got := f.answer(h); got.ref == nil || got.ref.Status != 499 {
		t.Fatalf("a client gone: %+v %+v", got.tk, got.ref)
	}
	gc.tk.Done(0)
	s := f.q.Snapshot()
	if len(s.Kinds) != 1 || s.Kinds[0].InFlight != (Load{}) || s.Kinds[0].Queued != (Load{}) {
		t.Fatalf("after everything ended: %+v", s)
	}
	want := map[Outcome]uint64{{0, "admitted"}: 1, {1, "admitted"}: 1, {2, "admitted"}: 1, {0, ReasonQueueFull}: 1, {0, ReasonDisplaced}: 1, {0, ReasonDeadline}: 1, {0, "client_gone"}: 1}
	for k, n := range want {
		if s.Kinds[0].Outcomes[k] != n {
			t.Errorf("outcome %+v: %d, want %d (all %v)", k, s.Kinds[0].Outcomes[k], n, s.Kinds[0].Outcomes)
		}
	}
}

// A key's requests per minute: the bucket starts full, the next request
// is refused with the wait until it refills; another key is not touched.
func TestQueueKeyLimits(t *testing.T) {
	f := newQueueFixture(t, Config{Keys: map[string]KeyLimits{"team-a": {RPM: 2}, "team-b": {TPM: 100}}})
	ctx := t.Context()
	for i := range 2 {
		if got := f.answer(f.enter(ctx, "team-a", ask(0, 10))); got.tk == nil {
			t.Fatalf("team-a request %d: %+v", i, got.ref)
		}
	}
	got := f.answer(f.enter(ctx, "team-a", ask(0, 10)))
	if got.ref == nil || got.ref.Reason != ReasonRateLimit || got.ref.Status != http.StatusTooManyRequests || got.ref.After != 30*time.Second {
		t.Fatalf("team-a's third request: %+v %+v", got.tk, got.ref)
	}
	if got := f.answer(f.enter(ctx, "team-b", ask(0, 100))); got.tk == nil {
		t.Fatalf("team-b: %+v", got.ref)
	} else {
		got.tk.Done(50) // its output comes off its minute too
	}
	if got := f.answer(f.enter(ctx, "team-b", ask(0, 1))); got.ref == nil || got.ref.Reason != ReasonRateLimit {
		t.Fatalf("team-b in debt: %+v %+v", got.tk, got.ref)
	}
	if got := f.answer(f.enter(ctx, "team-b", ask(0, 101))); got.ref == nil || got.ref.Reason != ReasonTooLarge {
		t.Fatalf("team-b above its minute: %+v %+v", got.tk, got.ref)
	}
}

// Nothing bounded: Enter admits without a ticket; a tsd apply that sets
// bounds takes effect for the next request.
func TestQueueInactive(t *testing.T) {
	f := newQueueFixture(t, Config{})
	if tk, ref := f.q.Enter(t.Context(), "prefill", "", ask(0, 10)); tk != nil || ref != nil {
		t.Fatalf("inactive: %+v %+v", tk, ref)
	}
	f.q.Reconfigure(Config{Kinds: map[string]KindConfig{"prefill": {RequestsPerRank: 1}}})
	tk, ref := f.q.Enter(t.Context(), "prefill", "", ask(0, 10))
	if tk == nil || ref != nil {
		t.Fatalf("after the apply: %+v %+v", tk, ref)
	}
	if _, ref := f.q.Enter(t.Context(), "prefill", "", ask(0, 10)); ref == nil || ref.Reason != ReasonQueueFull {
		t.Fatalf("no queue room configured: %+v", ref)
	}
	tk.Done(0)
}

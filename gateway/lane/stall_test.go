package lane

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The stall rule as a table: only a rank that owes output and has been
// silent past the timeout is stalled, once.
func TestStallVerdict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		owed    int
		silent  time.Duration
		timeout time.Duration
		already bool
		want    bool
	}{
		{"idle rank, long silence", 0, time.Hour, 30 * time.Second, false, false},
		{"owes output, silent past the timeout", 3, 31 * time.Second, 30 * time.Second, false, true},
		{"owes output, silent exactly the timeout", 1, 30 * time.Second, 30 * time.Second, false, false},
		{"owes output, recently spoke", 1, time.Second, 30 * time.Second, false, false},
		{"already stalled", 1, time.Hour, 30 * time.Second, true, false},
		{"detection off", 1, time.Hour, 0, false, false},
	} {
		if got := stallVerdict(tc.owed, tc.silent, tc.timeout, tc.already); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A prefill may stay silent twice as long as others: its legs wait for
// their decode to fetch the KV, and a stopped decode must be blamed first.
func TestStallTimeoutFor(t *testing.T) {
	t.Parallel()
	for kind, want := range map[string]time.Duration{
		profiles.KindPrefill: 60 * time.Second,
		profiles.KindDecode:  30 * time.Second,
		profiles.KindEncode:  30 * time.Second,
	} {
		if got := stallTimeoutFor(kind, 30*time.Second); got != want {
			t.Errorf("%s: %s, want %s", kind, got, want)
		}
	}
}

type eventLog struct {
	mu  sync.Mutex
	evs []string
	ch  chan struct{} // closed and replaced on every event
}

func (e *eventLog) add(kind, role, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, kind+" "+role+": "+msg)
	if e.ch != nil {
		close(e.ch)
	}
	e.ch = make(chan struct{})
}

// waitFor waits until some event contains each of want.
func (e *eventLog) waitFor(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		e.mu.Lock()
		all := strings.Join(e.evs, "\n")
		if e.ch == nil {
			e.ch = make(chan struct{})
		}
		ch := e.ch
		e.mu.Unlock()
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(all, w)
		}
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("events lack %q:\n%s", want, all)
		}
	}
}

func stallLane(t *testing.T, stall time.Duration, ev *eventLog) (*Lane, *Worker, *fakeRank, <-chan snapshot.RankEvent) {
	t.Helper()
	url := "ipc://" + filepath.Join(t.TempDir(), "decode-1")
	l, err := New([]profiles.WorkerPlan{{Role: "decode-1", Kind: profiles.KindDecode, URL: url, Handshake: "tcp://127.0.0.1:0", DP: 1}},
		Options{StallTimeout: stall, OnEvent: ev.add})
	if err != nil {
		t.Fatal(err)
	}
	_, ch, cancel := l.SubscribeRanks()
	t.Cleanup(cancel)
	if err := l.Bind(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	w, _ := l.Worker("decode-1")
	r := dialRank(t, w.HandshakeEndpoint(), 0, 1, 0)
	t.Cleanup(r.close)
	waitRanks(t, ch, "decode-1", map[int]string{0: snapshot.RankRegistered})
	return l, w, r, ch
}

// A rank that owes output and goes silent is judged stalled within the
// stall timeout: its requests (those owing output and quiet ones alike)
// end with an error naming role, rank and why, it shows stalled and leaves
// routing; its next message re-admits it.
func TestRankStallAndReadmit(t *testing.T) {
	t.Parallel()
	const stall = 300 * time.Millisecond
	ev := &eventLog{}
	_, w, r, ch := stallLane(t, stall, ev)
	payload := []byte{0x90}
	start := time.Now()
	s1, err := w.Submit(0, "rid-1", payload)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := w.SubmitQuiet(0, "rid-2", payload)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := "decode-1 rank 0 stalled: no output for 300ms with 2 requests in flight"
	for _, s := range []*Stream{s1, s2} {
		_, err := s.Recv(ctx)
		var se *StallError
		if !errors.As(err, &se) || !errors.Is(err, ErrRankStalled) || err.Error() != want {
			t.Fatalf("%s ended with %v, want %q", s.RID, err, want)
		}
	}
	if el := time.Since(start); el < stall || el > stall+2*time.Second {
		t.Errorf("stall verdict after %s, want within %s + slack", el, stall)
	}
	waitRanks(t, ch, "decode-1", map[int]string{0: snapshot.RankStalled})
	if rs := w.Routable(); len(rs) != 0 {
		t.Fatalf("stalled rank still routable: %+v", rs)
	}
	if _, err := w.Submit(0, "rid-3", payload); !errors.Is(err, ErrRankStalled) {
		t.Fatalf("submit to a stalled rank: %v", err)
	}
	if n, _ := w.InFlight(); n != 0 {
		t.Fatalf("%d still in flight", n)
	}
	var held int
	w.ranks.do(func() { held = len(w.ranks.ranks[0].unaborted) })
	if held != 2 {
		t.Fatalf("%d ABORTs held for the stalled rank, want 2", held)
	}
	// It speaks again (output for a rid the gateway already ended); only
	// now does it get the ABORT for the rids the verdict ended.
	r.emit(t, "rid-1", []int32{7}, "", 1)
	waitRanks(t, ch, "decode-1", map[int]string{0: snapshot.RankRegistered})
	got := make(chan [][]byte, 1)
	go func() {
		for { // skip the two ADDs
			m, err := r.in.Recv()
			if err != nil {
				close(got)
				return
			}
			if len(m.Frames) >= 2 && len(m.Frames[0]) == 1 && m.Frames[0][0] == typeAbort {
				got <- m.Frames
				return
			}
		}
	}()
	select {
	case f, ok := <-got:
		ab, err := wire.DecodeAbort(f[len(f)-1])
		if !ok || err != nil || len(ab.RIDs) != 2 {
			t.Fatalf("after re-admission the rank got %x (%v), want one ABORT for both rids", f, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no ABORT after re-admission")
	}
	if rs := w.Routable(); len(rs) != 1 {
		t.Fatalf("re-admitted rank not routable: %+v", rs)
	}
	ev.waitFor(t, "stall decode-1: "+want, "readmit decode-1: decode-1 rank 0 speaks again")
}

// A quiet leg (a decode waiting for its prefill's KV) owes nothing until
// Expect; the rank's clock starts then.
func TestQuietLegOwesNothingUntilExpect(t *testing.T) {
	t.Parallel()
	_, w, _, _ := stallLane(t, time.Hour, &eventLog{})
	owed := func() int {
		w.streams.mu.Lock()
		defer w.streams.mu.Unlock()
		return w.streams.ranks[0].owed
	}
	s, err := w.SubmitQuiet(0, "rid-q", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	if n := owed(); n != 0 {
		t.Fatalf("quiet leg owes %d", n)
	}
	s.Expect()
	s.Expect()
	if n := owed(); n != 1 {
		t.Fatalf("after Expect owes %d, want 1", n)
	}
	s.Abort(nil)
	if n := owed(); n != 0 {
		t.Fatalf("after abort owes %d", n)
	}
}

// The supervisor's verdict (a stalled view) shows the ranks stalled, ends
// their requests with its reason and keeps them out of routing until a
// view lifts it; the same view again ends nothing more.
func TestSetViewStalled(t *testing.T) {
	t.Parallel()
	_, w, _, ch := stallLane(t, 0, &eventLog{})
	s, _ := w.Submit(0, "rid-h", []byte{0x90})
	stalled := snapshot.RoleView{Alive: true, Stalled: true, Reason: "process stopped (state T)"}
	if c := w.SetView(stalled); c.Aborted != 1 || !c.StallBegins {
		t.Fatalf("stalled view: %+v, want 1 request ended", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Recv(ctx); !errors.Is(err, ErrRankStalled) || !strings.Contains(err.Error(), "decode-1 rank 0: engine rank stalled: process stopped (state T)") {
		t.Fatalf("held request ended with %v", err)
	}
	waitRanks(t, ch, "decode-1", map[int]string{0: snapshot.RankStalled})
	if len(w.Routable()) != 0 || !w.View().Stalled || w.Routed() {
		t.Fatal("held worker routable")
	}
	if c := w.SetView(stalled); c != (ViewChange{}) {
		t.Fatalf("the same view again: %+v", c)
	}
	w.SetView(snapshot.RoleView{Alive: true, Routed: true})
	waitRanks(t, ch, "decode-1", map[int]string{0: snapshot.RankRegistered})
	if len(w.Routable()) != 1 {
		t.Fatal("lifted worker not routable")
	}
}

// A stream's weight counts in its rank's in-flight tokens until it ends
// (terminal output or abort), whatever ends it.
func TestStreamWeighCountsUntilTheEnd(t *testing.T) {
	t.Parallel()
	_, w, r, _ := stallLane(t, time.Minute, &eventLog{})
	tokens := func() int {
		rs := w.Routable()
		if len(rs) != 1 {
			t.Fatalf("routable %+v", rs)
		}
		return rs[0].InFlightTokens
	}
	s1, err := w.Submit(0, "rid-1", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := w.Submit(0, "rid-2", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	s1.Weigh(100)
	s2.Weigh(30)
	s2.Weigh(-5) // ignored
	if got := tokens(); got != 130 {
		t.Fatalf("in-flight tokens %d, want 130", got)
	}
	if rs := w.Routable(); rs[0].Since.IsZero() {
		t.Fatalf("no registration time: %+v", rs[0])
	}
	s2.Abort(nil)
	if got := tokens(); got != 100 {
		t.Fatalf("after an abort: %d, want 100", got)
	}
	r.emit(t, "rid-1", []int32{7}, "stop", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if o, err := s1.Recv(ctx); err != nil || o.Finished == "" {
		t.Fatalf("rid-1: %+v %v", o, err)
	}
	if got := tokens(); got != 0 {
		t.Fatalf("after the finish: %d, want 0", got)
	}
	s1.Weigh(50) // an ended stream weighs nothing
	if got := tokens(); got != 0 {
		t.Fatalf("weighing an ended stream: %d", got)
	}
}

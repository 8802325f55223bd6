package lane

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The quiet rule as a table: only a rank that owes output and has been
// silent past max(floor, 10 × its recent gap) is quiet.
func TestQuietRule(t *testing.T) {
	t.Parallel()
	const floor = 500 * time.Millisecond
	for _, tc := range []struct {
		name   string
		owed   int
		silent time.Duration
		gap    time.Duration
		floor  time.Duration
		want   bool
	}{
		{"idle rank, long silence", 0, time.Hour, 10 * time.Millisecond, floor, false},
		{"owes output, silent past the floor", 2, 600 * time.Millisecond, 10 * time.Millisecond, floor, true},
		{"owes output, silent exactly the floor", 2, floor, 10 * time.Millisecond, floor, false},
		{"owes output, spoke recently", 1, 20 * time.Millisecond, 10 * time.Millisecond, floor, false},
		{"slow rank: ten of its gaps not yet", 1, 900 * time.Millisecond, 100 * time.Millisecond, floor, false},
		{"slow rank: past ten of its gaps", 1, 1100 * time.Millisecond, 100 * time.Millisecond, floor, true},
		{"no gap seen yet: the floor", 1, 600 * time.Millisecond, 0, floor, true},
		{"rule off", 1, time.Hour, 0, 0, false},
		{"rule off (negative)", 1, time.Hour, 0, -1, false},
	} {
		if got := quiet(tc.owed, tc.silent, tc.gap, tc.floor); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A prefill or encode rank answers once per request, an aggregated one
// after its prefill: four times the floor.
func TestQuietFloorFor(t *testing.T) {
	t.Parallel()
	for kind, want := range map[string]time.Duration{
		profiles.KindPrefill:    2 * time.Second,
		profiles.KindEncode:     2 * time.Second,
		profiles.KindAggregated: 2 * time.Second,
		profiles.KindDecode:     500 * time.Millisecond,
	} {
		if got := quietFloorFor(kind, 500*time.Millisecond); got != want {
			t.Errorf("%s: %s, want %s", kind, got, want)
		}
	}
	if got := quietFloorFor(profiles.KindPrefill, -1); got > 0 {
		t.Errorf("a rule turned off is on for a prefill: %s", got)
	}
}

// The recent gap: the first gap as it is, then an average weighing each
// new gap by 1/8, one gap capped at quietGapCap, a negative one as 0.
func TestNextGap(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name        string
		recent, gap time.Duration
		want        time.Duration
	}{
		{"first gap", 0, 20 * ms, 20 * ms},
		{"steady", 20 * ms, 20 * ms, 20 * ms},
		{"a slower step", 20 * ms, 100 * ms, 30 * ms},
		{"a faster step", 20 * ms, 4 * ms, 18 * ms},
		{"a long wait counts as the cap", 20 * ms, time.Hour, 20*ms + (quietGapCap-20*ms)/8},
		{"clock back", 16 * ms, -time.Second, 14 * ms},
	} {
		if got := nextGap(tc.recent, tc.gap); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}

// testClock is a clock a test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A rank that owes output shows quiet in Routable once it has said
// nothing for the floor, and its next output makes it ordinary again; a
// rank that owes nothing (a decode leg waiting for its KV) never does.
func TestRoutableShowsQuiet(t *testing.T) {
	t.Parallel()
	clock := &testClock{now: time.Unix(1000, 0)}
	url := "ipc://" + filepath.Join(t.TempDir(), "decode-1")
	l, err := New([]profiles.WorkerPlan{{Role: "decode-1", Kind: profiles.KindDecode, URL: url, Handshake: "tcp://127.0.0.1:0", DP: 1}},
		Options{Now: clock.Now, QuietAfter: 500 * time.Millisecond, SilenceTimeout: 1 << 62}) // the clock jumps hours: no silence verdict
	if err != nil {
		t.Fatal(err)
	}
	_, ch, cancel := l.SubscribeRanks()
	defer cancel()
	if err := l.Bind(); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w, _ := l.Worker("decode-1")
	r := dialRank(t, w.HandshakeEndpoint(), 0, 1, 0)
	defer r.close()
	waitRanks(t, ch, "decode-1", map[int]string{0: snapshot.RankRegistered})
	quietNow := func() bool {
		rs := w.Routable()
		if len(rs) != 1 {
			t.Fatalf("routable %+v", rs)
		}
		return rs[0].Quiet
	}
	waiting, err := w.SubmitQuiet(0, "rid-kv", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	clock.add(time.Hour)
	if quietNow() {
		t.Fatal("a rank owing nothing (its leg waits for the KV) shows quiet")
	}
	s, err := w.Submit(0, "rid-1", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	clock.add(400 * time.Millisecond)
	if quietNow() {
		t.Fatal("quiet before the floor")
	}
	clock.add(200 * time.Millisecond)
	if !quietNow() {
		t.Fatal("not quiet 600 ms into its silence")
	}
	r.emit(t, "rid-1", []int32{7}, "", 1)
	ctx, cancelRecv := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelRecv()
	if _, err := s.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	if quietNow() {
		t.Fatal("still quiet after it spoke")
	}
	waiting.Abort(nil)
	s.Abort(nil)
}

package lane

import (
	"errors"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// tableAt is a stream table on a clock the test moves.
func tableAt(c *testClock) (*streamTable, *Worker) {
	t := newStreamTable(c.Now)
	return t, &Worker{streams: t}
}

// A stream joins only a registered rank, once per rid; a stalled rank
// says so; a closed table takes nothing.
func TestStreamTableAdd(t *testing.T) {
	t.Parallel()
	tb, w := tableAt(&testClock{now: time.Unix(1, 0)})
	add := func(rid string, id int) error {
		_, err := tb.add(newStream(w, rid, id), true)
		return err
	}
	if err := add("a", 0); !errors.Is(err, ErrRankNotReady) {
		t.Fatalf("unknown rank: %v", err)
	}
	tb.setState(0, snapshot.RankRegistered, false, false)
	if err := add("a", 0); err != nil {
		t.Fatal(err)
	}
	if err := add("a", 0); !errors.Is(err, ErrDuplicateRID) {
		t.Fatalf("second rid a: %v", err)
	}
	tb.setState(1, snapshot.RankStalled, true, false)
	if err := add("b", 1); !errors.Is(err, ErrRankStalled) {
		t.Fatalf("stalled rank: %v", err)
	}
	if got := tb.close(); len(got) != 1 || got[0].RID != "a" {
		t.Fatalf("close took %v", got)
	}
	if err := add("c", 0); !errors.Is(err, ErrLaneClosed) {
		t.Fatalf("closed table: %v", err)
	}
}

// A rank going down takes its streams in the same step: none joins it
// in between, and the others' stay.
func TestStreamTableSetStateTakes(t *testing.T) {
	t.Parallel()
	tb, w := tableAt(&testClock{now: time.Unix(1, 0)})
	tb.setState(0, snapshot.RankRegistered, false, false)
	tb.setState(1, snapshot.RankRegistered, false, false)
	for _, r := range []struct {
		rid string
		id  int
	}{{"a", 0}, {"b", 0}, {"c", 1}} {
		if _, err := tb.add(newStream(w, r.rid, r.id), false); err != nil {
			t.Fatal(err)
		}
	}
	got := tb.setState(0, snapshot.RankDisconnected, false, true)
	if len(got) != 2 {
		t.Fatalf("took %d streams of rank 0, want 2", len(got))
	}
	if n, per := tb.inFlight(); n != 1 || per[1] != 1 || per[0] != 0 {
		t.Fatalf("in flight %d %v", n, per)
	}
	if _, err := tb.add(newStream(w, "d", 0), false); !errors.Is(err, ErrRankNotReady) {
		t.Fatalf("a rank that went down took a stream: %v", err)
	}
}

// The stall verdicts: only an eligible rank that owes output and has
// been silent past the timeout; it leaves routing with its streams, and
// its next output is news once.
func TestStreamTableStalls(t *testing.T) {
	t.Parallel()
	c := &testClock{now: time.Unix(100, 0)}
	tb, w := tableAt(c)
	var spoke []int
	tb.spoke = func(id int) { spoke = append(spoke, id) }
	for id := range 3 {
		tb.setState(id, snapshot.RankRegistered, false, false)
	}
	owing := newStream(w, "owing", 0)
	if _, err := tb.add(owing, true); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.add(newStream(w, "waiting", 1), false); err != nil { // a decode leg before its KV
		t.Fatal(err)
	}
	if _, err := tb.add(newStream(w, "other", 2), true); err != nil {
		t.Fatal(err)
	}
	c.add(31 * time.Second)
	got := tb.stalls(c.Now(), 30*time.Second, func(id int) bool { return id != 2 }) // rank 2: already judged by the book
	if len(got) != 1 || len(got[0]) != 1 || got[0][0] != owing {
		t.Fatalf("verdicts %v, want rank 0 with its stream", got)
	}
	if again := tb.stalls(c.Now(), 30*time.Second, func(int) bool { return true }); len(again) != 1 || len(again[2]) != 1 {
		t.Fatalf("second pass %v: want only rank 2 (eligible now), rank 0 not twice", again)
	}
	tb.mu.Lock()
	tb.hearLocked(0, c.Now())
	tb.hearLocked(0, c.Now())
	tb.mu.Unlock()
	if len(spoke) != 1 || spoke[0] != 0 {
		t.Fatalf("spoke %v, want rank 0 once", spoke)
	}
}

// loads fills each rank's requests, tokens and quiet verdict.
func TestStreamTableLoads(t *testing.T) {
	t.Parallel()
	c := &testClock{now: time.Unix(100, 0)}
	tb, w := tableAt(c)
	tb.setState(0, snapshot.RankRegistered, false, false)
	tb.setState(1, snapshot.RankRegistered, false, false)
	s := newStream(w, "a", 0)
	if _, err := tb.add(s, true); err != nil {
		t.Fatal(err)
	}
	tb.weigh(s, 40)
	c.add(time.Second)
	rs := []RankLoad{{Identity: 0}, {Identity: 1}, {Identity: 7}}
	tb.loads(rs, 500*time.Millisecond)
	if rs[0].InFlight != 1 || rs[0].InFlightTokens != 40 || !rs[0].Quiet || rs[1].Quiet || rs[1].InFlight != 0 || rs[2] != (RankLoad{Identity: 7}) {
		t.Fatalf("loads %+v", rs)
	}
	tb.remove(s)
	tb.loads(rs[:1], 500*time.Millisecond)
	if rs[0].InFlight != 0 || rs[0].InFlightTokens != 0 || rs[0].Quiet {
		t.Fatalf("after the stream ended %+v", rs[0])
	}
}

package lane

import (
	"sync"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// streamTable is a worker's rid table: the streams in flight, by rid, and
// each rank's load as the streams make it (requests and tokens in
// flight, output owed and when it was last heard). Its mutex is the one
// lock on the output path: an output reader looks each rid up, credits
// the rank and delivers under it, and nothing else is held there.
//
// Whether a rank takes new streams is the rank book's verdict (ranks.go),
// mirrored here as the rank's state under this same lock, so a submit
// can never slip in between a rank going down and its streams being
// taken.
type streamTable struct {
	now func() time.Time
	// spoke tells the rank book that a rank it judged stalled sent
	// output again (called under mu: it must not block).
	spoke func(id int)

	mu      sync.Mutex
	streams map[string]*Stream
	ranks   map[int]*rankLoad
	total   int
	closed  bool
}

// rankLoad is one rank's side of the table.
type rankLoad struct {
	state string // the rank book's state; only RankRegistered takes streams
	// stalled: the rank book's stall verdict stands; the rank's next
	// output is news for it (spoke).
	stalled  bool
	inflight int
	tokens   int // the in-flight streams' weights (Stream.Weigh)
	// owed counts streams that expect output now (Stream.Expect); heard
	// is when the rank last sent any, or when owed rose from 0; gap is its
	// recent gap between outputs while it owed some (quiet.go).
	owed  int
	heard time.Time
	gap   time.Duration
}

func newStreamTable(now func() time.Time) *streamTable {
	return &streamTable{now: now, spoke: func(int) {}, streams: map[string]*Stream{}, ranks: map[int]*rankLoad{}}
}

// loadLocked is rank id's entry, made on first use.
func (t *streamTable) loadLocked(id int) *rankLoad {
	l := t.ranks[id]
	if l == nil {
		l = &rankLoad{state: snapshot.RankWaiting}
		t.ranks[id] = l
	}
	return l
}

// add registers s on its rank, which must be registered; owing, it owes
// output from now on. Busy reports the worker going from idle to busy.
func (t *streamTable) add(s *Stream, owing bool) (busy bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false, ErrLaneClosed
	}
	l := t.ranks[s.Identity]
	switch {
	case l != nil && l.state == snapshot.RankStalled:
		return false, ErrRankStalled
	case l == nil || l.state != snapshot.RankRegistered:
		return false, ErrRankNotReady
	}
	if _, dup := t.streams[s.RID]; dup {
		return false, ErrDuplicateRID
	}
	t.streams[s.RID] = s
	l.inflight++
	busy = t.total == 0
	t.total++
	if owing {
		t.expectLocked(s)
	}
	return busy, nil
}

// expect counts s as owing output from now on; the rank's silence clock
// starts when it goes from owing nothing to owing something.
func (t *streamTable) expect(s *Stream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expectLocked(s)
}

func (t *streamTable) expectLocked(s *Stream) {
	if s.owed || t.streams[s.RID] != s {
		return
	}
	s.owed = true
	l := t.loadLocked(s.Identity)
	if l.owed == 0 {
		l.heard = t.now()
	}
	l.owed++
}

// weigh counts n tokens in s's rank's in-flight tokens until s ends.
func (t *streamTable) weigh(s *Stream, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.streams[s.RID] != s || n <= 0 {
		return
	}
	s.tokens += n
	t.loadLocked(s.Identity).tokens += n
}

// remove takes s out of the table; false when it was not there (already
// ended).
func (t *streamTable) remove(s *Stream) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.removeLocked(s)
}

func (t *streamTable) removeLocked(s *Stream) bool {
	if t.streams[s.RID] != s {
		return false
	}
	l := t.loadLocked(s.Identity)
	if s.owed {
		s.owed = false
		if l.owed > 0 {
			l.owed--
		}
	}
	delete(t.streams, s.RID)
	l.inflight--
	l.tokens -= s.tokens
	s.tokens = 0
	if l.inflight <= 0 {
		l.inflight, l.tokens = 0, 0
	}
	t.total--
	return true
}

// take removes and returns the streams match selects.
func (t *streamTable) take(match func(*Stream) bool) []*Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.takeLocked(match)
}

func (t *streamTable) takeLocked(match func(*Stream) bool) []*Stream {
	var out []*Stream
	for _, s := range t.streams {
		if match(s) {
			out = append(out, s)
		}
	}
	for _, s := range out {
		t.removeLocked(s)
	}
	return out
}

func onRank(id int) func(*Stream) bool { return func(s *Stream) bool { return s.Identity == id } }

func everyStream(*Stream) bool { return true }

// setState mirrors the rank book's state of rank id (and its stall
// verdict); with take, the rank's streams are taken in the same step, so
// none is added between the change and the take.
func (t *streamTable) setState(id int, state string, stalled, take bool) []*Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.loadLocked(id)
	l.state, l.stalled = state, stalled
	if !take {
		return nil
	}
	return t.takeLocked(onRank(id))
}

// forget drops rank id's entry (a planned rank the engine said is not
// its).
func (t *streamTable) forget(id int) {
	t.mu.Lock()
	delete(t.ranks, id)
	t.mu.Unlock()
}

// close refuses every later add and takes every stream.
func (t *streamTable) close() []*Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	return t.takeLocked(everyStream)
}

// hearLocked credits rank id with output at now: its gap and its silence
// clock move, and a rank judged stalled is news for the rank book.
func (t *streamTable) hearLocked(id int, now time.Time) {
	l := t.ranks[id]
	if l == nil {
		return
	}
	if l.owed > 0 {
		l.gap = nextGap(l.gap, now.Sub(l.heard))
	}
	l.heard = now
	if l.stalled {
		l.stalled = false
		t.spoke(id)
	}
}

// stalls is the stall rule's verdicts (stallVerdict) at now: every rank
// eligible for one (up and not already stalled, as the rank book says)
// that owes output and has been silent past timeout is marked stalled
// and out of routing, and its streams are taken, in one step.
func (t *streamTable) stalls(now time.Time, timeout time.Duration, eligible func(id int) bool) map[int][]*Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[int][]*Stream
	for id, l := range t.ranks {
		if l.stalled || !eligible(id) || !stallVerdict(l.owed, now.Sub(l.heard), timeout, false) {
			continue
		}
		l.state, l.stalled = snapshot.RankStalled, true
		if out == nil {
			out = map[int][]*Stream{}
		}
		out[id] = t.takeLocked(onRank(id))
	}
	return out
}

// loads fills each routable rank's load and quiet verdict (quiet.go).
func (t *streamTable) loads(rs []RankLoad, floor time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for i := range rs {
		l := t.ranks[rs[i].Identity]
		if l == nil {
			continue
		}
		rs[i].InFlight, rs[i].InFlightTokens = l.inflight, l.tokens
		rs[i].Quiet = quiet(l.owed, now.Sub(l.heard), l.gap, floor)
	}
}

// inFlight is the table's count of streams, in total and per rank.
func (t *streamTable) inFlight() (int, map[int]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	per := map[int]int{}
	for id, l := range t.ranks {
		if l.inflight > 0 {
			per[id] = l.inflight
		}
	}
	return t.total, per
}

// inflightOf is rank id's count of streams.
func (t *streamTable) inflightOf(id int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.ranks[id]; l != nil {
		return l.inflight
	}
	return 0
}

// busy reports streams in flight.
func (t *streamTable) busy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total > 0
}

// route hands each rid's increment to its stream; a terminal one ends
// the stream. Outputs for unknown rids (aborted, already failed) are
// dropped, as the lane requires (docs/protocol.md, abort), but still count
// as the rank speaking: a batch comes from one rank, known by the
// streams it carries, else by its engine_index.
func (t *streamTable) route(outs []ridOutput) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now, last := t.now(), -1
	for _, o := range outs {
		s := t.streams[o.RID]
		if s == nil {
			continue
		}
		if s.Identity != last {
			last = s.Identity
			t.hearLocked(last, now)
		}
		if o.Finished != "" {
			t.removeLocked(s)
		}
		s.deliver(o.Output)
	}
	if last < 0 && len(outs) > 0 {
		t.hearLocked(outs[0].EngineIndex, now)
	}
}

package kvevents

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/testkit/testports"
)

// fixture is one engine's publishers (one per DP rank, as ts-fake runs
// them) and a subscriber following them.
type fixture struct {
	t       *testing.T
	dp      int
	cfg     Config
	pubs    []*Publisher
	sub     *Subscriber
	changed chan struct{}
	pubPort int
	repPort int
}

const bs = 4 // block size of the fixtures' batches

func newFixture(t *testing.T, dp int, replay bool, bufferSteps int, o Options) *fixture {
	t.Helper()
	base := testports.Range(t, 2*dp)
	f := &fixture{t: t, dp: dp, changed: make(chan struct{}, 1), pubPort: base, repPort: base + dp}
	f.cfg = Config{Endpoint: fmt.Sprintf("tcp://*:%d", base), BufferSteps: bufferSteps, HWM: DefaultHWM, MaxQueueSize: 1024, EnableKVCacheEvents: true}
	ranks := make([]RankEndpoints, dp)
	for r := range dp {
		ranks[r].Publish = fmt.Sprintf("tcp://127.0.0.1:%d", base+r)
	}
	if replay {
		rep := fmt.Sprintf("tcp://*:%d", base+dp)
		f.cfg.ReplayEndpoint = &rep
		for r := range dp {
			ranks[r].Replay = fmt.Sprintf("tcp://127.0.0.1:%d", base+dp+r)
		}
	}
	f.pubs = make([]*Publisher, dp)
	for r := range dp {
		f.startPub(r)
	}
	o.OnChange = func(string) {
		select {
		case f.changed <- struct{}{}:
		default:
		}
	}
	if o.RetryMax == 0 {
		o.RetryMax = 200 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	f.sub = New([]EngineConfig{{Worker: "prefill", Ranks: ranks}}, o)
	f.sub.Start()
	t.Cleanup(func() {
		f.sub.Close()
		for _, p := range f.pubs {
			if p != nil {
				p.Close()
			}
		}
	})
	return f
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (f *fixture) startPub(rank int) {
	f.t.Helper()
	p, err := NewPublisher(f.cfg, rank, func(err error) { f.t.Logf("publisher %d: %v", rank, err) })
	if err != nil {
		f.t.Fatal(err)
	}
	f.pubs[rank] = p
}

func (f *fixture) stopPub(rank int) {
	f.pubs[rank].Close()
	f.pubs[rank] = nil
}

// waitFor waits, by the subscriber's change notifications, until cond
// holds; 10 s without it fails the test.
func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-f.changed:
		case <-deadline.C:
			st, _ := f.sub.StatusOf("prefill")
			f.t.Fatalf("timed out waiting for %s; status %+v", what, st)
		}
	}
}

// waitSubscribed waits until rank's PUB holds the subscriber's
// subscription (zmq4 tells no one, so this one wait polls, under a
// deadline).
func (f *fixture) waitSubscribed(rank int) {
	f.t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !f.pubs[rank].Subscribed() {
		select {
		case <-tick.C:
		case <-deadline:
			f.t.Fatalf("rank %d's publisher never saw the subscription", rank)
		}
	}
}

// ready waits until the subscriber is live and every publisher holds its
// subscription, so a batch published now is received (the tests of what
// follows a loss make their losses on purpose).
func (f *fixture) ready() {
	f.t.Helper()
	f.waitFor("live", f.live)
	for r := range f.dp {
		f.waitSubscribed(r)
	}
}

func (f *fixture) status() EngineStatus {
	st, _ := f.sub.StatusOf("prefill")
	return st
}

func (f *fixture) live() bool { return f.status().Live }

// matches waits until Match answers want (per rank) for prompt.
func (f *fixture) matches(prompt []int32, want ...int) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("Match = %v", want), func() bool {
		got, live := f.sub.Match("prefill", prompt)
		return live && slices.Equal(got, want)
	})
}

func batch(rank int, evs ...[]Event) Batch {
	b := Batch{TS: float64(time.Now().UnixNano()) / 1e9, DPRank: rank, HasDPRank: true}
	for _, e := range evs {
		b.Events = append(b.Events, e...)
	}
	return b
}

func TestSubscriberFollowsEveryRank(t *testing.T) {
	// Events of each DP rank land in that rank's index; Match answers per
	// rank, whole pages, never the last token.
	f := newFixture(t, 2, true, DefaultBufferSteps, Options{})
	f.ready()
	a, b := seq(100, 12), seq(700, 8)
	f.pubs[0].Publish(batch(0, stored(a, bs)))
	f.pubs[1].Publish(batch(1, stored(b, bs)))
	f.matches(cat(a, seq(1, 1)), 12, 0)
	f.matches(cat(b, seq(1, 1)), 0, 8)
	f.matches(a, 8, 0) // the last token is always computed
	st := f.status()
	if st.Ranks[0].Blocks != 3 || st.Ranks[1].Blocks != 2 || st.Ranks[0].BlockSize != bs {
		t.Fatalf("status %+v", st)
	}
	if got, live := f.sub.Match("decode", a); got != nil || live {
		t.Fatalf("a worker not followed: %v %v", got, live)
	}
}

func TestSubscriberCatchesUpOnBatchesBeforeItSubscribed(t *testing.T) {
	// Batches published before the subscription took (a SUB misses them)
	// come through the replay socket on connect.
	f := newFixture(t, 1, true, DefaultBufferSteps, Options{})
	a := seq(100, 8)
	f.sub.Close() // re-made below, after the batch is out
	f.pubs[0].Publish(batch(0, stored(a, bs)))
	g := New([]EngineConfig{{Worker: "prefill", Ranks: []RankEndpoints{{Publish: fmt.Sprintf("tcp://127.0.0.1:%d", f.pubPort), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", f.repPort)}}}},
		Options{OnChange: func(string) {
			select {
			case f.changed <- struct{}{}:
			default:
			}
		}})
	f.sub = g
	g.Start()
	f.matches(cat(a, seq(1, 1)), 8)
}

func TestSubscriberReplaysAGap(t *testing.T) {
	// A batch the PUB dropped (a gap in the sequence) is fetched from the
	// replay socket; the batch after it waits for it.
	f := newFixture(t, 1, true, DefaultBufferSteps, Options{CatchUp: -1})
	f.ready()
	a := seq(100, 16)
	evs := stored(a, bs)
	f.pubs[0].Publish(batch(0, evs[:1]))
	f.matches(cat(a[:4], seq(1, 1)), 4)
	f.pubs[0].PublishUnsent(batch(0, evs[1:3])) // seq 1: lost on the way
	f.pubs[0].Publish(batch(0, evs[3:]))        // seq 2 shows the gap
	f.matches(cat(a, seq(1, 1)), 16)
	if st := f.status(); !st.Live {
		t.Fatalf("not live after a recovered gap: %+v", st)
	}
}

func TestSubscriberUnrecoverableGap(t *testing.T) {
	// A gap the replay buffer no longer holds: the rank is reset and not
	// live (routing falls back), until AllBlocksCleared makes the index
	// exact again.
	f := newFixture(t, 1, true, 1, Options{CatchUp: -1})
	f.ready()
	a, b := seq(100, 8), seq(500, 8)
	f.pubs[0].Publish(batch(0, stored(a, bs)))
	f.matches(cat(a, seq(1, 1)), 8)
	f.pubs[0].PublishUnsent(batch(0, stored(b, bs)))
	f.pubs[0].PublishUnsent(batch(0, removed(hashes(a, bs)[1])))
	f.pubs[0].Publish(batch(0)) // seq 3; the buffer (1 step) holds only it
	f.waitFor("not live", func() bool { return !f.live() })
	if st := f.status(); !strings.Contains(st.Note, "events lost") || st.Ranks[0].Blocks != 0 {
		t.Fatalf("status %+v", st)
	}
	if got, live := f.sub.Match("prefill", a); got != nil || live {
		t.Fatalf("Match on a broken rank = %v, %v", got, live)
	}
	f.pubs[0].Publish(batch(0, []Event{{Kind: KindAllBlocksCleared}}, stored(b, bs)))
	f.matches(cat(b, seq(1, 1)), 8)
}

func TestSubscriberWithoutReplaySocket(t *testing.T) {
	// No replay endpoint: any gap is a loss.
	f := newFixture(t, 1, false, DefaultBufferSteps, Options{})
	f.ready()
	a := seq(100, 8)
	f.pubs[0].Publish(batch(0, stored(a, bs)))
	f.matches(cat(a, seq(1, 1)), 8)
	f.pubs[0].PublishUnsent(batch(0)) // seq 1, lost
	f.pubs[0].Publish(batch(0))       // seq 2 shows the gap
	f.waitFor("not live", func() bool { return !f.live() })
	if st := f.status(); !strings.Contains(st.Note, "no replay endpoint") {
		t.Fatalf("note %q", st.Note)
	}
}

func TestSubscriberAllBlocksCleared(t *testing.T) {
	// AllBlocksCleared empties the rank's index.
	f := newFixture(t, 2, true, DefaultBufferSteps, Options{})
	f.ready()
	a := seq(100, 8)
	f.pubs[0].Publish(batch(0, stored(a, bs)))
	f.pubs[1].Publish(batch(1, stored(a, bs)))
	f.matches(cat(a, seq(1, 1)), 8, 8)
	f.pubs[1].Publish(batch(1, []Event{{Kind: KindAllBlocksCleared}}))
	f.matches(cat(a, seq(1, 1)), 8, 0)
}

func TestSubscriberPublisherRestart(t *testing.T) {
	// A restarted engine's publisher numbers from 0 again: the rank's
	// index is reset before its first batch is applied.
	f := newFixture(t, 1, true, DefaultBufferSteps, Options{CatchUp: 100 * time.Millisecond})
	f.ready()
	a, b := seq(100, 8), seq(500, 8)
	f.pubs[0].Publish(batch(0, stored(a, bs)))
	f.pubs[0].Publish(batch(0, stored(seq(900, 4), bs)))
	f.matches(cat(a, seq(1, 1)), 8)
	f.stopPub(0)
	f.waitFor("disconnected", func() bool { return !f.status().Ranks[0].Connected })
	f.startPub(0)
	f.waitFor("reconnected", func() bool { return f.status().Ranks[0].Connected })
	// The new publisher's batch 0: seen live, or replayed by the check
	// after the reconnect or by a catch-up, it is told from the old
	// publisher's batch 0.
	f.pubs[0].Publish(batch(0, stored(b, bs)))
	f.matches(cat(b, seq(1, 1)), 8)
	f.matches(cat(a, seq(1, 1)), 0)
	// Its registration with the lane follows; the new stream already
	// reset the index, so nothing is lost.
	f.sub.Registered("prefill", 0)
	f.matches(cat(b, seq(1, 1)), 8)
}

func TestSubscriberRegistrationResets(t *testing.T) {
	// A restarted engine that has published nothing yet still has an
	// empty cache: its registration with the lane resets the index.
	f := newFixture(t, 2, true, DefaultBufferSteps, Options{})
	f.ready()
	a := seq(100, 8)
	f.pubs[0].Publish(batch(0, stored(a, bs)))
	f.pubs[1].Publish(batch(1, stored(a, bs)))
	f.matches(cat(a, seq(1, 1)), 8, 8)
	f.stopPub(1)
	f.waitFor("rank 1 disconnected", func() bool { return !f.status().Ranks[1].Connected })
	f.startPub(1)
	f.waitFor("rank 1 reconnected", func() bool { return f.status().Ranks[1].Connected })
	f.sub.Registered("prefill", 1)
	f.matches(cat(a, seq(1, 1)), 8, 0)
}

func TestSubscriberRefusesUndecodableBatch(t *testing.T) {
	// A batch that does not decode is lost for good (a replay would bring
	// the same bytes): the rank is reset and not live.
	f := newFixture(t, 1, true, DefaultBufferSteps, Options{})
	f.ready()
	f.pubs[0].Publish(batch(0, stored(seq(100, 8), bs)))
	f.matches(cat(seq(100, 8), seq(1, 1)), 8)
	// A BlockStored whose token count does not fit its block size encodes
	// fine but cannot enter the index.
	f.pubs[0].Publish(batch(0, []Event{{Kind: KindBlockStored, BlockHashes: []uint64{1}, TokenIDs: seq(1, 3), BlockSize: bs}}))
	f.waitFor("not live", func() bool { return !f.live() })
	if st := f.status(); !strings.Contains(st.Note, "3 token ids for 1 block(s) of 4") {
		t.Fatalf("note %q", st.Note)
	}
}

func TestSubscriberMatchConcurrent(t *testing.T) {
	// Match from many goroutines while events stream in: no race, and
	// every answer is one the index held at some point.
	f := newFixture(t, 2, true, DefaultBufferSteps, Options{})
	f.ready()
	a := seq(100, 64)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, live := f.sub.Match("prefill", cat(a, seq(1, 1)))
				if live && (len(got) != 2 || got[0]%bs != 0 || got[0] > 64) {
					t.Errorf("Match = %v", got)
					return
				}
			}
		}()
	}
	evs := stored(a, bs)
	for i := range evs {
		f.pubs[0].Publish(batch(0, evs[i:i+1]))
	}
	f.matches(cat(a, seq(1, 1)), 64, 0)
	close(stop)
	wg.Wait()
}

func TestSubscriberBoundsWhatItHolds(t *testing.T) {
	// A replay answer beyond the held-bytes budget is refused: the gap is
	// a loss (not live), memory stays bounded.
	f := newFixture(t, 1, true, DefaultBufferSteps, Options{MaxHeldBytes: 300, CatchUp: -1})
	f.ready()
	f.pubs[0].Publish(batch(0, stored(seq(100, 8), bs)))
	f.matches(cat(seq(100, 8), seq(1, 1)), 8)
	f.pubs[0].PublishUnsent(batch(0, stored(seq(1000, 400), bs))) // ~1.5 KB, lost on the way
	f.pubs[0].Publish(batch(0))
	f.waitFor("not live", func() bool { return !f.live() })
	if st := f.status(); !strings.Contains(st.Note, "bytes") {
		t.Fatalf("note %q", st.Note)
	}
}

// TestSubscriberPredictionsFollowTheEvents: a prompt routed to a rank
// counts as its blocks before any event (Predict); when that rank then
// publishes the prefix's blocks elsewhere moved (BlockStored ×8 on rank 0,
// BlockRemoved ×8 on rank 1, as upstream's publisher sends them), rank 1
// holds nothing at once, predictions included.
func TestSubscriberPredictionsFollowTheEvents(t *testing.T) {
	f := newFixture(t, 2, true, DefaultBufferSteps, Options{})
	f.ready()
	prefix := seq(100, 32) // 8 blocks of 4, two predicted pages
	q1, q2 := seq(5000, 16), seq(6000, 16)
	f.sub.Predict("prefill", 1, cat(prefix, q1), time.Minute)
	got, live := f.sub.Match("prefill", cat(prefix, q2))
	if !live || !slices.Equal(got, []int{0, 32}) {
		t.Fatalf("after the prediction: %v live=%v, want [0 32]", got, live)
	}
	f.pubs[1].Publish(batch(1, stored(cat(prefix, q1), bs)))
	f.matches(cat(prefix, q1, seq(1, 1)), 0, 48)
	f.sub.Predict("prefill", 1, cat(prefix, q2), time.Minute) // another request of the prefix, not computed yet
	f.pubs[0].Publish(batch(0, stored(prefix, bs)))
	f.pubs[1].Publish(batch(1, removed(hashes(cat(prefix, q1), bs)...)))
	f.matches(cat(prefix, q2, seq(1, 1)), 32, 0)
}

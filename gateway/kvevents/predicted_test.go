package kvevents

import (
	"testing"
	"time"
)

// The predicted-block bookkeeping (predicted.go), row by row: each row
// runs steps on a fresh index with a clock it sets, then matches prompts.
func TestIndexPredictions(t *testing.T) {
	const bs = 8 // the engine's block size: half a predicted page
	t0 := time.Unix(1000, 0)
	const ttl = 10 * time.Second
	sys := seq(100, 32) // two predicted pages, four blocks
	a := seq(500, 32)
	b := seq(900, 32)
	hsSysA := hashes(cat(sys, a), bs)

	type step struct {
		at      time.Duration // since t0
		predict []int32       // routed there
		events  []Event       // then these arrive
		prune   bool
	}
	type probe struct {
		at     time.Duration
		prompt []int32
		want   int
	}
	rows := []struct {
		name   string
		steps  []step
		probes []probe
		pages  int // predicted pages kept after the steps (-1: don't check)
	}{
		{"a routed prompt counts before its events", []step{{predict: cat(sys, a)}}, []probe{
			{time.Second, cat(sys, a), 48},            // 64 tokens: never the last one, whole predicted pages
			{time.Second, cat(sys, a, seq(1, 1)), 64}, // one more token: all of it
			{time.Second, cat(sys, b), 32},            // shares the first two pages
			{time.Second, b, 0},
		}, 4},
		{"a claim expires", []step{{predict: cat(sys, a)}}, []probe{
			{ttl - time.Millisecond, cat(sys, a, seq(1, 1)), 64},
			{ttl, cat(sys, a, seq(1, 1)), 0},
		}, 4},
		{"a later prediction extends the claim", []step{{predict: sys}, {at: 8 * time.Second, predict: cat(sys, a)}}, []probe{
			{12 * time.Second, cat(sys, a, seq(1, 1)), 64},
			{18 * time.Second, cat(sys, a, seq(1, 1)), 0},
		}, 4},
		{"published blocks replace the claims they cover", []step{{predict: cat(sys, a, b)}, {at: time.Second, events: stored(sys, bs)}}, []probe{
			{2 * time.Second, cat(sys, a, b, seq(1, 1)), 96},   // the rest still claimed
			{ttl + time.Second, cat(sys, a, b, seq(1, 1)), 32}, // claims gone: the published blocks stay
		}, 6},
		{"a settled prompt leaves nothing behind", []step{{predict: cat(sys, a)}, {at: time.Second, events: stored(cat(sys, a), bs)}}, []probe{
			{ttl + time.Second, cat(sys, a, seq(1, 1)), 64},
		}, 0},
		{"BlockRemoved cuts the claims past it at once", []step{
			{predict: cat(sys, a)},
			{at: time.Second, events: stored(cat(sys, a), bs)},
			{at: 2 * time.Second, predict: cat(sys, a, b)}, // another request, not yet computed
			{at: 3 * time.Second, events: removed(hsSysA[5], hsSysA[6], hsSysA[7])},
		}, []probe{
			{4 * time.Second, cat(sys, a, b, seq(1, 1)), 40}, // blocks 0-4 published; the claim on b went with block 5
		}, -1},
		{"the blocks moved away: nothing is left", []step{
			{predict: cat(sys, a)},
			{at: time.Second, events: stored(cat(sys, a), bs)},
			{at: 2 * time.Second, predict: cat(sys, b)},
			{at: 3 * time.Second, events: removed(hashes(cat(sys, a), bs)...)},
		}, []probe{
			{4 * time.Second, cat(sys, b, seq(1, 1)), 0},
			{4 * time.Second, cat(sys, a, seq(1, 1)), 0},
		}, 0},
		{"a removal on another path leaves the claim", []step{
			{events: stored(cat(b, a), bs)},
			{at: time.Second, predict: cat(sys, a)},
			{at: 2 * time.Second, events: removed(hashes(cat(b, a), bs)...)},
		}, []probe{
			{3 * time.Second, cat(sys, a, seq(1, 1)), 64},
		}, 4},
		{"whole engine blocks once the block size is known", []step{
			{events: stored(seq(7000, 24), 12)}, // a block of 12 tokens
			{predict: cat(sys, a)},
		}, []probe{
			{time.Second, cat(sys, a), 48},                 // 48 = 4 × 12
			{time.Second, cat(sys, seq(1, 9)), 24},         // 32 predicted: two blocks of 12
			{time.Second, cat(sys, a[:20], seq(1, 1)), 48}, // 52 tokens: 3 predicted pages, 4 blocks
		}, -1},
		{"AllBlocksCleared drops the predictions too", []step{
			{predict: cat(sys, a)},
			{at: time.Second, events: []Event{{Kind: KindAllBlocksCleared}}},
		}, []probe{
			{2 * time.Second, cat(sys, a, seq(1, 1)), 0},
		}, 0},
		{"a sweep drops expired claims", []step{
			{predict: cat(sys, a)},
			{at: 5 * time.Second, predict: cat(sys, b)},
			{at: 12 * time.Second, prune: true},
		}, []probe{
			{12 * time.Second, cat(sys, b, seq(1, 1)), 64},
			{12 * time.Second, cat(sys, a, seq(1, 1)), 32},
		}, 4},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			x := NewIndex(0)
			for i, s := range r.steps {
				now := t0.Add(s.at)
				if s.predict != nil {
					x.Predict(s.predict, now, ttl)
				}
				if s.events != nil {
					if _, err := x.Apply(s.events); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				if s.prune {
					x.Prune(now)
				}
			}
			for i, p := range r.probes {
				bsNow := x.BlockSize()
				if got := x.MatchAt(p.prompt, PageKeys(nil, p.prompt, bsNow), t0.Add(p.at)); got != p.want {
					t.Errorf("probe %d (%d tokens at +%v): %d, want %d", i, len(p.prompt), p.at, got, p.want)
				}
			}
			if r.pages >= 0 && x.Predicted() != r.pages {
				t.Errorf("%d predicted pages kept, want %d", x.Predicted(), r.pages)
			}
		})
	}
}

// A flood of distinct prompts never holds more than the cap.
func TestIndexPredictionsBounded(t *testing.T) {
	x := NewIndex(0)
	x.pred.max = 64
	now := time.Unix(1000, 0)
	for i := range 100 {
		x.Predict(seq(i*1000, 160), now, time.Minute) // 10 pages each, all live
		if x.Predicted() > 64 {
			t.Fatalf("after %d prompts %d pages kept, cap 64", i+1, x.Predicted())
		}
	}
	// The newest prompt is always counted.
	p := cat(seq(99*1000, 160), seq(1, 1))
	if got := x.MatchAt(p, nil, now.Add(time.Second)); got != 160 {
		t.Fatalf("the last prompt: %d, want 160", got)
	}
}

package kvevents

import (
	"strings"
	"testing"
)

func TestDecideSeq(t *testing.T) {
	// One row per case of the live stream's sequence rule.
	rows := []struct {
		name           string
		started, fresh bool
		next, seq      uint64
		act            seqAction
		from           uint64
	}{
		{"first batch of a publisher", false, true, 0, 0, actApply, 0},
		{"joined after the publisher began", false, true, 0, 7, actReplay, 0},
		{"in order", true, false, 5, 5, actApply, 0},
		{"in order after a reconnect", true, true, 5, 5, actApply, 0},
		{"gap", true, false, 5, 9, actReplay, 5},
		{"gap after a reconnect", true, true, 5, 9, actReplay, 5},
		{"batch 0 again: restarted", true, false, 5, 0, actRestart, 0},
		{"batch 0 again after a reconnect", true, true, 5, 0, actRestart, 0},
		{"older after a reconnect: a restarted publisher seen late", true, true, 5, 2, actRestartReplay, 0},
		{"older, same connection: a replay overlap", true, false, 5, 2, actSkip, 0},
		{"the one just applied again", true, false, 5, 4, actSkip, 0},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			act, from := decideSeq(r.started, r.fresh, r.next, r.seq)
			if act != r.act || (act == actReplay && from != r.from) {
				t.Fatalf("decideSeq = %v from %d, want %v from %d", act, from, r.act, r.from)
			}
		})
	}
}

func TestDecideReplayAnswer(t *testing.T) {
	// One row per case of judging a replay answer.
	k := func(seqs ...uint64) []replayKey {
		out := make([]replayKey, len(seqs))
		for i, s := range seqs {
			out[i] = replayKey{seq: s, ts: float64(s) + 0.5}
		}
		return out
	}
	rows := []struct {
		name    string
		started bool
		next    uint64
		lastTS  float64
		verify  bool
		need    uint64
		items   []replayKey
		restart bool
		again   bool
		from    int
		lost    string
	}{
		{"catch-up, nothing new", true, 5, 4.5, false, 0, k(2, 3, 4), false, false, 3, ""},
		{"catch-up finds missed batches", true, 5, 4.5, false, 0, k(3, 4, 5, 6), false, false, 2, ""},
		{"catch-up on an empty buffer", true, 5, 4.5, false, 0, nil, false, false, 0, ""},
		{"gap filled", true, 5, 4.5, false, 8, k(4, 5, 6, 7, 8), false, false, 1, ""},
		{"gap: the buffer rotated past it", true, 5, 4.5, false, 8, k(7, 8), false, false, 2, "buffer starts at batch 7, batch 5 is gone"},
		{"gap: the answer ends early", true, 5, 4.5, false, 8, k(5, 6), false, false, 2, "ends at batch 6, before the missing batch 7"},
		{"gap: nothing answered", true, 5, 4.5, false, 8, nil, false, false, 0, "ends at batch 4"},
		{"answer skips", true, 5, 4.5, false, 0, k(5, 7), false, false, 2, "skips from batch 5 to 7"},
		{"never started: from 0", false, 0, 0, false, 0, k(0, 1, 2), false, false, 0, ""},
		{"never started: the first batches are gone", false, 0, 0, true, 0, k(3, 4), false, false, 2, "buffer starts at batch 3, batch 0 is gone"},
		{"verify: the same publisher", true, 5, 4.5, true, 0, k(4, 5, 6), false, false, 1, ""},
		{"verify: the same publisher, nothing new", true, 5, 4.5, true, 0, k(4), false, false, 1, ""},
		{"verify: another batch under our last number", true, 5, 9.9, true, 0, k(4, 5), true, true, 2, ""},
		{"verify: a publisher behind us (empty answer)", true, 5, 4.5, true, 0, nil, true, true, 0, ""},
		{"verify: buffer past our last batch", true, 5, 4.5, true, 0, k(6, 7), false, false, 2, "starts at batch 6, after the last one applied (4)"},
		{"verify from batch 0: another batch 0 is the new publisher's", true, 1, 0.7, true, 0, k(0, 1), true, false, 0, ""},
		{"verify from batch 0: the same batch 0", true, 1, 0.5, true, 0, k(0, 1), false, false, 1, ""},
		{"verify before anything was applied", false, 0, 0, true, 0, k(0, 1), false, false, 0, ""},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			p := decideReplayAnswer(r.started, r.next, r.lastTS, r.verify, r.need, r.items)
			if p.restart != r.restart || p.again != r.again || p.from != r.from || (r.lost == "") != (p.lost == "") || !strings.Contains(p.lost, r.lost) {
				t.Fatalf("plan %+v, want restart=%v again=%v from=%d lost~%q", p, r.restart, r.again, r.from, r.lost)
			}
		})
	}
}

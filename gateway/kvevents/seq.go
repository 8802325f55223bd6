package kvevents

import "fmt"

// What a rank's next published batch means for its index, decided from
// the batch's sequence number alone (docs/protocol.md §16.5). Publishers
// number their batches 0, 1, 2, … from their start; one publisher per DP
// rank and engine start.

// seqAction is what to do with one batch from the live stream.
type seqAction int

const (
	actApply         seqAction = iota // the next one: apply it
	actSkip                           // applied already (a replay overlapped the live stream)
	actReplay                         // batches before it are missing: replay from `from`, then it
	actRestart                        // a new publisher's first batch: reset the index, apply it
	actRestartReplay                  // a new publisher whose first batches were missed: reset, replay from 0
)

func (a seqAction) String() string {
	return [...]string{"apply", "skip", "replay", "restart", "restart+replay"}[a]
}

// decideSeq is the rank's sequence rule. started: a batch was applied
// since the index was last reset; next: the sequence expected after the
// last one applied; fresh: this is the first batch since the subscriber
// (re)connected, so it may come from a restarted engine.
func decideSeq(started, fresh bool, next, seq uint64) (act seqAction, from uint64) {
	switch {
	case !started && seq == 0:
		return actApply, 0
	case !started:
		return actReplay, 0 // subscribed after the publisher began
	case seq == next:
		return actApply, 0
	case seq > next:
		return actReplay, next
	case seq == 0:
		return actRestart, 0
	case fresh:
		return actRestartReplay, 0
	}
	return actSkip, 0
}

// replayKey is what decideReplayAnswer needs of one replayed batch.
type replayKey struct {
	seq uint64
	ts  float64
}

// replayPlan is what to do with a whole replay answer.
type replayPlan struct {
	restart bool   // a new publisher: reset the index first
	again   bool   // ... and ask for its batches from 0 (the answer did not start there)
	from    int    // items[from:] are applied, in order
	lost    string // batches the index needs are gone ("" if none)
}

// decideReplayAnswer judges a replay answer (its batches in the order
// sent, oldest first). started, next and lastTS describe the index: what
// it applied last (lastTS is that batch's ts). verify: the answer is the
// one asked for from the index's last batch (next-1) after a reconnect,
// to tell whether the publisher is still the one the index follows: a
// restarted engine's publisher numbers from 0 again, so its buffer either
// lacks that number (it is behind) or holds another batch under it.
// need > 0: a known gap ends below need, which the answer must reach.
func decideReplayAnswer(started bool, next uint64, lastTS float64, verify bool, need uint64, items []replayKey) replayPlan {
	for i := 1; i < len(items); i++ {
		if items[i].seq != items[i-1].seq+1 {
			return replayPlan{from: len(items), lost: fmt.Sprintf("the replay answer skips from batch %d to %d", items[i-1].seq, items[i].seq)}
		}
	}
	if verify && started && next > 0 {
		last := next - 1
		switch {
		case len(items) > 0 && items[0].seq == last && items[0].ts == lastTS:
			return replayPlan{from: 1} // the same publisher
		case len(items) == 0 || items[0].seq == last:
			// Behind us, or another batch under our last number: a
			// restarted publisher. Its batches from 0 are needed, unless
			// this answer (asked from 0) is them.
			if last == 0 && len(items) > 0 {
				return replayPlan{restart: true}
			}
			return replayPlan{restart: true, again: true, from: len(items)}
		default:
			return replayPlan{from: len(items), lost: fmt.Sprintf("the replay buffer starts at batch %d, after the last one applied (%d)", items[0].seq, last)}
		}
	}
	i := 0
	for i < len(items) && items[i].seq < next {
		i++
	}
	if i < len(items) && items[i].seq > next {
		return replayPlan{from: len(items), lost: fmt.Sprintf("the replay buffer starts at batch %d, batch %d is gone", items[i].seq, next)}
	}
	reached := next
	if i < len(items) {
		reached = items[len(items)-1].seq + 1
	}
	if need > reached {
		return replayPlan{from: len(items), lost: fmt.Sprintf("the replay ends at batch %d, before the missing batch %d", int64(reached)-1, need-1)}
	}
	return replayPlan{from: i}
}

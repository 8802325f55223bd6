package loadgen

import (
	"fmt"
	"math/rand/v2"
)

// synth draws the pieces of a synthetic dataset (Random,
// GeneratedSharedPrefix, Mixed) from one rng: token ids from
// [minID, vocab) beside word text of the same token count, so a dataset
// stays reproducible from its seed.
type synth struct {
	rng          *rand.Rand
	wt           *wordText
	minID, vocab int
}

// newSynth checks and defaults the id range the datasets share (Vocab 0:
// 1000; MinID 0 with a larger vocabulary: 256, above the demo
// tokenizer's raw-byte tokens) and seeds the rng with the dataset's own
// stream, so two datasets of one seed differ.
func newSynth(seed, stream uint64, minID, vocab int, count TokenCounter) (*synth, error) {
	if vocab == 0 {
		vocab = 1000
	}
	if minID == 0 && vocab > 256 {
		minID = 256
	}
	if minID < 0 || minID >= vocab {
		return nil, fmt.Errorf("token id range [%d, %d) is empty", minID, vocab)
	}
	return &synth{rng: rand.New(rand.NewPCG(seed, stream)), wt: newWordText(count), minID: minID, vocab: vocab}, nil
}

// piece is n random token ids, then random text costing n tokens.
func (s *synth) piece(n int) ([]int32, string) {
	ids := make([]int32, n)
	for j := range ids {
		ids[j] = int32(s.minID + s.rng.IntN(s.vocab-s.minID))
	}
	return ids, s.wt.text(s.rng, n)
}

// upTo is a length drawn from [n·ratio, n] (at least 1), as
// generated-shared-prefix draws its lengths.
func (s *synth) upTo(n int, ratio float64) int {
	lo := max(1, int(float64(n)*ratio))
	return lo + s.rng.IntN(n-lo+1)
}

// sysPrompt is a system prompt several requests share.
type sysPrompt struct {
	ids  []int32
	text string
}

// conversation is a request that opens with sys, then "\n\n" (one token,
// minID) and a question of about qLen tokens, asking for about outLen;
// with turns > 1 it goes on for that many turns, each a question of its
// own. Lengths are drawn with upTo(·, ratio).
func (s *synth) conversation(sys sysPrompt, qLen, outLen, turns int, ratio float64) Prompt {
	qIDs, qText := s.piece(s.upTo(qLen, ratio))
	p := Prompt{Text: sys.text + "\n\n" + qText, OutputLen: s.upTo(outLen, ratio)}
	p.IDs = append(append(append(make([]int32, 0, len(sys.ids)+1+len(qIDs)), sys.ids...), int32(s.minID)), qIDs...)
	p.InputLen = len(p.IDs)
	for range turns - 1 {
		tIDs, tText := s.piece(s.upTo(qLen, ratio))
		p.Turns = append(p.Turns, Turn{Text: tText, IDs: tIDs, OutputLen: s.upTo(outLen, ratio)})
	}
	return p
}

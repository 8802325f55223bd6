package loadgen

import (
	"math/rand/v2"
	"strings"
)

// TokenCounter counts the tokens text costs on the served model's
// tokenizer (no special tokens, no chat template). loadgen imports no
// tokenizer: the caller that knows the model passes one (cmd/tsd uses
// gateway/tokenizer on the profile's tokenizer).
type TokenCounter func(text string) int

// fillers end a text whose budget no word fits: single letters, which
// every byte-level BPE we know encodes as one token after a space.
var fillers = strings.Fields("a b c d e f g h i j k l m n o p q r s t u v w x y z")

// wordText draws random word text to a token budget. Without a counter a
// word counts as one token (the words are short and common, which a
// large vocabulary encodes whole); with one, each word's cost is counted
// once, at the start of a text and after a space, and a text is built
// word by word to its budget. That is exact for the byte-level BPEs whose
// pre-tokenizer splits before " word" (GPT-2, Llama 3, Qwen), since a
// word's tokens then never depend on its neighbours.
type wordText struct {
	// lead[i], inner[i]: the tokens of words[i] first in a text, and after
	// a space. fillLead, fillInner: the same for fillers.
	lead, inner         []int
	fillLead, fillInner []int
}

func newWordText(count TokenCounter) *wordText {
	w := &wordText{}
	costs := func(list []string) (lead, inner []int) {
		lead, inner = make([]int, len(list)), make([]int, len(list))
		for i, word := range list {
			if count == nil {
				lead[i], inner[i] = 1, 1
				continue
			}
			lead[i], inner[i] = max(1, count(word)), max(1, count(" "+word))
		}
		return lead, inner
	}
	w.lead, w.inner = costs(words)
	w.fillLead, w.fillInner = costs(fillers)
	return w
}

// text is random words costing n tokens (fewer only when no word or
// filler fits what is left), drawn from rng.
func (w *wordText) text(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 5)
	for left := n; left > 0; {
		first := b.Len() == 0
		cost := w.inner
		if first {
			cost = w.lead
		}
		i := rng.IntN(len(words))
		word, c := words[i], cost[i]
		if c > left {
			if word, c = w.fit(rng, left, first); word == "" {
				break
			}
		}
		if !first {
			b.WriteByte(' ')
		}
		b.WriteString(word)
		left -= c
	}
	return b.String()
}

// fit is a random word, else a filler, costing at most left, preferring
// what fills the budget exactly, else the largest that fits ("" if none).
func (w *wordText) fit(rng *rand.Rand, left int, first bool) (string, int) {
	cost, fcost := w.inner, w.fillInner
	if first {
		cost, fcost = w.lead, w.fillLead
	}
	var best []string
	bestCost := 0
	for _, set := range []struct {
		list []string
		cost []int
	}{{words, cost}, {fillers, fcost}} {
		for i, c := range set.cost {
			switch {
			case c > left || c < bestCost:
			case c > bestCost:
				best, bestCost = []string{set.list[i]}, c
			default:
				best = append(best, set.list[i])
			}
		}
	}
	if len(best) == 0 {
		return "", 0
	}
	return best[rng.IntN(len(best))], bestCost
}

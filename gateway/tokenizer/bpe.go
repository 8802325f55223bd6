package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

type pair struct{ a, b int32 }

type merge struct {
	rank int32
	id   int32
}

// bpe is the BPE model of tokenizer.json.
type bpe struct {
	vocab        map[string]int32
	merges       map[pair]merge
	ignoreMerges bool // whole words found in the vocab skip merging (Llama 3)
	byteFallback bool // unknown runes become <0xXX> tokens
	unkID        int32
	hasUnk       bool
	byteIDs      [256]int32 // <0xXX> ids for byte fallback, -1 when absent
	// byteLevelWords: words arrive as raw text and get the ByteLevel
	// mapping here, on a cache miss only.
	byteLevelWords bool

	mu       sync.Mutex
	cache    map[string][]int32
	cacheCap int
}

func parseBPE(file string, raw json.RawMessage, cacheWords int) (*bpe, error) {
	var m struct {
		Type                    string           `json:"type"`
		Vocab                   map[string]int32 `json:"vocab"`
		Merges                  json.RawMessage  `json:"merges"`
		UnkToken                *string          `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
		ByteFallback            bool             `json:"byte_fallback"`
		IgnoreMerges            bool             `json:"ignore_merges"`
	}
	if typ, err := typed(raw); err != nil {
		return nil, fmt.Errorf("parse %s: model: %w", file, err)
	} else if typ != "BPE" {
		return nil, unsupported(file, "model.type", fmt.Sprintf("model %q (only BPE is implemented)", typ))
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("parse %s: model: %w", file, err)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, unsupported(file, "model.continuing_subword_prefix", "non-empty continuing_subword_prefix")
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, unsupported(file, "model.end_of_word_suffix", "non-empty end_of_word_suffix")
	}
	if cacheWords <= 0 {
		cacheWords = 1 << 16
	}
	b := &bpe{
		vocab:        m.Vocab,
		ignoreMerges: m.IgnoreMerges,
		byteFallback: m.ByteFallback,
		cache:        map[string][]int32{},
		cacheCap:     cacheWords,
	}
	for i := range b.byteIDs {
		b.byteIDs[i] = -1
		if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.byteIDs[i] = id
		}
	}
	if m.UnkToken != nil {
		if id, ok := m.Vocab[*m.UnkToken]; ok {
			b.unkID, b.hasUnk = id, true
		}
	}
	// Merges are "a b" strings in older files and [a, b] pairs in newer
	// ones; decode the whole list in one go (per-entry decoding is slow
	// for 280k merges).
	var pairs [][2]string
	var strs []string
	if err := json.Unmarshal(m.Merges, &strs); err == nil {
		pairs = make([][2]string, len(strs))
		for i, s := range strs {
			l, r, ok := strings.Cut(s, " ")
			if !ok {
				return nil, &fieldError{file, fmt.Sprintf("model.merges[%d]", i), fmt.Sprintf("merge %q has no space", s)}
			}
			pairs[i] = [2]string{l, r}
		}
	} else if len(m.Merges) > 0 && string(m.Merges) != "null" {
		if err := json.Unmarshal(m.Merges, &pairs); err != nil {
			return nil, &fieldError{file, "model.merges", "neither [\"a b\", ...] nor [[a, b], ...]"}
		}
	}
	b.merges = make(map[pair]merge, len(pairs))
	for i, p := range pairs {
		l, rr := p[0], p[1]
		a, okA := m.Vocab[l]
		c, okB := m.Vocab[rr]
		id, okM := m.Vocab[l+rr]
		if !okA || !okB || !okM {
			return nil, &fieldError{file, fmt.Sprintf("model.merges[%d]", i), fmt.Sprintf("merge %q + %q refers to tokens not in the vocabulary", l, rr)}
		}
		if _, dup := b.merges[pair{a, c}]; !dup {
			b.merges[pair{a, c}] = merge{rank: int32(i), id: id}
		}
	}
	return b, nil
}

const maxCachedWord = 256

// word tokenizes one pre-token, through the bounded cache.
func (b *bpe) word(w string, dst []int32) []int32 {
	b.mu.Lock()
	ids, ok := b.cache[w]
	b.mu.Unlock()
	if ok {
		return append(dst, ids...)
	}
	if b.byteLevelWords {
		ids = b.merge(byteLevelEncode(w))
	} else {
		ids = b.merge(w)
	}
	if len(w) > maxCachedWord {
		// Long runs (whitespace, repeated characters) rarely repeat and
		// would let a few requests pin a lot of memory.
		return append(dst, ids...)
	}
	b.mu.Lock()
	if len(b.cache) >= b.cacheCap {
		// Dropping everything is crude but bounded and cheap; hot words
		// come back within a few requests.
		clear(b.cache)
	}
	b.cache[w] = ids
	b.mu.Unlock()
	return append(dst, ids...)
}

func (b *bpe) merge(w string) []int32 {
	if b.ignoreMerges {
		if id, ok := b.vocab[w]; ok {
			return []int32{id}
		}
	}
	syms := make([]int32, 0, utf8.RuneCountInString(w))
	var buf [4]byte
	for i, r := range w {
		ch := w[i : i+utf8.RuneLen(r)]
		if r == utf8.RuneError && len(ch) == 1 {
			ch = w[i : i+1]
		}
		if id, ok := b.vocab[ch]; ok {
			syms = append(syms, id)
			continue
		}
		if b.byteFallback {
			n := utf8.EncodeRune(buf[:], r)
			okAll := true
			for _, c := range buf[:n] {
				if b.byteIDs[c] < 0 {
					okAll = false
				}
			}
			if okAll {
				for _, c := range buf[:n] {
					syms = append(syms, b.byteIDs[c])
				}
				continue
			}
		}
		if b.hasUnk {
			// HF fuses nothing here unless fuse_unk; one unk per rune.
			syms = append(syms, b.unkID)
		}
	}
	if len(syms) > 48 {
		return b.mergeHeap(syms)
	}
	return b.mergeLoop(syms)
}

// mergeLoop merges the lowest-ranked adjacent pair (leftmost on ties)
// until none is left: HF's order, in O(n²), fastest for short words.
func (b *bpe) mergeLoop(syms []int32) []int32 {
	for len(syms) > 1 {
		best, bestAt := merge{rank: -1}, -1
		for i := 0; i+1 < len(syms); i++ {
			if m, ok := b.merges[pair{syms[i], syms[i+1]}]; ok && (bestAt < 0 || m.rank < best.rank) {
				best, bestAt = m, i
			}
		}
		if bestAt < 0 {
			break
		}
		syms[bestAt] = best.id
		syms = append(syms[:bestAt+1], syms[bestAt+2:]...)
	}
	return syms
}

// cand is a possible merge of the symbol at pos with its right neighbour.
type cand struct {
	rank, pos, l, r int32
}

func candLess(a, b cand) bool { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos) }

// mergeHeap is the same merge order as the quadratic loop (lowest rank,
// then leftmost) with a heap over a linked list: O(n log n), so a
// megabyte-long whitespace run stays cheap.
func (b *bpe) mergeHeap(syms []int32) []int32 {
	n := len(syms)
	next := make([]int32, n)
	prev := make([]int32, n)
	alive := make([]bool, n)
	for i := range syms {
		next[i], prev[i], alive[i] = int32(i+1), int32(i-1), true
	}
	next[n-1] = -1
	var h []cand
	push := func(c cand) {
		h = append(h, c)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !candLess(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() cand {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < len(h) && candLess(h[l], h[m]) {
				m = l
			}
			if r < len(h) && candLess(h[r], h[m]) {
				m = r
			}
			if m == i {
				break
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
		return top
	}
	consider := func(i int32) {
		if i < 0 || next[i] < 0 {
			return
		}
		if m, ok := b.merges[pair{syms[i], syms[next[i]]}]; ok {
			push(cand{rank: m.rank, pos: i, l: syms[i], r: syms[next[i]]})
		}
	}
	for i := 0; i+1 < n; i++ {
		consider(int32(i))
	}
	for len(h) > 0 {
		c := pop()
		i := c.pos
		j := next[i]
		if !alive[i] || j < 0 || syms[i] != c.l || syms[j] != c.r {
			continue // stale: a neighbour changed since this was pushed
		}
		syms[i] = b.merges[pair{c.l, c.r}].id
		alive[j] = false
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		consider(prev[i])
		consider(i)
	}
	out := make([]int32, 0, n/2)
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

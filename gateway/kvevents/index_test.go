package kvevents

import (
	"errors"
	"testing"
)

// seq is tokens base, base+1, … (n of them).
func seq(base, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(base + i)
	}
	return out
}

func cat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// stored is what the engine sends when it caches the whole pages of
// tokens: one BlockStored per page, hashed and chained as TokenSpeed does.
func stored(tokens []int32, bs int) []Event {
	var out []Event
	var parent uint64
	has := false
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		page := tokens[i*bs : (i+1)*bs]
		h := BlockHash(page, parent, has)
		out = append(out, Event{Kind: KindBlockStored, BlockHashes: []uint64{h}, ParentHash: parent, HasParent: has, TokenIDs: page, BlockSize: bs})
		parent, has = h, true
	}
	return out
}

// hashes are the block hashes of tokens' whole pages.
func hashes(tokens []int32, bs int) []uint64 {
	var out []uint64
	for _, e := range stored(tokens, bs) {
		out = append(out, e.BlockHashes[0])
	}
	return out
}

func removed(hs ...uint64) []Event {
	return []Event{{Kind: KindBlockRemoved, BlockHashes: hs}}
}

func match(x *Index, prompt []int32) int {
	return x.Match(prompt, PageKeys(nil, prompt, x.BlockSize()))
}

func TestIndexMatch(t *testing.T) {
	// Each row applies batches to an empty index, then matches prompts.
	const bs = 4
	sys := seq(100, 8) // two pages
	a := seq(500, 8)   // two more
	b := seq(900, 8)   // a different continuation
	hsA := hashes(cat(sys, a), bs)
	type probe struct {
		prompt []int32
		want   int
	}
	rows := []struct {
		name    string
		batches [][]Event
		blocks  int
		probes  []probe
	}{
		{"empty", nil, 0, []probe{{cat(sys, a), 0}}},
		{"whole pages, not the last token", [][]Event{stored(cat(sys, a), bs)}, 4, []probe{
			{cat(sys, a), 12},            // 16 tokens: (16-1)/4 = 3 pages at most
			{cat(sys, a, seq(1, 1)), 16}, // one more token: all four
			{cat(sys, seq(1, 5)), 8},     // shares the system prompt only
			{sys[:7], 4},                 // shorter than the cached prefix
			{seq(7000, 20), 0},           // nothing in common
		}},
		{"a partial page never matches", [][]Event{stored(cat(sys, a), bs)}, 4, []probe{
			{cat(sys, a[:3], seq(1, 3)), 8},
		}},
		{"two branches", [][]Event{stored(cat(sys, a), bs), stored(cat(sys, b), bs)}, 6, []probe{
			{cat(sys, a, seq(1, 1)), 16},
			{cat(sys, b, seq(1, 1)), 16},
		}},
		{"stored twice counts once", [][]Event{stored(cat(sys, a), bs), stored(cat(sys, a), bs)}, 4, []probe{
			{cat(sys, a, seq(1, 1)), 16},
		}},
		{"leaf removed", [][]Event{stored(cat(sys, a), bs), removed(hsA[3])}, 3, []probe{
			{cat(sys, a, seq(1, 1)), 12},
		}},
		{"middle removed: the rest is unreachable", [][]Event{stored(cat(sys, a), bs), removed(hsA[1])}, 3, []probe{
			{cat(sys, a, seq(1, 1)), 4},
		}},
		{"middle stored again: reachable again", [][]Event{stored(cat(sys, a), bs), removed(hsA[1]), stored(sys, bs)}, 4, []probe{
			{cat(sys, a, seq(1, 1)), 16},
		}},
		{"child before parent (out of order) links when the parent comes", [][]Event{stored(cat(sys, a), bs)[2:], stored(sys, bs)}, 4, []probe{
			{cat(sys, a, seq(1, 1)), 16},
		}},
		{"unknown removal is ignored", [][]Event{stored(sys, bs), removed(12345)}, 2, []probe{
			{cat(sys, seq(1, 1)), 8},
		}},
		{"all cleared", [][]Event{stored(cat(sys, a), bs), {{Kind: KindAllBlocksCleared}}}, 0, []probe{
			{cat(sys, a, seq(1, 1)), 0},
		}},
		{"cleared then stored", [][]Event{stored(cat(sys, a), bs), {{Kind: KindAllBlocksCleared}}, stored(sys, bs)}, 2, []probe{
			{cat(sys, a, seq(1, 1)), 8},
		}},
		{"several hashes in one event (vLLM's shape)", [][]Event{{{Kind: KindBlockStored, BlockHashes: hashes(sys, bs), TokenIDs: sys, BlockSize: bs}}}, 2, []probe{
			{cat(sys, seq(1, 1)), 8},
		}},
		{"same hash, other content: replaced", [][]Event{stored(sys, bs), {{Kind: KindBlockStored, BlockHashes: []uint64{hashes(sys, bs)[0]}, TokenIDs: seq(1, 4), BlockSize: bs}}}, 2, []probe{
			{cat(sys, seq(1, 1)), 0},
			{cat(seq(1, 4), sys[4:], seq(1, 1)), 8},
		}},
		{"unknown kinds are skipped", [][]Event{{{Kind: KindUnknown, Tag: "BlockUpdated"}}, stored(sys, bs)}, 2, []probe{
			{cat(sys, seq(1, 1)), 8},
		}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			x := NewIndex(0)
			for i, b := range r.batches {
				if _, err := x.Apply(b); err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
			}
			if got := x.Blocks(); got != r.blocks {
				t.Errorf("Blocks = %d, want %d", got, r.blocks)
			}
			for _, p := range r.probes {
				if got := match(x, p.prompt); got != p.want {
					t.Errorf("Match(%v) = %d, want %d", p.prompt, got, p.want)
				}
			}
		})
	}
}

func TestIndexRefuses(t *testing.T) {
	// Events that would break the index are refused with a reason, the
	// index left as before the event.
	const bs = 4
	rows := []struct {
		name  string
		pre   []Event
		ev    Event
		want  string
		isErr error
	}{
		{"token count", nil, Event{Kind: KindBlockStored, BlockHashes: []uint64{1}, TokenIDs: seq(0, 3), BlockSize: bs}, "3 token ids for 1 block(s) of 4", nil},
		{"no hashes", nil, Event{Kind: KindBlockStored, TokenIDs: seq(0, 4), BlockSize: bs}, "no block hashes", nil},
		{"block size zero", nil, Event{Kind: KindBlockStored, BlockHashes: []uint64{1}, BlockSize: 0}, "out of range", nil},
		{"block size huge", nil, Event{Kind: KindBlockStored, BlockHashes: []uint64{1}, BlockSize: MaxBlockSize + 1}, "out of range", nil},
		{"block size changes", stored(seq(0, 4), bs), Event{Kind: KindBlockStored, BlockHashes: []uint64{9}, TokenIDs: seq(0, 8), BlockSize: 8}, "block size changed", ErrBlockSize},
		{"over the cap", stored(seq(0, 12), bs), Event{Kind: KindBlockStored, BlockHashes: []uint64{9, 10}, TokenIDs: seq(50, 8), BlockSize: bs}, "more tokens than its cap", ErrFull},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			x := NewIndex(16)
			if _, err := x.Apply(r.pre); err != nil {
				t.Fatal(err)
			}
			before := x.Blocks()
			_, err := x.Apply([]Event{r.ev})
			if err == nil || !contains(err.Error(), r.want) {
				t.Fatalf("err = %v, want %q", err, r.want)
			}
			if r.isErr != nil && !errors.Is(err, r.isErr) {
				t.Fatalf("err = %v, not %v", err, r.isErr)
			}
			if x.Blocks() != before {
				t.Fatalf("blocks %d → %d", before, x.Blocks())
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestIndexRemovalKeepsAccounting(t *testing.T) {
	// Removing every block in any order empties the index and its token
	// count, so the cap never drifts.
	const bs = 4
	sys, a, b := seq(100, 8), seq(500, 8), seq(900, 8)
	x := NewIndex(64)
	for _, tk := range [][]int32{cat(sys, a), cat(sys, b)} {
		if _, err := x.Apply(stored(tk, bs)); err != nil {
			t.Fatal(err)
		}
	}
	all := append(hashes(cat(sys, a), bs), hashes(cat(sys, b), bs)[2:]...)
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {1, 4, 0, 5, 3, 2}} {
		y := NewIndex(64)
		_, _ = y.Apply(stored(cat(sys, a), bs))
		_, _ = y.Apply(stored(cat(sys, b), bs))
		for _, i := range order {
			if _, err := y.Apply(removed(all[i])); err != nil {
				t.Fatal(err)
			}
		}
		if y.Blocks() != 0 || y.tokens != 0 || len(y.orphans) != 0 || len(y.root.children) != 0 {
			t.Fatalf("order %v: blocks %d tokens %d orphans %d roots %d", order, y.Blocks(), y.tokens, len(y.orphans), len(y.root.children))
		}
		// And the full set fits again.
		if _, err := y.Apply(stored(cat(sys, a), bs)); err != nil {
			t.Fatal(err)
		}
	}
	if x.tokens != 24 {
		t.Fatalf("tokens = %d, want 24", x.tokens)
	}
}

func TestPageKeyCollisionsAreToldApart(t *testing.T) {
	// Two siblings whose page keys collide are still matched by tokens.
	const bs = 2
	x := NewIndex(0)
	p1, p2 := []int32{1, 2}, []int32{3, 4}
	n1 := &node{hash: 1, key: 7, tokens: p1}
	n2 := &node{hash: 2, key: 7, tokens: p2}
	x.blockSize = bs
	x.byHash[1], x.byHash[2] = n1, n2
	x.link(&x.root, n1)
	x.link(&x.root, n2)
	for _, p := range [][]int32{p1, p2} {
		if got := x.Match(append(append([]int32{}, p...), 0), []uint64{7}); got != 2 {
			t.Errorf("Match(%v) = %d, want 2", p, got)
		}
	}
	x.remove(2)
	if got := x.Match([]int32{1, 2, 0}, []uint64{7}); got != 2 {
		t.Errorf("after removing the sibling: %d", got)
	}
	if got := x.Match([]int32{3, 4, 0}, []uint64{7}); got != 0 {
		t.Errorf("removed sibling still matches: %d", got)
	}
}

func BenchmarkIndexMatch(b *testing.B) {
	// A 2,048-token prompt against a rank holding it: Match itself
	// allocates nothing beyond the caller's key buffer.
	const bs = 64
	prompt := seq(1000, 2048+128)
	x := NewIndex(0)
	_, _ = x.Apply(stored(prompt[:2048], bs))
	keys := make([]uint64, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		keys = PageKeys(keys[:0], prompt, bs)
		if x.Match(prompt, keys) != 2048 {
			b.Fatal("no match")
		}
	}
}

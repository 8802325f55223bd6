package main

import (
	"slices"
	"testing"

	"github.com/tsd-project/tsd/gateway/kvevents"
)

func toks(base, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(base + i)
	}
	return out
}

func join(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// prefill stores a prompt's whole pages as a prefill does, then releases
// them (the request ended).
func prefill(c *prefixCache, prompt []int32) (cached int) {
	cached, pins := c.match(prompt)
	stored := c.store(prompt, len(prompt)/c.page)
	c.unpin(pins)
	c.unpin(stored)
	return cached
}

func TestPrefixCacheMatch(t *testing.T) {
	// What a second prompt finds of the first: whole pages, never the
	// last token, only along the same prefix.
	const page = 4
	a := toks(100, 12) // three pages
	rows := []struct {
		name   string
		prompt []int32
		want   int
	}{
		{"same prompt: all but the last page (its last token is recomputed)", a, 8},
		{"one token longer: every page", join(a, toks(1, 1)), 12},
		{"partial last page", join(a[:10], toks(1, 3)), 8},
		{"shares two pages", join(a[:8], toks(1, 9)), 8},
		{"differs in the first page", join(toks(1, 1), a[1:], toks(1, 1)), 0},
		{"shorter than a page", a[:3], 0},
		{"exactly one page", a[:4], 0},
		{"one page and one token", a[:5], 4},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			c := newPrefixCache(page, 1000, false)
			prefill(c, a)
			if got, pins := c.match(r.prompt); got != r.want || len(pins)*page != got {
				t.Fatalf("match = %d (%d pins), want %d", got, len(pins), r.want)
			}
		})
	}
}

func TestPrefixCacheLRU(t *testing.T) {
	// At capacity the least recently used leaf goes first; a page in use
	// is never evicted; a prompt that finds no room is cached as far as
	// there is room.
	const page = 4
	a, b, c3 := toks(100, 8), toks(200, 8), toks(300, 8) // two pages each
	t.Run("evicts the least recently used", func(t *testing.T) {
		c := newPrefixCache(page, 16, true) // four pages
		prefill(c, a)
		prefill(c, b)
		prefill(c, join(a, toks(1, 1))) // a used again
		prefill(c, c3)                  // needs two pages: b's go
		if got := prefill(c, join(a, toks(1, 1))); got != 8 {
			t.Errorf("a: %d cached, want 8", got)
		}
		if got := prefill(c, join(b, toks(1, 1))); got != 0 {
			t.Errorf("b: %d cached, want 0 (evicted)", got)
		}
		if c.size() > 4 {
			t.Errorf("size %d over capacity 4", c.size())
		}
	})
	t.Run("leaf first", func(t *testing.T) {
		c := newPrefixCache(page, 16, true)
		prefill(c, a)
		prefill(c, b)
		prefill(c, toks(400, 4)) // one page: b's leaf... the LRU leaf is a's
		if got, _ := c.match(join(a, toks(1, 1))); got != 4 {
			t.Errorf("a: %d cached, want 4 (its leaf evicted, its root kept)", got)
		}
	})
	t.Run("pinned pages stay", func(t *testing.T) {
		c := newPrefixCache(page, 8, true) // two pages
		_, pins := c.match(a)
		stored := c.store(a, 2) // a's request still runs
		prefill(c, b)           // no room: b is not cached
		if got, _ := c.match(join(b, toks(1, 1))); got != 0 {
			t.Errorf("b cached %d while a held every page", got)
		}
		c.unpin(pins)
		c.unpin(stored)
		prefill(c, b)
		if got, _ := c.match(join(b, toks(1, 1))); got != 8 {
			t.Errorf("b: %d cached once a ended, want 8", got)
		}
	})
	t.Run("capacity below a page caches nothing", func(t *testing.T) {
		c := newPrefixCache(page, 3, true)
		prefill(c, a)
		if c.size() != 0 {
			t.Fatalf("size %d", c.size())
		}
	})
}

func TestPrefixCacheEvents(t *testing.T) {
	// Each stored page is one BlockStored with the engine's chained hash
	// and its parent's; each eviction one BlockRemoved; a clear with
	// nothing in use one AllBlocksCleared.
	const page = 4
	a, b := toks(100, 8), toks(200, 8)
	c := newPrefixCache(page, 8, true)
	prefill(c, a)
	evs := c.takeEvents()
	h0 := kvevents.BlockHash(a[:4], 0, false)
	h1 := kvevents.BlockHash(a[4:], h0, true)
	want := []kvevents.Event{
		{Kind: kvevents.KindBlockStored, BlockHashes: []uint64{h0}, TokenIDs: a[:4], BlockSize: page},
		{Kind: kvevents.KindBlockStored, BlockHashes: []uint64{h1}, ParentHash: h0, HasParent: true, TokenIDs: a[4:], BlockSize: page},
	}
	if !equalEvents(evs, want) {
		t.Fatalf("events %+v, want %+v", evs, want)
	}
	prefill(c, b)
	evs = c.takeEvents()
	var removed []uint64
	for _, e := range evs {
		if e.Kind == kvevents.KindBlockRemoved {
			removed = append(removed, e.BlockHashes...)
		}
	}
	if !slices.Equal(removed, []uint64{h1, h0}) {
		t.Fatalf("removed %x, want leaf then root %x %x", removed, h1, h0)
	}
	c.clear()
	if evs := c.takeEvents(); len(evs) != 1 || evs[0].Kind != kvevents.KindAllBlocksCleared || c.size() != 0 {
		t.Fatalf("clear: %+v, size %d", evs, c.size())
	}
	// Without --kv-events-config nothing is recorded.
	q := newPrefixCache(page, 8, false)
	prefill(q, a)
	if evs := q.takeEvents(); len(evs) != 0 {
		t.Fatalf("recorded %d events without a publisher", len(evs))
	}
}

func equalEvents(a, b []kvevents.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Kind != y.Kind || !slices.Equal(x.BlockHashes, y.BlockHashes) || x.HasParent != y.HasParent || x.ParentHash != y.ParentHash ||
			!slices.Equal(x.TokenIDs, y.TokenIDs) || x.BlockSize != y.BlockSize {
			return false
		}
	}
	return true
}

// size is how many pages the cache holds.
func (c *prefixCache) size() int { return len(c.byHash) }

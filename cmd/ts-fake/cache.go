package main

import (
	"container/list"
	"slices"

	"github.com/tsd-project/tsd/gateway/kvevents"
)

// prefixCache is one DP rank's prefix cache, as TokenSpeed's scheduler
// keeps it (docs/protocol.md §16.6): whole pages of `page` tokens, each
// named by the engine's chained block hash, at most `capacity` pages,
// least recently used leaf pages evicted first, pages in use by a request
// never evicted. Every page stored or evicted becomes a KV event. Only
// the rank's scheduler goroutine touches it.
type prefixCache struct {
	page     int
	capacity int // pages
	byHash   map[uint64]*cachedPage
	lru      *list.List // of *cachedPage, most recently used at the front
	events   []kvevents.Event
	record   bool // collect events (--kv-events-config)
}

type cachedPage struct {
	hash     uint64
	parent   *cachedPage // nil for a prompt's first page
	tokens   []int32
	children int // cached pages under it: a page is evictable only as a leaf
	pins     int // requests using it
	elem     *list.Element
}

func newPrefixCache(page, capacityTokens int, record bool) *prefixCache {
	return &prefixCache{page: page, capacity: max(0, capacityTokens/max(page, 1)), byHash: map[uint64]*cachedPage{},
		lru: list.New(), record: record}
}

// pages walks tokens' whole pages, calling f with each page's chained
// hash; f returns false to stop.
func (c *prefixCache) pages(tokens []int32, n int, f func(i int, h uint64, page []int32) bool) {
	var parent uint64
	has := false
	for i := range n {
		page := tokens[i*c.page : (i+1)*c.page]
		h := kvevents.BlockHash(page, parent, has)
		if !f(i, h, page) {
			return
		}
		parent, has = h, true
	}
}

// match is the cached prefix the engine reuses for a prompt at admission:
// whole pages, never the prompt's last token (the engine always computes
// it for the logits). The pages are pinned for the caller (release them
// with unpin) and marked used.
func (c *prefixCache) match(prompt []int32) (tokens int, pinned []*cachedPage) {
	if c.page <= 0 || len(prompt) <= 1 {
		return 0, nil
	}
	c.pages(prompt, (len(prompt)-1)/c.page, func(_ int, h uint64, page []int32) bool {
		p, ok := c.byHash[h]
		if !ok || !slices.Equal(p.tokens, page) {
			return false
		}
		pinned = append(pinned, p)
		return true
	})
	c.use(pinned)
	for _, p := range pinned {
		p.pins++
	}
	return len(pinned) * c.page, pinned
}

// use marks a chain of pages (root first) used, each parent more
// recent than its children, so eviction takes a chain from its leaf up.
func (c *prefixCache) use(ps []*cachedPage) {
	for i := len(ps) - 1; i >= 0; i-- {
		c.lru.MoveToFront(ps[i].elem)
	}
}

func (c *prefixCache) unpin(ps []*cachedPage) {
	for _, p := range ps {
		if p.pins > 0 {
			p.pins--
		}
	}
}

// store caches the first n whole pages of tokens (those not cached yet),
// evicting as needed; a page that finds no room is not cached, nor is
// anything after it. The pages stored or found are pinned for the caller.
func (c *prefixCache) store(tokens []int32, n int) (pinned []*cachedPage) {
	if c.page <= 0 {
		return nil
	}
	var parent *cachedPage
	c.pages(tokens, n, func(_ int, h uint64, page []int32) bool {
		p, ok := c.byHash[h]
		if ok && slices.Equal(p.tokens, page) {
			pinned = append(pinned, p)
			p.pins++
			parent = p
			return true
		}
		if ok || !c.makeRoom() {
			return false
		}
		p = &cachedPage{hash: h, parent: parent, tokens: slices.Clone(page), pins: 1}
		p.elem = c.lru.PushFront(p)
		c.byHash[h] = p
		if parent != nil {
			parent.children++
		}
		if c.record {
			ev := kvevents.Event{Kind: kvevents.KindBlockStored, BlockHashes: []uint64{h}, TokenIDs: p.tokens, BlockSize: c.page}
			if parent != nil {
				ev.ParentHash, ev.HasParent = parent.hash, true
			}
			c.events = append(c.events, ev)
		}
		pinned = append(pinned, p)
		parent = p
		return true
	})
	c.use(pinned)
	return pinned
}

// makeRoom evicts least recently used unpinned leaves until one more page
// fits; false when everything left is in use.
func (c *prefixCache) makeRoom() bool {
	for len(c.byHash) >= c.capacity {
		var victim *cachedPage
		for e := c.lru.Back(); e != nil; e = e.Prev() {
			p := e.Value.(*cachedPage)
			if p.pins == 0 && p.children == 0 {
				victim = p
				break
			}
		}
		if victim == nil {
			return false
		}
		c.evict(victim)
	}
	return true
}

func (c *prefixCache) evict(p *cachedPage) {
	c.lru.Remove(p.elem)
	delete(c.byHash, p.hash)
	if p.parent != nil {
		p.parent.children--
	}
	if c.record {
		c.events = append(c.events, kvevents.Event{Kind: kvevents.KindBlockRemoved, BlockHashes: []uint64{p.hash}})
	}
}

// clear drops every page that is not in use (all of them when none is),
// as a cache flush does; with every page gone it says AllBlocksCleared.
func (c *prefixCache) clear() {
	inUse := false
	for _, p := range c.byHash {
		if p.pins > 0 {
			inUse = true
			break
		}
	}
	if inUse {
		for c.makeRoomAll() {
		}
		return
	}
	c.byHash = map[uint64]*cachedPage{}
	c.lru.Init()
	if c.record {
		c.events = append(c.events, kvevents.Event{Kind: kvevents.KindAllBlocksCleared})
	}
}

// makeRoomAll evicts one evictable page; false when none is left.
func (c *prefixCache) makeRoomAll() bool {
	for e := c.lru.Back(); e != nil; e = e.Prev() {
		if p := e.Value.(*cachedPage); p.pins == 0 && p.children == 0 {
			c.evict(p)
			return true
		}
	}
	return false
}

// takeEvents returns the events since the last call.
func (c *prefixCache) takeEvents() []kvevents.Event {
	ev := c.events
	c.events = nil
	return ev
}

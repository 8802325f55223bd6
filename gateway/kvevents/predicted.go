package kvevents

import (
	"slices"
	"time"
)

// Predicted blocks (docs/protocol.md §16.8): the prompts the gateway has
// sent a rank but whose blocks the rank has not published yet (they wait
// in the engine's queue or are being computed). kv_aware counts them as
// the rank's from the moment it routes there, so the next request of the
// same prefix follows instead of going elsewhere while the events lag;
// each claim expires (the engine may never store them: no room, an
// abort), is replaced by the published blocks as their BlockStored
// arrive, and goes at once with a BlockRemoved of a block on its path (the
// engine can no longer reuse anything past it).
//
// Predictions are kept in pages of PredictPage tokens, not the engine's
// block size, which is unknown until the rank's first BlockStored; a
// match is cut down to whole engine blocks once that is known.

// PredictPage is the tokens of one predicted page.
const PredictPage = 16

// DefaultMaxPredicted bounds one rank's predicted pages: 64 Ki pages (1 Mi
// tokens) is far more than a rank's queue holds between routing and
// publishing; past it the expired claims are swept, then (a flood) all.
const DefaultMaxPredicted = 1 << 16

// pnode is one predicted page under its parent page.
type pnode struct {
	key    uint64
	tokens []int32
	// until is the claim: the rank counts this page as held until then.
	// Zero: no claim of its own (its blocks are published, or it only
	// leads to deeper claims).
	until    time.Time
	children map[uint64]*pnode
	next     *pnode // the next child with the same key (a collision)
}

// predictions is one rank's predicted pages, a tree rooted at the
// prompt's first page (a prediction claims every page of its prompt, so
// its claims always start at the root).
type predictions struct {
	root  pnode
	nodes int
	max   int
}

func (p *predictions) reset() {
	p.root = pnode{}
	p.nodes = 0
}

// child is n's child holding page, or nil.
func (n *pnode) child(key uint64, page []int32) *pnode {
	for c := n.children[key]; c != nil; c = c.next {
		if slices.Equal(c.tokens, page) {
			return c
		}
	}
	return nil
}

// add claims prompt's whole pages until then.
func (p *predictions) add(prompt []int32, until time.Time, now time.Time) {
	if need := len(prompt) / PredictPage; p.nodes+need > p.max {
		p.prune(now)
		if p.nodes+need > p.max {
			p.reset() // a flood of distinct prompts: forget, the events stay exact
		}
		if need > p.max {
			prompt = prompt[:p.max*PredictPage]
		}
	}
	cur := &p.root
	for i := 0; (i+1)*PredictPage <= len(prompt); i++ {
		page := prompt[i*PredictPage : (i+1)*PredictPage]
		k := pageKey(page)
		c := cur.child(k, page)
		if c == nil {
			c = &pnode{key: k, tokens: slices.Clone(page)}
			if cur.children == nil {
				cur.children = map[uint64]*pnode{}
			}
			c.next = cur.children[k]
			cur.children[k] = c
			p.nodes++
		}
		if until.After(c.until) {
			c.until = until
		}
		cur = c
	}
}

// match is the leading tokens of prompt the rank holds, published or
// claimed: published is what its blocks cover (Index.Match), bs its block
// size (0: unknown). A page counts while its blocks are published or its
// claim is live; the walk stops at the first page that is neither. Never
// the prompt's last token, and whole engine blocks when bs is known.
func (p *predictions) match(prompt []int32, published, bs int, now time.Time) int {
	pages := MatchPages(len(prompt), PredictPage)
	cur, q := &p.root, 0
	for i := 0; i < pages && cur != nil; i++ {
		page := prompt[i*PredictPage : (i+1)*PredictPage]
		c := cur.child(pageKey(page), page)
		if (i+1)*PredictPage > published && (c == nil || !now.Before(c.until)) {
			break
		}
		q, cur = i+1, c
	}
	n := q * PredictPage
	if bs > 0 {
		n = n / bs * bs
	}
	return max(published, n)
}

// settle drops the claims of path's pages that published blocks now cover
// (its first covered tokens): those blocks are the truth from here on, and
// a BlockRemoved of them takes the pages away. Pages left without a claim
// or a child go.
func (p *predictions) settle(path []int32, covered int) {
	var chain []*pnode
	cur := &p.root
	for i := 0; (i+1)*PredictPage <= min(covered, len(path)); i++ {
		page := path[i*PredictPage : (i+1)*PredictPage]
		c := cur.child(pageKey(page), page)
		if c == nil {
			break
		}
		c.until = time.Time{}
		chain = append(chain, c)
		cur = c
	}
	for i := len(chain) - 1; i >= 0; i-- {
		c := chain[i]
		if len(c.children) > 0 || !c.until.IsZero() {
			break
		}
		parent := &p.root
		if i > 0 {
			parent = chain[i-1]
		}
		p.unlink(parent, c)
		p.nodes--
	}
}

// cut drops every claim at or past token from along path (path holds at
// least the removed block, which starts at from): the rank removed that
// block, so nothing after it on that path is reusable until computed
// again. The predicted page holding from goes whole, with every page
// under it; when the engine's blocks are smaller than a predicted page,
// path may end inside it, and every page that starts with path's tail
// goes.
func (p *predictions) cut(path []int32, from int) {
	k := from / PredictPage
	cur := &p.root
	for i := 0; i < k; i++ {
		page := path[i*PredictPage : (i+1)*PredictPage]
		if cur = cur.child(pageKey(page), page); cur == nil {
			return
		}
	}
	rest := path[k*PredictPage:]
	if len(rest) >= PredictPage {
		page := rest[:PredictPage]
		if c := cur.child(pageKey(page), page); c != nil {
			p.unlink(cur, c)
			p.nodes -= count(c)
		}
		return
	}
	var gone []*pnode
	for _, head := range cur.children {
		for c := head; c != nil; c = c.next {
			if slices.Equal(c.tokens[:len(rest)], rest) {
				gone = append(gone, c)
			}
		}
	}
	for _, c := range gone {
		p.unlink(cur, c)
		p.nodes -= count(c)
	}
}

// prune drops every subtree with no live claim.
func (p *predictions) prune(now time.Time) {
	p.nodes -= p.pruneUnder(&p.root, now)
}

// pruneUnder drops n's dead subtrees and returns how many pages went.
func (p *predictions) pruneUnder(n *pnode, now time.Time) int {
	gone := 0
	for _, head := range n.children {
		for c := head; c != nil; {
			next := c.next
			gone += p.pruneUnder(c, now)
			if len(c.children) == 0 && !now.Before(c.until) {
				p.unlink(n, c)
				gone++
			}
			c = next
		}
	}
	return gone
}

func (p *predictions) unlink(parent, c *pnode) {
	head := parent.children[c.key]
	if head == c {
		if c.next == nil {
			delete(parent.children, c.key)
		} else {
			parent.children[c.key] = c.next
		}
		c.next = nil
		return
	}
	for x := head; x != nil; x = x.next {
		if x.next == c {
			x.next = c.next
			c.next = nil
			return
		}
	}
}

// count is the pages of n's subtree, n included.
func count(n *pnode) int {
	k := 1
	for _, head := range n.children {
		for c := head; c != nil; c = c.next {
			k += count(c)
		}
	}
	return k
}

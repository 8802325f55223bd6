package kvevents

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Index is the exact set of blocks one DP rank's prefix cache holds, as
// its KV events describe it: a tree of pages linked by the parent hashes
// the events carry, each page keeping its token ids. Match walks it with a
// prompt's pages, comparing token ids, so it needs neither the engine's
// hash function nor trust in it. A removed page's children become
// unreachable from the root (the engine's own prefix match stops there
// too) until a page with their parent's hash is stored again.
//
// Beside the published blocks it keeps the rank's predicted ones
// (predicted.go): prompts routed there whose blocks are not published
// yet. MatchAt counts both; Apply settles and cuts the predictions as
// the events arrive.
//
// An Index belongs to one goroutine (the engine's owner in Subscriber);
// it has no lock.
type Index struct {
	blockSize int              // tokens per block, from the first BlockStored; 0 before
	byHash    map[uint64]*node // every block, reachable or not
	orphans   map[uint64][]*node
	root      node
	tokens    int // tokens held, for the memory cap
	maxTokens int
	pred      predictions
	path      []int32 // a reachable block's tokens from the root (settle, cut), reused
}

type node struct {
	hash      uint64
	parent    uint64 // hash of the parent block; meaningful when hasParent
	hasParent bool
	key       uint64 // pageKey(tokens)
	tokens    []int32
	up        *node            // the node it hangs under (the root for a first page); nil while orphaned
	children  map[uint64]*node // by key; a key collision chains through next
	next      *node
}

// DefaultMaxTokens bounds one rank's index: 8 Mi tokens (32 MiB of token
// ids) is several times the KV pool of a large GPU, so an honest engine
// never reaches it and a hostile publisher stops there.
const DefaultMaxTokens = 8 << 20

// MaxBlockSize is the largest block size an event may declare.
const MaxBlockSize = 1 << 16

// Errors of Apply. ErrFull and ErrBlockSize leave the index as it was
// before the offending event; the caller decides (the subscriber resets
// the rank and stops trusting it).
var (
	ErrFull      = errors.New("index holds more tokens than its cap")
	ErrBlockSize = errors.New("block size changed")
)

// NewIndex returns an empty index that holds at most maxTokens tokens (0:
// DefaultMaxTokens).
func NewIndex(maxTokens int) *Index {
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	return &Index{byHash: map[uint64]*node{}, orphans: map[uint64][]*node{}, maxTokens: maxTokens, pred: predictions{max: DefaultMaxPredicted}}
}

// Blocks is how many blocks the rank's cache holds.
func (x *Index) Blocks() int { return len(x.byHash) }

// BlockSize is the engine's block size (prefix granularity) once known.
func (x *Index) BlockSize() int { return x.blockSize }

// Reset empties the index, predictions included (AllBlocksCleared, an
// engine restart: what was queued there is gone too).
func (x *Index) Reset() {
	x.byHash = map[uint64]*node{}
	x.orphans = map[uint64][]*node{}
	x.root = node{}
	x.tokens = 0
	x.pred.reset()
}

// Predict counts prompt's pages as the rank's until now + ttl: the
// gateway just routed it there (predicted.go).
func (x *Index) Predict(prompt []int32, now time.Time, ttl time.Duration) {
	x.pred.add(prompt, now.Add(ttl), now)
}

// Predicted is how many predicted pages the rank keeps (the memory cap).
func (x *Index) Predicted() int { return x.pred.nodes }

// Prune drops the predictions whose claims expired.
func (x *Index) Prune(now time.Time) { x.pred.prune(now) }

// MatchAt is Match with the rank's live predictions counted: the leading
// tokens of prompt its published or predicted blocks cover at now.
func (x *Index) MatchAt(prompt []int32, keys []uint64, now time.Time) int {
	return x.pred.match(prompt, x.Match(prompt, keys), x.blockSize, now)
}

// pathOf is n's tokens from the root, its own page last (in x.path);
// false when n is not reachable (orphaned).
func (x *Index) pathOf(n *node) ([]int32, bool) {
	depth := 0
	c := n
	for ; c != nil && c != &x.root; c = c.up {
		depth++
	}
	if c == nil {
		return nil, false
	}
	bs := len(n.tokens)
	if cap(x.path) < depth*bs {
		x.path = make([]int32, depth*bs)
	}
	x.path = x.path[:depth*bs]
	for c, i := n, depth-1; c != &x.root; c, i = c.up, i-1 {
		copy(x.path[i*bs:], c.tokens)
	}
	return x.path, true
}

// Stats counts what Apply did not take as a change.
type Stats struct {
	UnknownRemoved int // BlockRemoved of a hash the index does not hold
	UnknownKinds   int // events of a kind this index does not know
}

// Apply takes one batch's events in order.
func (x *Index) Apply(events []Event) (Stats, error) {
	var st Stats
	for i := range events {
		e := &events[i]
		var err error
		switch e.Kind {
		case KindBlockStored:
			err = x.store(e)
		case KindBlockRemoved:
			for _, h := range e.BlockHashes {
				if !x.remove(h) {
					st.UnknownRemoved++
				}
			}
		case KindAllBlocksCleared:
			x.Reset()
		default:
			st.UnknownKinds++
		}
		if err != nil {
			return st, fmt.Errorf("events[%d] %s: %w", i, e.Kind, err)
		}
	}
	return st, nil
}

func (x *Index) store(e *Event) error {
	bs := e.BlockSize
	switch {
	case bs <= 0 || bs > MaxBlockSize:
		return fmt.Errorf("block size %d out of range", bs)
	case x.blockSize != 0 && bs != x.blockSize:
		return fmt.Errorf("%w: %d, the rank's blocks have %d tokens", ErrBlockSize, bs, x.blockSize)
	case len(e.BlockHashes) == 0:
		return errors.New("no block hashes")
	case len(e.TokenIDs) != bs*len(e.BlockHashes):
		return fmt.Errorf("%d token ids for %d block(s) of %d", len(e.TokenIDs), len(e.BlockHashes), bs)
	}
	if x.tokens+len(e.TokenIDs) > x.maxTokens {
		return fmt.Errorf("%w (%d)", ErrFull, x.maxTokens)
	}
	x.blockSize = bs
	parent, hasParent := e.ParentHash, e.HasParent
	for i, h := range e.BlockHashes {
		page := e.TokenIDs[i*bs : (i+1)*bs]
		x.storeOne(h, parent, hasParent, page)
		parent, hasParent = h, true
	}
	if x.pred.nodes > 0 {
		// The published blocks replace the claims they cover.
		if path, ok := x.pathOf(x.byHash[parent]); ok {
			x.pred.settle(path, len(path))
		}
	}
	return nil
}

func (x *Index) storeOne(h, parent uint64, hasParent bool, page []int32) {
	if old, ok := x.byHash[h]; ok {
		if old.hasParent == hasParent && old.parent == parent && slices.Equal(old.tokens, page) {
			return // stored again (a replay overlap): nothing changes
		}
		x.remove(h) // the hash now names other content: replace it
	}
	n := &node{hash: h, parent: parent, hasParent: hasParent, key: pageKey(page), tokens: slices.Clone(page)}
	x.byHash[h] = n
	x.tokens += len(page)
	x.attach(n)
	if kids := x.orphans[h]; len(kids) > 0 {
		delete(x.orphans, h)
		for _, k := range kids {
			x.link(n, k)
		}
	}
}

// attach hangs n under its parent, or parks it until the parent exists.
func (x *Index) attach(n *node) {
	if !n.hasParent {
		x.link(&x.root, n)
		return
	}
	if p, ok := x.byHash[n.parent]; ok {
		x.link(p, n)
		return
	}
	x.orphans[n.parent] = append(x.orphans[n.parent], n)
}

func (x *Index) link(p, n *node) {
	if p.children == nil {
		p.children = map[uint64]*node{}
	}
	n.up = p
	n.next = p.children[n.key]
	p.children[n.key] = n
}

// remove drops block h; its children stay in the index, orphaned.
func (x *Index) remove(h uint64) bool {
	n, ok := x.byHash[h]
	if !ok {
		return false
	}
	if x.pred.nodes > 0 {
		// Nothing past this block is reusable on that path any more:
		// no claim may keep it alive.
		if path, ok := x.pathOf(n); ok {
			x.pred.cut(path, len(path)-len(n.tokens))
		}
	}
	delete(x.byHash, h)
	x.tokens -= len(n.tokens)
	if n.up != nil {
		x.unlink(n.up, n)
	} else if n.hasParent {
		list := x.orphans[n.parent]
		if i := slices.Index(list, n); i >= 0 {
			list = slices.Delete(list, i, i+1)
		}
		if len(list) == 0 {
			delete(x.orphans, n.parent)
		} else {
			x.orphans[n.parent] = list
		}
	}
	for _, head := range n.children {
		for c := head; c != nil; {
			next := c.next
			c.up, c.next = nil, nil
			x.orphans[h] = append(x.orphans[h], c)
			c = next
		}
	}
	n.children = nil
	return true
}

func (x *Index) unlink(p, n *node) {
	head := p.children[n.key]
	if head == n {
		if n.next == nil {
			delete(p.children, n.key)
		} else {
			p.children[n.key] = n.next
		}
	} else {
		for c := head; c != nil; c = c.next {
			if c.next == n {
				c.next = n.next
				break
			}
		}
	}
	n.up, n.next = nil, nil
}

// Match is how many leading tokens of prompt the rank would reuse from
// its cache: whole blocks, never the prompt's last token (the engine
// always computes that one for its logits, so its cached_tokens for
// the prompt is at most this). keys are PageKeys(prompt, BlockSize()).
func (x *Index) Match(prompt []int32, keys []uint64) int {
	bs := x.blockSize
	if bs == 0 || len(x.byHash) == 0 {
		return 0
	}
	cur := &x.root
	n := 0
	for i, k := range keys {
		page := prompt[i*bs : (i+1)*bs]
		var next *node
		for c := cur.children[k]; c != nil; c = c.next {
			if slices.Equal(c.tokens, page) {
				next = c
				break
			}
		}
		if next == nil {
			break
		}
		cur, n = next, n+1
	}
	return n * bs
}

// MatchPages is how many whole pages of a prompt of n tokens Match looks
// at: (n - 1) / blockSize, as the engine's admission does.
func MatchPages(n, blockSize int) int {
	if blockSize <= 0 || n <= 1 {
		return 0
	}
	return (n - 1) / blockSize
}

// PageKeys appends the key of each page Match looks at to dst.
func PageKeys(dst []uint64, prompt []int32, blockSize int) []uint64 {
	for i := range MatchPages(len(prompt), blockSize) {
		dst = append(dst, pageKey(prompt[i*blockSize:(i+1)*blockSize]))
	}
	return dst
}

// pageKey is the index's own 64-bit key of a page's tokens (collisions
// are told apart by comparing the tokens).
func pageKey(page []int32) uint64 {
	h := uint64(0x9e3779b97f4a7c15) ^ uint64(len(page))
	for _, t := range page {
		h ^= uint64(uint32(t))
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	return h
}

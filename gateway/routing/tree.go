package routing

import "container/heap"

// Tree is cache_aware's approximate radix tree: the token ids of every
// prompt routed to a tenant (one DP rank of one worker, "prefill-1#0"),
// shared where prompts share a prefix. It mirrors what each engine's
// prefix cache probably holds: a prompt is inserted under the tenant it
// was sent to, and a tenant holding more than the size limit loses its
// least recently used leaves first, as the engine's LRU would. It is
// approximate because the engine evicts on its own schedule; kv_aware
// reads the engines' real caches instead (docs/profiles.md).
//
// A Tree is not safe for concurrent use: the Router's goroutine owns it.
type Tree struct {
	root  *node
	clock uint64 // logical time of the last insert: the LRU order
	ids   map[string]int
	names []string
	size  []int // tokens each tenant holds
	nodes int
	// stored is the tokens held in edges: memory is about 4 bytes each
	// plus a few hundred per node.
	stored int
}

type node struct {
	key      []int32 // the edge from the parent
	parent   *node
	children map[int32]*node // by first token
	owners   map[int]uint64  // tenant id → clock of its last insert through here
}

// NewTree returns an empty tree.
func NewTree() *Tree {
	return &Tree{root: &node{children: map[int32]*node{}, owners: map[int]uint64{}}, ids: map[string]int{}}
}

func (t *Tree) id(tenant string) int {
	if i, ok := t.ids[tenant]; ok {
		return i
	}
	i := len(t.names)
	t.ids[tenant] = i
	t.names = append(t.names, tenant)
	t.size = append(t.size, 0)
	return i
}

// Match returns, for each of tenants, how many leading tokens of prompt
// it holds.
func (t *Tree) Match(prompt []int32, tenants []string) []int {
	byID := make([]int, len(t.names))
	n, depth, rest := t.root, 0, prompt
	for len(rest) > 0 {
		c := n.children[rest[0]]
		if c == nil {
			break
		}
		l := commonPrefix(c.key, rest)
		// Ownership is prefix-closed (an insert owns its whole path and
		// eviction takes leaves first), so a deeper owner overrides.
		for id := range c.owners {
			byID[id] = depth + l
		}
		if l < len(c.key) {
			break
		}
		depth += l
		rest = rest[l:]
		n = c
	}
	out := make([]int, len(tenants))
	for i, name := range tenants {
		if id, ok := t.ids[name]; ok {
			out[i] = byID[id]
		}
	}
	return out
}

// Insert records prompt under tenant (the engine it was sent to now
// computes and caches it).
func (t *Tree) Insert(prompt []int32, tenant string) {
	id := t.id(tenant)
	t.clock++
	n, rest := t.root, prompt
	for len(rest) > 0 {
		c := n.children[rest[0]]
		if c == nil {
			leaf := &node{key: append([]int32(nil), rest...), parent: n, children: map[int32]*node{}, owners: map[int]uint64{id: t.clock}}
			n.children[rest[0]] = leaf
			t.nodes++
			t.stored += len(rest)
			t.size[id] += len(rest)
			break
		}
		l := commonPrefix(c.key, rest)
		if l < len(c.key) {
			c = t.split(c, l)
		}
		if _, ok := c.owners[id]; !ok {
			t.size[id] += len(c.key)
		}
		c.owners[id] = t.clock
		rest = rest[l:]
		n = c
	}
}

// split cuts c's edge after l tokens; the returned node holds the first
// l, owned by everyone who owned c.
func (t *Tree) split(c *node, l int) *node {
	mid := &node{key: c.key[:l:l], parent: c.parent, children: map[int32]*node{c.key[l]: c}, owners: make(map[int]uint64, len(c.owners))}
	for id, at := range c.owners {
		mid.owners[id] = at
	}
	c.parent.children[c.key[0]] = mid
	c.key = c.key[l:]
	c.parent = mid
	t.nodes++
	return mid
}

// Size is the tokens tenant holds.
func (t *Tree) Size(tenant string) int {
	if id, ok := t.ids[tenant]; ok {
		return t.size[id]
	}
	return 0
}

// Stored is the tokens and nodes the tree keeps, for its memory bound.
func (t *Tree) Stored() (tokens, nodes int) { return t.stored, t.nodes }

// EvictAll cuts every tenant back to max tokens.
func (t *Tree) EvictAll(max int) {
	for id := range t.names {
		t.evict(id, max)
	}
}

// Evict cuts tenant back to max tokens, least recently used leaves first.
func (t *Tree) Evict(tenant string, max int) {
	if id, ok := t.ids[tenant]; ok {
		t.evict(id, max)
	}
}

func (t *Tree) evict(id, max int) {
	if t.size[id] <= max {
		return
	}
	h := &lruHeap{id: id}
	var walk func(n *node)
	walk = func(n *node) {
		leaf := true
		for _, c := range n.children {
			if _, ok := c.owners[id]; ok {
				leaf = false
				walk(c)
			}
		}
		if leaf && n != t.root {
			h.nodes = append(h.nodes, n)
		}
	}
	walk(t.root)
	heap.Init(h)
	for t.size[id] > max && h.Len() > 0 {
		n := heap.Pop(h).(*node)
		delete(n.owners, id)
		t.size[id] -= len(n.key)
		p := n.parent
		if len(n.owners) == 0 && len(n.children) == 0 {
			delete(p.children, n.key[0])
			t.nodes--
			t.stored -= len(n.key)
		}
		if p != t.root && t.leafOf(p, id) {
			heap.Push(h, p)
		}
	}
}

// leafOf: n is owned by id and none of its children is.
func (t *Tree) leafOf(n *node, id int) bool {
	if _, ok := n.owners[id]; !ok {
		return false
	}
	for _, c := range n.children {
		if _, ok := c.owners[id]; ok {
			return false
		}
	}
	return true
}

// lruHeap orders one tenant's leaves by their last insert, oldest first.
type lruHeap struct {
	id    int
	nodes []*node
}

func (h *lruHeap) Len() int           { return len(h.nodes) }
func (h *lruHeap) Less(i, j int) bool { return h.nodes[i].owners[h.id] < h.nodes[j].owners[h.id] }
func (h *lruHeap) Swap(i, j int)      { h.nodes[i], h.nodes[j] = h.nodes[j], h.nodes[i] }
func (h *lruHeap) Push(x any)         { h.nodes = append(h.nodes, x.(*node)) }
func (h *lruHeap) Pop() any {
	n := h.nodes[len(h.nodes)-1]
	h.nodes = h.nodes[:len(h.nodes)-1]
	return n
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

package routing

import (
	"math/rand/v2"
	"testing"
)

func ids(v ...int32) []int32 { return v }

func TestTreeMatchInsert(t *testing.T) {
	t.Parallel()
	tr := NewTree()
	tr.Insert(ids(1, 2, 3, 4), "a#0")
	tr.Insert(ids(1, 2, 5), "b#0")
	tr.Insert(ids(7, 8), "a#0")
	rows := []struct {
		prompt []int32
		want   []int // a#0, b#0, unknown
	}{
		{ids(1, 2, 3, 9), []int{3, 2, 0}},
		{ids(1, 2, 3, 4, 5, 6), []int{4, 2, 0}},
		{ids(1, 2, 5, 6), []int{2, 3, 0}},
		{ids(1), []int{1, 1, 0}},
		{ids(7, 8, 9), []int{2, 0, 0}},
		{ids(9), []int{0, 0, 0}},
		{nil, []int{0, 0, 0}},
	}
	for _, r := range rows {
		got := tr.Match(r.prompt, []string{"a#0", "b#0", "c#0"})
		for i := range got {
			if got[i] != r.want[i] {
				t.Errorf("Match(%v) = %v, want %v", r.prompt, got, r.want)
				break
			}
		}
	}
	// a#0 holds 1 2 3 4 and 7 8; b#0 holds 1 2 5: shared tokens count for both.
	if tr.Size("a#0") != 6 || tr.Size("b#0") != 3 || tr.Size("c#0") != 0 {
		t.Errorf("sizes a=%d b=%d c=%d", tr.Size("a#0"), tr.Size("b#0"), tr.Size("c#0"))
	}
	if tok, _ := tr.Stored(); tok != 7 { // 1 2 | 3 4 | 5 | 7 8
		t.Errorf("stored %d tokens, want 7", tok)
	}
	// Inserting the same prompt again adds nothing.
	tr.Insert(ids(1, 2, 3, 4), "a#0")
	if tr.Size("a#0") != 6 {
		t.Errorf("re-insert grew a#0 to %d", tr.Size("a#0"))
	}
}

// Eviction takes a tenant's least recently inserted leaves first, keeps
// what other tenants hold, and frees nodes nobody holds.
func TestTreeEvictLRU(t *testing.T) {
	t.Parallel()
	sys := make([]int32, 100)
	for i := range sys {
		sys[i] = int32(1000 + i)
	}
	q := func(x int32) []int32 { return append(append([]int32(nil), sys...), x, x, x, x, x, x, x, x, x, x) }
	tr := NewTree()
	tr.Insert(q(1), "a#0") // oldest
	tr.Insert(q(2), "a#0")
	tr.Insert(q(3), "a#0")
	tr.Insert(q(1), "b#0")
	if tr.Size("a#0") != 130 {
		t.Fatalf("a#0 holds %d, want 130", tr.Size("a#0"))
	}
	tr.Evict("a#0", 120) // drops one question: the oldest, q(1)
	m := func(p []int32) []int { return tr.Match(p, []string{"a#0", "b#0"}) }
	if got := m(q(1)); got[0] != 100 || got[1] != 110 {
		t.Errorf("after evicting a#0's oldest: q1 matches %v, want [100 110]", got)
	}
	if got := m(q(2)); got[0] != 110 {
		t.Errorf("q2 evicted too early: %v", got)
	}
	// Touching q(2) again makes q(3) the oldest.
	tr.Insert(q(2), "a#0")
	tr.Evict("a#0", 110)
	if got := m(q(3)); got[0] != 100 {
		t.Errorf("q3 should be gone: %v", got)
	}
	if got := m(q(2)); got[0] != 110 {
		t.Errorf("q2 was used last and should stay: %v", got)
	}
	// Down to zero: a#0 holds nothing, b#0 still everything it had.
	tr.Evict("a#0", 0)
	if got := m(q(1)); got[0] != 0 || got[1] != 110 || tr.Size("a#0") != 0 {
		t.Errorf("a#0 at zero: %v size %d", got, tr.Size("a#0"))
	}
	tr.Evict("b#0", 0)
	if tok, nodes := tr.Stored(); tok != 0 || nodes != 0 {
		t.Errorf("empty tree keeps %d tokens in %d nodes", tok, nodes)
	}
	tr.Evict("nobody", 0) // unknown tenants are fine
}

// A random workload checked against a brute-force model: without
// eviction Match equals the longest common prefix with any prompt the
// tenant was given; with eviction the size accounting and the prefix
// closure hold and no tenant keeps more than it was cut to.
func TestTreeAgainstModel(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	tenants := []string{"p#0", "p#1", "q#0"}
	gen := func() []int32 {
		p := make([]int32, 1+rng.IntN(12))
		for i := range p {
			p[i] = int32(rng.IntN(3)) // small alphabet: many shared prefixes and splits
		}
		return p
	}
	tr := NewTree()
	model := map[string][][]int32{}
	for i := 0; i < 2000; i++ {
		p, who := gen(), tenants[rng.IntN(len(tenants))]
		tr.Insert(p, who)
		model[who] = append(model[who], p)
		probe := gen()
		got := tr.Match(probe, tenants)
		for j, w := range tenants {
			want := 0
			for _, q := range model[w] {
				want = max(want, commonPrefix(q, probe))
			}
			if got[j] != want {
				t.Fatalf("step %d: Match(%v)[%s] = %d, model %d", i, probe, w, got[j], want)
			}
		}
	}
	checkTree(t, tr)
	for _, lim := range []int{40, 10, 0} {
		tr.EvictAll(lim)
		checkTree(t, tr)
		for _, w := range tenants {
			if tr.Size(w) > lim {
				t.Fatalf("%s holds %d after eviction to %d", w, tr.Size(w), lim)
			}
		}
	}
}

// checkTree verifies the invariants eviction relies on.
func checkTree(t *testing.T, tr *Tree) {
	t.Helper()
	size := make([]int, len(tr.names))
	tokens, nodes := 0, 0
	var walk func(n *node)
	walk = func(n *node) {
		for k, c := range n.children {
			if c.parent != n || len(c.key) == 0 || c.key[0] != k {
				t.Fatalf("broken edge under %v", n.key)
			}
			if len(c.owners) == 0 {
				t.Fatalf("a node nobody holds is kept: %v", c.key)
			}
			for id := range c.owners {
				if _, ok := n.owners[id]; !ok && n != tr.root {
					t.Fatalf("tenant %s holds %v but not its parent %v", tr.names[id], c.key, n.key)
				}
				size[id] += len(c.key)
			}
			tokens += len(c.key)
			nodes++
			walk(c)
		}
	}
	walk(tr.root)
	for id, s := range size {
		if tr.size[id] != s {
			t.Fatalf("%s: accounted %d tokens, holds %d", tr.names[id], tr.size[id], s)
		}
	}
	if tok, n := tr.Stored(); tok != tokens || n != nodes {
		t.Fatalf("Stored says %d tokens in %d nodes, the tree has %d in %d", tok, n, tokens, nodes)
	}
}

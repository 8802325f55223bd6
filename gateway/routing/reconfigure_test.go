package routing

import "testing"

// TestRouterReconfigure: tsd apply's new policies take over between two
// routes; a pool whose policy stays keeps its state (the cache_aware
// tree), a changed one starts afresh, and the maintenance tickers follow
// the policies in use.
func TestRouterReconfigure(t *testing.T) {
	t.Parallel()
	r := NewRouter(Options{Prefill: CacheAware, Decode: RoundRobin})
	defer r.Close()
	ws := []WorkerView{worker("prefill-0", 1), worker("prefill-1", 1)}
	dec := []WorkerView{worker("decode", 1)}
	req := Request{Prompt: prompt(1, 64)}
	if _, _, err := r.Route(req, ws, dec); err != nil {
		t.Fatal(err)
	}
	stored := func() int {
		tokens, _, err := r.TreeStats()
		if err != nil {
			t.Fatal(err)
		}
		return tokens[PoolPrefill]
	}
	if stored() == 0 {
		t.Fatal("the tree holds nothing after a route")
	}
	if err := r.Reconfigure(Options{Prefill: CacheAware, Decode: Manual}); err != nil {
		t.Fatal(err)
	}
	if stored() == 0 {
		t.Fatal("an unchanged cache_aware pool lost its tree")
	}
	var decPolicy string
	if err := r.do(func(s *state) { decPolicy = s.pools[PoolDecode].policy }); err != nil || decPolicy != Manual {
		t.Fatalf("decode policy %q, %v", decPolicy, err)
	}
	if p, d, err := r.Route(Request{Prompt: prompt(2, 8), Key: "k"}, ws, dec); err != nil || p.Worker < 0 || d.Policy != Manual {
		t.Fatalf("a route after the change: %+v %+v %v", p, d, err)
	}
	if err := r.Reconfigure(Options{Prefill: RoundRobin, Decode: Manual}); err != nil {
		t.Fatal(err)
	}
	if stored() != 0 {
		t.Fatal("a pool moved off cache_aware kept a tree")
	}
}

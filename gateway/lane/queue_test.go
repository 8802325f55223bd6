package lane

import (
	"slices"
	"testing"
)

// The queue hands out what was pushed, in order, batch by batch; a batch
// given back (the next take) is cleared, so the queue keeps nothing of
// the consumer's past work, and its arrays are reused: pushing and
// taking allocate nothing once both have grown. Not parallel:
// AllocsPerRun reads global memstats.
func TestQueueReusesBatches(t *testing.T) {
	q := newQueue[*int]()
	vals := []int{1, 2, 3}
	var prev []*int
	allocs := testing.AllocsPerRun(100, func() {
		for i := range vals {
			q.push(&vals[i])
		}
		items, ok := q.take()
		if !ok || len(items) != len(vals) || *items[0] != 1 || *items[2] != 3 {
			t.Fatalf("took %v (%v)", items, ok)
		}
		if slices.ContainsFunc(prev, func(p *int) bool { return p != nil }) {
			t.Fatal("the batch given back still holds its values")
		}
		prev = items
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
	q.close()
	if items, ok := q.take(); len(items) != 0 || ok {
		t.Fatalf("after close: %v, more %v", items, ok)
	}
}

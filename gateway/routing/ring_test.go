package routing

import (
	"fmt"
	"strings"
	"testing"
)

// Removing a member moves only the keys it owned, adding one moves keys
// only to the newcomer, and member order never matters: routing by key
// stays put while replicas come and go.
func TestRingStableUnderMembershipChange(t *testing.T) {
	t.Parallel()
	all := []string{"prefill", "prefill-1", "prefill-2", "prefill-3"}
	full := NewRing(all)
	without := NewRing([]string{"prefill", "prefill-2", "prefill-3"}) // prefill-1 left
	shuffled := NewRing([]string{"prefill-3", "prefill-1", "prefill", "prefill-2"})
	const keys = 20000
	count := map[string]int{}
	moved := 0
	for i := range keys {
		k := fmt.Sprintf("session-%d", i)
		before, after := full.Pick(k), without.Pick(k)
		count[before]++
		if before != "prefill-1" && after != before {
			t.Fatalf("key %s moved from %s to %s although %s stayed", k, before, after, before)
		}
		if before == "prefill-1" {
			moved++
			if after == "prefill-1" {
				t.Fatalf("key %s still on the removed member", k)
			}
		}
		if shuffled.Pick(k) != before {
			t.Fatalf("key %s: member order changed its owner", k)
		}
		// Adding prefill-1 back (full from without) moves keys only to it.
		if after != before && before != "prefill-1" {
			t.Fatalf("key %s: adding prefill-1 moved it to %s", k, before)
		}
	}
	if moved != count["prefill-1"] {
		t.Fatalf("moved %d keys, prefill-1 owned %d", moved, count["prefill-1"])
	}
	for _, m := range all {
		share := float64(count[m]) / keys
		if share < 0.15 || share > 0.35 {
			t.Errorf("%s owns %.1f%% of the keys; the ring should spread them (counts %v)", m, 100*share, count)
		}
	}
}

func TestRingEdges(t *testing.T) {
	t.Parallel()
	if got := NewRing(nil).Pick("k"); got != "" {
		t.Errorf("empty ring picked %q", got)
	}
	var nilRing *Ring
	if got := nilRing.Pick("k"); got != "" {
		t.Errorf("nil ring picked %q", got)
	}
	if got := NewRing([]string{"a", "a"}).Pick("k"); got != "a" {
		t.Errorf("duplicate members: %q", got)
	}
	if len(NewRing([]string{"a", "a"}).points) != VirtualNodes {
		t.Error("a duplicate member got points twice")
	}
}

func TestHashTokens(t *testing.T) {
	t.Parallel()
	a := []int32{1, 2, 3, 4, 5}
	b := []int32{1, 2, 3, 9, 9}
	if HashTokens(a, 3) != HashTokens(b, 3) {
		t.Error("equal first 3 tokens hash differently")
	}
	if HashTokens(a, 4) == HashTokens(b, 4) {
		t.Error("different first 4 tokens hash equal")
	}
	if HashTokens(a, 0) != HashTokens(a, 5) || HashTokens(a, 99) != HashTokens(a, 5) {
		t.Error("n out of range does not mean the whole prompt")
	}
}

// The ring's assignment is pinned: consistent_hashing keeps a session on
// the prefill whose cache holds it, so a change of ring (its hash, its
// points per member, its tie rule) must show up here, not as a fleet of
// cold caches. Session i's member is the i-th letter (prefill-a, -b, -c).
func TestRingAssignmentPinned(t *testing.T) {
	t.Parallel()
	const want = "bcccccbbcaaaccbabacbacbacccbabba"
	r := NewRing([]string{"prefill-a", "prefill-b", "prefill-c"})
	got := ""
	for i := range len(want) {
		got += strings.TrimPrefix(r.Pick(fmt.Sprintf("session-%d", i)), "prefill-")
	}
	if got != want {
		t.Fatalf("ring assigns sessions as %s, pinned %s", got, want)
	}
}

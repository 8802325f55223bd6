package testports

import (
	"os/exec"
	"testing"
)

// Pins: two reservations alive at once never share a port, and a range is
// consecutive and inside the band the planner never uses.
func TestDistinct(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		if seen[p] || p < lo || p >= hi {
			t.Fatalf("port %d handed twice or outside %d-%d", p, lo, hi)
		}
		seen[p] = true
	}
	r := Range(t, 7)
	for q := r; q < r+7; q++ {
		if seen[q] {
			t.Fatalf("range %d+7 overlaps a held port %d", r, q)
		}
	}
}

// Pins: a port held by this process cannot be taken by another process
// (another test binary) through the same lock.
func TestOtherProcessRefused(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) not installed")
	}
	p := Port(t)
	path := lockPath(p)
	out, err := exec.Command("flock", "-n", path, "true").CombinedOutput()
	if err == nil {
		t.Fatalf("another process took the lock of port %d: %s", p, out)
	}
}

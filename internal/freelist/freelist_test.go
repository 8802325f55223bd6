package freelist

import "testing"

// Pins: values come back in the order kept, no more than the bound are
// kept, and an empty list says so.
func TestListBounded(t *testing.T) {
	l := New[int](2)
	if _, ok := l.Get(); ok {
		t.Fatal("an empty list gave a value")
	}
	l.Put(1)
	l.Put(2)
	l.Put(3) // full: dropped
	if n := len(l.c); n != 2 {
		t.Fatalf("%d kept, want 2", n)
	}
	for _, want := range []int{1, 2} {
		if v, ok := l.Get(); !ok || v != want {
			t.Fatalf("Get = %d %v, want %d", v, ok, want)
		}
	}
	if _, ok := l.Get(); ok {
		t.Fatal("the value past the bound was kept")
	}
}

package main

import "testing"

// Pins: tsd serves at its own GC target unless the operator set GOGC.
func TestGCTarget(t *testing.T) {
	for _, c := range []struct {
		gogc string
		set  bool
		want int
		ok   bool
	}{
		{"", false, servingGCPercent, true},
		{"", true, servingGCPercent, true}, // GOGC= is the runtime's default
		{"100", true, 0, false},
		{"off", true, 0, false},
		{"50", true, 0, false},
	} {
		got, ok := gcTarget(c.gogc, c.set)
		if got != c.want || ok != c.ok {
			t.Errorf("GOGC=%q (set %v): %d %v, want %d %v", c.gogc, c.set, got, ok, c.want, c.ok)
		}
	}
}

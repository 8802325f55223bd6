package epd

import "testing"

func BenchmarkRingPick(b *testing.B) {
	r := NewRing(workers(8), 0)
	ks := keys(1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = r.Pick(ks[i%len(ks)])
	}
}

func BenchmarkNewRing8(b *testing.B) {
	w := workers(8)
	for i := 0; i < b.N; i++ {
		_ = NewRing(w, 0)
	}
}

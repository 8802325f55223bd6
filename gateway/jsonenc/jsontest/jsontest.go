// Package jsontest holds the inputs the byte-exact tests of the chunk
// encoders (gateway/jsonenc and its callers) compare against
// encoding/json: one list, so every encoder is checked on every escaping
// rule.
package jsontest

import (
	"math"
	"math/rand/v2"
	"strings"
)

// Strings exercise every escaping rule of encoding/json: each byte alone
// and inside text, control characters, HTML characters, U+2028/U+2029,
// invalid and truncated UTF-8, long text and random mixes.
func Strings() []string {
	ts := []string{"", "hi", " world", "a\"b\\c", "<script>&amp;</script>", "line\nbreak\r\t", "\b\f\x00\x01\x1f\x7f",
		"\u2028\u2029", "héllo 世界 🙂", "\xff", "ab\xc3", "\xed\xa0\x80", "\xf0\x9f\x99", "tail\\", strings.Repeat("x", 600)}
	for c := range 256 {
		ts = append(ts, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"z")
	}
	for _, r := range []rune{0x80, 0x7ff, 0x800, 0xfffd, 0xffff, 0x10000, 0x10ffff, 0x2027, 0x202a} {
		ts = append(ts, string(r))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := rng.IntN(24)
		b := make([]byte, n)
		for i := range b {
			switch rng.IntN(4) {
			case 0:
				b[i] = byte(rng.IntN(256))
			case 1:
				b[i] = byte(rng.IntN(0x20))
			default:
				b[i] = byte(0x20 + rng.IntN(0x5f))
			}
		}
		ts = append(ts, string(b))
		if n > 0 {
			ts = append(ts, string(b)+"\u2028"+string(b[:n/2]))
		}
	}
	return ts
}

// Floats cover both of encoding/json's float forms and the edges between
// them (1e-6, 1e21), exponents of one and more digits, negative zero,
// subnormals, and random latencies of a few µs to hours.
func Floats() []float64 {
	fs := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-6, 9.99999e-7, 1e-7, 1e-10, 1e-100, 1e20, 1e21, 1.5e21, 1e22, 1e100,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 5e-324, 0.1, 0.2, 1.0 / 3, 123.456, 1e6, 12345678.9, -2.5e-8}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		fs = append(fs, rng.Float64()*math.Pow(10, float64(rng.IntN(12)-7)))
		fs = append(fs, math.Float64frombits(rng.Uint64()))
	}
	out := fs[:0]
	for _, f := range fs {
		if !math.IsNaN(f) && !math.IsInf(f, 0) {
			out = append(out, f)
		}
	}
	return out
}

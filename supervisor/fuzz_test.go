package supervisor

import (
	"strings"
	"testing"
)

// FuzzLineSplitter: however the stream is cut into reads, the lines come
// out the same, none is longer than the limit, and no byte other than line
// breaks is lost.
func FuzzLineSplitter(f *testing.F) {
	f.Add([]byte("a\nb\r\nc\rd"), uint8(3), uint8(8))
	f.Add([]byte("\x1b[38;20mline\x1b[0m\r\n\r\n"), uint8(1), uint8(4))
	f.Add([]byte(strings.Repeat("x", 100)+"\n"), uint8(50), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, cut, max uint8) {
		m := int(max%64) + 1
		run := func(chunks ...[]byte) []string {
			s := lineSplitter{max: m}
			var out []string
			emit := func(l string) { out = append(out, l) }
			for _, c := range chunks {
				s.feed(c, emit)
			}
			s.flush(emit)
			return out
		}
		whole := run(data)
		k := int(cut)
		if k > len(data) {
			k = len(data)
		}
		parts := run(data[:k], data[k:])
		if strings.Join(whole, "\x00") != strings.Join(parts, "\x00") || len(whole) != len(parts) {
			t.Fatalf("split at %d differs:\n%q\n%q", k, whole, parts)
		}
		var kept strings.Builder
		for _, l := range whole {
			if len(l) > m {
				t.Fatalf("line of %d bytes over limit %d", len(l), m)
			}
			if strings.ContainsAny(l, "\r\n") {
				t.Fatalf("line holds a break: %q", l)
			}
			kept.WriteString(l)
		}
		want := strings.NewReplacer("\r", "", "\n", "").Replace(string(data))
		if kept.String() != want {
			t.Fatalf("bytes lost: %q vs %q", kept.String(), want)
		}
	})
}

// FuzzStripANSI: never panics, leaves no ESC behind, keeps plain text.
func FuzzStripANSI(f *testing.F) {
	f.Add("\x1b[38;20m[2026-08-22] - INFO - x\x1b[0m")
	f.Add("a\x1b]0;t\x07b\x1b(B\x1b")
	f.Add("\xec\x1b") // a stray UTF-8 lead byte before ESC
	f.Fuzz(func(t *testing.T, s string) {
		out := StripANSI(s)
		if strings.IndexByte(out, 0x1b) >= 0 {
			t.Fatalf("ESC left in %q → %q", s, out)
		}
		if strings.IndexByte(s, 0x1b) < 0 && out != s {
			t.Fatalf("plain text changed: %q → %q", s, out)
		}
		if len(out) > len(s) {
			t.Fatalf("grew: %q → %q", s, out)
		}
	})
}

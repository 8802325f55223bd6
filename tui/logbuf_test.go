package tui

import (
	"regexp"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

func line(text string) snapshot.LogLine { return snapshot.LogLine{Role: "r", Text: text} }

// The ring keeps the newest max lines and the filter index follows it.
func TestLogBufRingAndFilter(t *testing.T) {
	t.Parallel()
	b := newLogBuf(5)
	b.setFilter(regexp.MustCompile("even"), false)
	for i := 0; i < 12; i++ {
		text := "odd"
		if i%2 == 0 {
			text = "even"
		}
		b.add(line(text))
	}
	if b.n != 5 || b.first != 7 || b.end() != 12 {
		t.Fatalf("n %d first %d end %d", b.n, b.first, b.end())
	}
	// Lines 7..11 are held; the even ones are 8 and 10.
	if b.viewLen() != 2 || b.viewAt(0) != 8 || b.viewAt(1) != 10 {
		t.Fatalf("view %d: %v", b.viewLen(), b.idx[b.head:])
	}
	if got := b.viewIndex(9); got != 1 {
		t.Fatalf("viewIndex(9) = %d", got)
	}
	b.setFilter(b.filter, true)
	if b.viewLen() != 3 || b.viewAt(0) != 7 {
		t.Fatalf("inverted view %d from %d", b.viewLen(), b.viewAt(0))
	}
	b.setFilter(nil, false)
	if b.viewLen() != 5 || b.viewAt(4) != 11 || b.viewIndex(3) != 0 || b.viewIndex(99) != 5 {
		t.Fatal("unfiltered view wrong")
	}
}

// The filter index is compacted instead of growing without bound.
func TestLogBufIndexStaysBounded(t *testing.T) {
	t.Parallel()
	b := newLogBuf(100)
	b.setFilter(regexp.MustCompile("x"), false)
	for i := 0; i < 100000; i++ {
		b.add(line("x"))
	}
	if b.viewLen() != 100 || cap(b.idx) > 10000 {
		t.Fatalf("view %d, index capacity %d", b.viewLen(), cap(b.idx))
	}
}

// Escapes, carriage returns and tabs never reach the screen.
func TestSanitize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":                         "plain",
		"\x1b[32mINFO\x1b[0m ready":     "INFO ready",
		"a\tb":                          "a   b",
		"ab\tc":                         "ab  c",
		"progress 10%\rprogress 20%":    "progress 10%progress 20%",
		"bell\a\x1b]0;title\x07 after":  "bell after",
		"\x1b[1;31mred\x1b[0m\tand tab": "red and tab",
	} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIndexFold(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s, needle string
		want      int
	}{{"Model Loaded", "model loaded", 0}, {"x MODEL", "model", 2}, {"mode", "model", -1}, {"", "a", -1}} {
		if got := indexFold(c.s, c.needle); got != c.want {
			t.Errorf("indexFold(%q, %q) = %d, want %d", c.s, c.needle, got, c.want)
		}
	}
}

// Whatever an engine prints, the line that reaches the screen holds no
// control bytes and its cached width is its display width.
func FuzzSanitize(f *testing.F) {
	for _, s := range []string{"plain", "\x1b[32mgreen\x1b[0m", "a\tb\r\n", "\x1b]8;;http://x\x07link\x1b]8;;\x07", "日本\t語", "\x1b[", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := sanitize(in)
		for i := 0; i < len(out); i++ {
			if c := out[i]; c < 0x20 || c == 0x7f {
				t.Fatalf("sanitize(%q) = %q keeps control byte %#x", in, out, c)
			}
		}
		if got, want := textWidth(out), ansi.StringWidth(out); got != want {
			t.Fatalf("textWidth(%q) = %d, display width %d", out, got, want)
		}
	})
}

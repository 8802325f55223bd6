package jsonenc

import (
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"

	"github.com/tsd-project/tsd/gateway/jsonenc/jsontest"
)

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range jsontest.Strings() {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	}
}

func TestAppendFloat64MatchesEncodingJSON(t *testing.T) {
	for _, f := range jsontest.Floats() {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := AppendFloat64([]byte("x"), f)
		if !ok || string(got) != "x"+string(want) {
			t.Fatalf("%v: got %s (ok %v), want x%s", f, got, ok, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got, ok := AppendFloat64([]byte("x"), f); ok || string(got) != "x" {
			t.Fatalf("%v: got %s ok %v, want refused", f, got, ok)
		}
	}
}

func TestAppendNoAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(1000, func() {
		b := AppendString(buf[:0], "héllo <world>\n\xff\u2028")
		b, _ = AppendFloat64(b, 0.0123456789)
		_, _ = AppendFloat64(b, 1e-9)
	}); n != 0 {
		t.Fatalf("%v allocations, want 0", n)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", "<&>", "\u2028", "\xff", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
		if !utf8.Valid(AppendString(nil, s)) {
			t.Fatalf("%q: invalid UTF-8 out", s)
		}
	})
}

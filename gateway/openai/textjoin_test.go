package openai

import "testing"

// An output's token texts join to what concatenation gives, and a
// one-token output (the steady stream) costs no allocation.
func TestTextJoin(t *testing.T) {
	t.Parallel()
	for _, parts := range [][]string{nil, {""}, {"a"}, {"", "a", ""}, {"a", "b"}, {"héllo", " ", "wörld", ""}} {
		var j textJoin
		j.add("stale")
		j.reset()
		want := ""
		for _, p := range parts {
			j.add(p)
			want += p
		}
		if got := j.text(); got != want {
			t.Errorf("%q joined to %q, want %q", parts, got, want)
		}
	}
}

func TestTextJoinOneTokenAllocates(t *testing.T) {
	var j textJoin
	tok := "token"
	if n := testing.AllocsPerRun(100, func() {
		j.reset()
		j.add(tok)
		_ = j.text()
	}); n != 0 {
		t.Fatalf("a one-token output allocated %v times", n)
	}
}

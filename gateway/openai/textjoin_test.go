package openai

import (
	"fmt"
	"strings"
	"testing"
)

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
		j.release()
	}
}

// Texts handed out stay what they were while later joins fill the block,
// start new ones (a join larger than a block included), and pass the
// arena on to another runner's join (release, then a new textJoin).
func TestTextJoinKeepsHandedOutTexts(t *testing.T) {
	t.Parallel()
	var got, want []string
	j := &textJoin{}
	for i := range 3000 {
		if i%700 == 0 { // another request takes the arena on
			j.release()
			j = &textJoin{}
		}
		j.reset()
		parts := []string{fmt.Sprint(i), "-", strings.Repeat("x", i%13)}
		if i == 1500 {
			parts = append(parts, strings.Repeat("y", 3*joinBlock))
		}
		if i%5 == 0 {
			j.add("dropped")
			j.add("unfinished")
			j.reset() // a join never handed out leaves nothing behind
		}
		for _, p := range parts {
			j.add(p)
		}
		got = append(got, j.text())
		want = append(want, strings.Join(parts, ""))
	}
	j.release()
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("text %d is %q, want %q", i, got[i], want[i])
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

// A multi-token output's text costs no allocation of its own: joins fill
// the arena's block. The warm-up run takes the block and fills half of
// it; the measured run fills the other half, exactly, so it allocates
// nothing.
func TestTextJoinManyTokensAllocates(t *testing.T) {
	// Its own arena: one from joinArenas may be part full already.
	j := textJoin{a: new(joinArena)}
	const part = "abcd" // two parts: 8 bytes a join
	joins := joinBlock / 2 / (2 * len(part))
	if n := testing.AllocsPerRun(1, func() {
		for range joins {
			j.reset()
			j.add(part)
			j.add(part)
			if j.text() != part+part {
				panic("bad join")
			}
		}
	}); n != 0 {
		t.Fatalf("%d two-token outputs allocated %v times", joins, n)
	}
}

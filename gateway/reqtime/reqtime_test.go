package reqtime

import (
	"context"
	"testing"
	"time"
)

// The breakdown is a pure function of the stamps: the engine's time
// (legs sent → first token) is left out, a missing stage means no figure.
func TestCompute(t *testing.T) {
	us := func(v int64) int64 { return v * int64(time.Microsecond) }
	type st = [NumStages]int64
	for _, c := range []struct {
		name string
		t    st
		ok   bool
		want Breakdown
	}{
		{"every stage", st{Accept: us(1), Tokenized: us(41), LegsSent: us(61), FirstToken: us(1061), FirstByte: us(1071)}, true,
			Breakdown{Tok: 40 * time.Microsecond, Send: 20 * time.Microsecond, Write: 10 * time.Microsecond, Total: 70 * time.Microsecond}},
		{"no tokenized: all in send", st{Accept: us(1), LegsSent: us(61), FirstToken: us(1061), FirstByte: us(1071)}, true,
			Breakdown{Send: 60 * time.Microsecond, Write: 10 * time.Microsecond, Total: 70 * time.Microsecond}},
		{"tokenized after legs: all in send", st{Accept: us(1), Tokenized: us(90), LegsSent: us(61), FirstToken: us(1061), FirstByte: us(1071)}, true,
			Breakdown{Send: 60 * time.Microsecond, Write: 10 * time.Microsecond, Total: 70 * time.Microsecond}},
		{"same instant everywhere", st{Accept: 5, Tokenized: 5, LegsSent: 5, FirstToken: 5, FirstByte: 5}, true, Breakdown{}},
		{"no accept", st{Tokenized: us(41), LegsSent: us(61), FirstToken: us(1061), FirstByte: us(1071)}, false, Breakdown{}},
		{"never sent (a 400)", st{Accept: us(1), Tokenized: us(41)}, false, Breakdown{}},
		{"no token (failed)", st{Accept: us(1), Tokenized: us(41), LegsSent: us(61), FirstByte: us(70)}, false, Breakdown{}},
		{"no byte after the token (not a stream)", st{Accept: us(1), Tokenized: us(41), LegsSent: us(61), FirstToken: us(1061)}, false, Breakdown{}},
		{"byte before the token", st{Accept: us(1), Tokenized: us(41), LegsSent: us(61), FirstToken: us(1061), FirstByte: us(1000)}, false, Breakdown{}},
		{"token before legs", st{Accept: us(1), Tokenized: us(41), LegsSent: us(61), FirstToken: us(50), FirstByte: us(1071)}, false, Breakdown{}},
		{"legs before accept", st{Accept: us(100), Tokenized: us(41), LegsSent: us(61), FirstToken: us(1061), FirstByte: us(1071)}, false, Breakdown{}},
	} {
		b, ok := Compute(c.t)
		if ok != c.ok || b != c.want {
			t.Errorf("%s: Compute = %+v, %v; want %+v, %v", c.name, b, ok, c.want, c.ok)
		}
	}
}

// A stage keeps its first stamp, except legs sent, which a retry moves
// until the first token came.
func TestMarkOnce(t *testing.T) {
	var s Stamps
	s.Mark(Accept)
	a := s.Snapshot()[Accept]
	s.Mark(Accept)
	if got := s.Snapshot()[Accept]; got != a || a == 0 {
		t.Fatalf("accept moved or unset: %d then %d", a, got)
	}
	s.Mark(LegsSent)
	l1 := s.Snapshot()[LegsSent]
	for s.Snapshot()[LegsSent] == l1 { // the clock moves on: the retry's stamp is later
		s.Mark(LegsSent)
	}
	s.Mark(FirstToken)
	l2 := s.Snapshot()[LegsSent]
	s.Mark(LegsSent)
	if got := s.Snapshot()[LegsSent]; got != l2 || l2 <= l1 {
		t.Fatalf("legs sent: first %d, retry %d, after the token %d", l1, l2, got)
	}
	if !s.Has(FirstToken) || s.Has(FirstByte) {
		t.Fatal("Has wrong")
	}
}

// Without Stamps in the context, Mark does nothing (and does not panic).
func TestMarkWithoutStamps(t *testing.T) {
	Mark(context.Background(), Accept)
	var s *Stamps
	s.Mark(FirstByte)
	if s.Has(FirstByte) || FromContext(context.Background()) != nil {
		t.Fatal("nil stamps reported a stage")
	}
	if _, ok := s.Breakdown(); ok {
		t.Fatal("nil stamps gave a breakdown")
	}
	st := &Stamps{}
	ctx := NewContext(context.Background(), st)
	for i := Accept; i < NumStages; i++ {
		Mark(ctx, i)
	}
	if _, ok := st.Breakdown(); !ok {
		t.Fatalf("stamps in order gave no breakdown: %v", st.Snapshot())
	}
}

// Marking never allocates: it is on every request's path.
func TestMarkAllocs(t *testing.T) {
	st := &Stamps{}
	ctx := NewContext(context.Background(), st)
	if n := testing.AllocsPerRun(100, func() {
		Mark(ctx, Tokenized)
		st.Mark(FirstByte)
		_, _ = st.Breakdown()
	}); n != 0 {
		t.Fatalf("%v allocs per mark", n)
	}
}

func BenchmarkMark(b *testing.B) {
	st := &Stamps{}
	ctx := NewContext(context.Background(), st)
	b.ReportAllocs()
	for b.Loop() {
		Mark(ctx, LegsSent)
	}
}

package reqtime

import (
	"testing"
	"time"
)

// The phases are a pure function of the stamps, one row per shape of
// request: a stamp missing or out of order leaves its phase out, never a
// negative or borrowed figure.
func TestTimelineOf(t *testing.T) {
	type st = [NumStages]int64
	ms := func(v int64) int64 { return v * int64(time.Millisecond) }
	iv := func(a, b int64) Interval { return Interval{ms(a), ms(b)} }
	// A PD stream: 2 ms admission wait, 5 ms waiting for a worker, a
	// 100 ms prefill, 20 ms of KV transfer, 40 ms of decode.
	pd := st{Accept: ms(1), AdmitBegin: ms(2), Admitted: ms(4), Tokenized: ms(6), Picking: ms(7), RouteBegin: ms(12), Routed: ms(13),
		LegsSent: ms(14), Prefilled: ms(114), FirstToken: ms(134), FirstByte: ms(135), LastToken: ms(174)}
	epd := pd
	epd[Encoded] = ms(50)
	noAdmit := pd
	noAdmit[AdmitBegin], noAdmit[Admitted] = 0, 0
	agg := pd
	agg[Prefilled] = ms(180) // the one leg's own end: not a prefill's
	late := pd
	late[Prefilled] = ms(140) // the prefill's end came after the first token
	never := pd
	never[Prefilled] = 0 // the prefill's end never came
	stale := pd
	stale[Prefilled], stale[Encoded] = ms(10), ms(9) // a failed attempt's, before this attempt's legs
	json := pd
	json[FirstByte] = 0
	one := pd
	one[LastToken] = one[FirstToken]
	for _, c := range []struct {
		name   string
		t      st
		oneLeg bool
		want   Timeline
	}{
		{"pd stream", pd, false, Timeline{Admission: iv(2, 4), Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(4, 6), Route: iv(12, 13), Prefill: iv(14, 114), KV: iv(114, 134), Write: iv(134, 135), Decode: iv(134, 174)}}},
		{"epd: prefill starts once encoded", epd, false, Timeline{Admission: iv(2, 4), Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(4, 6), Route: iv(12, 13), Encode: iv(14, 50), Prefill: iv(50, 114), KV: iv(114, 134), Write: iv(134, 135), Decode: iv(134, 174)}}},
		{"no max_concurrent: tokenize from accept", noAdmit, false, Timeline{Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(1, 6), Route: iv(12, 13), Prefill: iv(14, 114), KV: iv(114, 134), Write: iv(134, 135), Decode: iv(134, 174)}}},
		{"aggregated: one leg, prefill merged to the first token", agg, true, Timeline{Admission: iv(2, 4), Merged: true, Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(4, 6), Route: iv(12, 13), Prefill: iv(14, 134), Write: iv(134, 135), Decode: iv(134, 174)}}},
		{"prefill's end after the first token: prefill to it, kv_transfer 0", late, false, Timeline{Admission: iv(2, 4), Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(4, 6), Route: iv(12, 13), Prefill: iv(14, 134), KV: iv(134, 134), Write: iv(134, 135), Decode: iv(134, 174)}}},
		{"the prefill's end never came: merged", never, false, Timeline{Admission: iv(2, 4), Merged: true, Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(4, 6), Route: iv(12, 13), Prefill: iv(14, 134), Write: iv(134, 135), Decode: iv(134, 174)}}},
		{"a failed attempt's encode and prefill are not read", stale, false, Timeline{Admission: iv(2, 4), Merged: true, Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(4, 6), Route: iv(12, 13), Prefill: iv(14, 134), Write: iv(134, 135), Decode: iv(134, 174)}}},
		{"not a stream: no write", json, false, Timeline{Admission: iv(2, 4), Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(4, 6), Route: iv(12, 13), Prefill: iv(14, 114), KV: iv(114, 134), Decode: iv(134, 174)}}},
		{"one output: no decode", one, false, Timeline{Admission: iv(2, 4), Phase: [NumPhases]Interval{
			Queued: iv(7, 12), Tokenize: iv(4, 6), Route: iv(12, 13), Prefill: iv(14, 114), KV: iv(114, 134), Write: iv(134, 135)}}},
		{"refused before dispatch (a 400)", st{Accept: ms(1), Tokenized: ms(3)}, false, Timeline{Phase: [NumPhases]Interval{Tokenize: iv(1, 3)}}},
		{"failed after the legs went", st{Accept: ms(1), Tokenized: ms(3), Picking: ms(4), RouteBegin: ms(4), Routed: ms(5), LegsSent: ms(6)}, false,
			Timeline{Phase: [NumPhases]Interval{Queued: iv(4, 4), Tokenize: iv(1, 3), Route: iv(4, 5)}}},
		{"prefill done, no token yet (cut)", st{Accept: ms(1), Tokenized: ms(3), Picking: ms(4), RouteBegin: ms(4), Routed: ms(5), LegsSent: ms(6), Prefilled: ms(9)}, false,
			Timeline{Phase: [NumPhases]Interval{Queued: iv(4, 4), Tokenize: iv(1, 3), Route: iv(4, 5), Prefill: iv(6, 9)}}},
		{"waited in the admission queue: its own interval", st{Accept: ms(1), Tokenized: ms(3), QueueBegin: ms(3), QueueEnd: ms(40), Picking: ms(41), RouteBegin: ms(41), Routed: ms(42), LegsSent: ms(43)}, false,
			Timeline{Queue: iv(3, 40), Phase: [NumPhases]Interval{Queued: iv(41, 41), Tokenize: iv(1, 3), Route: iv(41, 42)}}},
		{"nothing stamped", st{}, false, Timeline{}},
	} {
		if got := TimelineOf(c.t, c.oneLeg); got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// The queued phase lasts every wait: the front door's, the admission
// queue's and the dispatch's.
func TestTimelineQueuedDuration(t *testing.T) {
	tl := Timeline{Admission: Interval{10, 30}, Phase: [NumPhases]Interval{Queued: {40, 45}, Route: {45, 46}}}
	if d, ok := tl.Duration(Queued); !ok || d != 25 {
		t.Fatalf("queued %v %v, want 25ns", d, ok)
	}
	if d, ok := (Timeline{Admission: Interval{10, 30}}).Duration(Queued); !ok || d != 20 {
		t.Fatalf("admission only: %v %v", d, ok)
	}
	tl.Queue = Interval{31, 39}
	if d, ok := tl.Duration(Queued); !ok || d != 33 {
		t.Fatalf("with the admission queue: %v %v, want 33ns", d, ok)
	}
	if _, ok := tl.Duration(Encode); ok {
		t.Fatal("encode reported without its stamps")
	}
	for p := Queued; p < NumPhases; p++ {
		if p.String() == "phase?" {
			t.Fatalf("phase %d has no name", p)
		}
	}
}

// A retry stamps its attempt's stages again until the first token; the
// prefill's end is stamped after the first token too, once per attempt;
// the last token moves with every output; a stamp's wall time is its
// clock's.
func TestMarkAttemptAndLastToken(t *testing.T) {
	var s Stamps
	s.Mark(Encoded)
	e1 := s.Snapshot()[Encoded]
	for s.Snapshot()[Encoded] == e1 {
		s.Mark(Encoded)
	}
	s.Mark(LegsSent)
	s.Mark(FirstToken)
	e2 := s.Snapshot()[Encoded]
	s.Mark(Encoded)
	if got := s.Snapshot()[Encoded]; got != e2 {
		t.Fatalf("encoded moved after the first token: %d then %d", e2, got)
	}
	s.Mark(Prefilled) // the prefill reports after the decode's first token
	p := s.Snapshot()[Prefilled]
	if p == 0 || p < s.Snapshot()[FirstToken] {
		t.Fatalf("the prefill's end after the first token was not stamped: %d", p)
	}
	for now() == p {
	}
	s.Mark(Prefilled)
	if got := s.Snapshot()[Prefilled]; got != p {
		t.Fatalf("prefilled stamped twice for one attempt: %d then %d", p, got)
	}
	s.Mark(LastToken)
	l1 := s.Snapshot()[LastToken]
	for s.Snapshot()[LastToken] == l1 {
		s.Mark(LastToken)
	}
	if w := Wall(now()); time.Since(w) < 0 || time.Since(w) > time.Minute {
		t.Fatalf("Wall(now()) = %v, not now", w)
	}
}

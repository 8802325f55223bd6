package lane

import (
	"errors"
	"io"
	"slices"
	"strconv"
	"testing"
)

// Streams one after another take the queue the ended and drained one
// before gave back: with a backlog each, they allocate no queue of their
// own. Not parallel: AllocsPerRun reads global memstats, and the free
// list is emptied first so that the run's own queue is the one taken.
func TestStreamQueueReused(t *testing.T) {
	w, _ := sinkWorker(t)
	ss := make([]*Stream, 101) // AllocsPerRun runs once more, to warm up
	for i := range ss {
		ss[i] = newStream(w, strconv.Itoa(i), 0)
	}
	for {
		if _, ok := outputQueues.Get(); !ok {
			break
		}
	}
	toks := []int32{1}
	next := 0
	allocs := testing.AllocsPerRun(len(ss)-1, func() {
		s := ss[next]
		next++
		for range 8 {
			s.deliver(Output{TokenIDs: toks})
		}
		s.deliver(Output{TokenIDs: toks, Finished: "length"})
		n := 0
		for {
			_, ok, err := s.Poll()
			if !ok || err != nil {
				break
			}
			n++
		}
		if n != 9 {
			t.Fatalf("drained %d outputs, want 9", n)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per stream", allocs)
	}
}

// A queue given back is not the next stream's history: each stream reads
// its own outputs only, and one that failed with outputs queued still
// hands them out before its error.
func TestStreamQueueReusedKeepsStreamsApart(t *testing.T) {
	t.Parallel()
	w, _ := sinkWorker(t)
	want := func(s *Stream, ids []int32, wantErr error) {
		t.Helper()
		outs, err := drained(s)
		var got []int32
		for _, o := range outs {
			got = append(got, o.TokenIDs...)
		}
		if !slices.Equal(got, ids) || !errors.Is(err, wantErr) {
			t.Fatalf("%s: %v (%v), want %v (%v)", s.RID, got, err, ids, wantErr)
		}
		if s.Buffered() {
			t.Fatalf("%s: still buffered after the end", s.RID)
		}
	}
	boom := errors.New("boom")
	for i := range 50 {
		a := newStream(w, "a"+strconv.Itoa(i), 0)
		for k := range i % 7 {
			a.deliver(Output{TokenIDs: []int32{int32(k)}})
		}
		a.deliver(Output{TokenIDs: []int32{99}, Finished: "stop"})
		a.deliver(Output{TokenIDs: []int32{100}}) // after the end: dropped
		var ids []int32
		for k := range i % 7 {
			ids = append(ids, int32(k))
		}
		want(a, append(ids, 99), io.EOF)

		b := newStream(w, "b"+strconv.Itoa(i), 0)
		b.deliver(Output{TokenIDs: []int32{7}})
		b.deliver(Output{TokenIDs: []int32{8}})
		b.fail(boom)
		want(b, []int32{7, 8}, boom)
	}
}

package lane

import (
	"context"
	"math"
	"reflect"
	"testing"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// sinkWorker is an unbound worker with running streams for rids.
func sinkWorker(t testing.TB, rids ...string) (*Worker, []*Stream) {
	t.Helper()
	l, err := New([]profiles.WorkerPlan{{Role: "decode", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := l.Worker("decode")
	t.Cleanup(func() { _ = l.Close() })
	var ss []*Stream
	w.streams.setState(0, snapshot.RankRegistered, false, false) // as the rank book would once it registered
	for _, rid := range rids {
		s := newStream(w, rid, 0)
		if _, err := w.streams.add(s, false); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return w, ss
}

// drained is everything queued on s, and how it ended.
func drained(s *Stream) (outs []Output, err error) {
	for {
		o, ok, err := s.Poll()
		if !ok || err != nil {
			return outs, err
		}
		outs = append(outs, o)
	}
}

// sameOutputs compares two streams' outputs, NaN logprobs included.
func sameOutputs(a, b []Output) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if len(x.Logprobs) != len(y.Logprobs) {
			return false
		}
		for j := range x.Logprobs {
			if math.Float64bits(x.Logprobs[j]) != math.Float64bits(y.Logprobs[j]) {
				return false
			}
		}
		x.Logprobs, y.Logprobs = nil, nil
		if len(x.TokenIDs) == 0 && len(y.TokenIDs) == 0 {
			x.TokenIDs, y.TokenIDs = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

var sinkRIDs = []string{"a", "b", "chatcmpl-c"}

func sinkSeed(tb testing.TB, fin string, logprobs bool) []byte {
	o := wire.OutputBatch{RIDs: []string{"a", "zz", "chatcmpl-c"}, OutputIDs: [][]int32{{1, 2}, {3}, {}},
		FinishedReasons: []string{"", "stop", fin}, PromptTokens: []int{4, 5, 6}, CompletionTokens: []int{2, 1, 9},
		CachedTokens: []int{0, 1, 2}, EngineIndex: 0}
	if logprobs {
		o.OutputTokenLogprobsVal = [][]float64{{-1, math.NaN()}, {-2}, {}}
		o.OutputTokenLogprobsIdx = [][]int32{{1, 2}, {3}, {}}
	}
	b, err := wire.EncodeOutput(o)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// The sink delivers exactly what the allocating path (decodeOutputs and
// route) delivers, for every batch, including those it refuses.
func TestSinkMatchesRoute(t *testing.T) {
	t.Parallel()
	full, _ := wire.EncodeFullOutput(wire.FullOutputBatch{RIDs: []string{"a"}, FinishedReasons: []*wire.FinishReason{{Type: wire.FinishAbort}}})
	for _, frame := range [][]byte{sinkSeed(t, "", false), sinkSeed(t, "length", true), sinkSeed(t, "odd", false), full, []byte("ENGINE_CORE_DEAD"), {0x90}} {
		checkSinkParity(t, frame)
	}
}

func checkSinkParity(t *testing.T, frame []byte) {
	t.Helper()
	wa, sa := sinkWorker(t, sinkRIDs...)
	wb, sb := sinkWorker(t, sinkRIDs...)
	wa.newOutputSink()([][]byte{frame})
	wb.onOutput([][]byte{frame})
	for i := range sa {
		oa, ea := drained(sa[i])
		ob, eb := drained(sb[i])
		if !sameOutputs(oa, ob) || (ea == nil) != (eb == nil) {
			t.Fatalf("rid %s: sink %+v (%v), route %+v (%v)", sinkRIDs[i], oa, ea, ob, eb)
		}
	}
	if ta, _ := wa.InFlight(); ta != func() int { n, _ := wb.InFlight(); return n }() {
		t.Fatalf("in flight after the batch differs: %d", ta)
	}
}

// A running stream's tokens cost no allocation per message once the
// arena and its queue have grown. Not parallel: AllocsPerRun reads global
// memstats.
func TestSinkAllocatesNothing(t *testing.T) {
	w, ss := sinkWorker(t, sinkRIDs...)
	sink := w.newOutputSink()
	frame := [][]byte{sinkSeed(t, "", false)}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		sink(frame)
		// The seed batch carries rids a and chatcmpl-c, one output each.
		for _, s := range []*Stream{ss[0], ss[2]} {
			if _, err := s.Recv(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
	// The arena's chunk is one allocation per 8192 tokens: under 0.01 a message.
	if allocs > 0.01 {
		t.Fatalf("%v allocations per message", allocs)
	}
}

// FuzzOutputSink: any frame from an engine connection is delivered by
// the in-place path exactly as by the allocating one, without panics.
func FuzzOutputSink(f *testing.F) {
	f.Add(sinkSeed(f, "", false))
	f.Add(sinkSeed(f, "abort", true))
	f.Add([]byte("ENGINE_CORE_DEAD"))
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkSinkParity(t, frame)
	})
}

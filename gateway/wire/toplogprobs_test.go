package wire

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// The top-logprob vectors: the request asks with top_logprobs_num, and
// the full-variant output carries each token's alternatives, which decode
// to the values the vector describes and re-encode byte for byte.
func TestTopLogprobVectors(t *testing.T) {
	t.Parallel()
	m, err := DecodeInputFrames(frames(t, vectorByName(t, "add_request_top_logprobs").Engine))
	if err != nil {
		t.Fatal(err)
	}
	if q := m.Generate; !q.ReturnLogprob || q.TopLogprobsNum != 5 || q.RID != "chatcmpl-7f3a-0" {
		t.Fatalf("request %+v", q)
	}
	a, err := DecodeAnyOutputFrames(frames(t, vectorByName(t, "output_top_logprobs_full").Engine))
	if err != nil {
		t.Fatal(err)
	}
	vals, ids, ok, err := a.TopLogprobs(0)
	if err != nil || !ok {
		t.Fatalf("top logprobs: %v %v", ok, err)
	}
	if !reflect.DeepEqual(vals, [][]float64{{-0.25, -1.75}, {-0.5, -2}}) || !reflect.DeepEqual(ids, [][]int32{{791, 40}, {1917, 2}}) ||
		!reflect.DeepEqual(a.Batch.OutputIDs, [][]int32{{791, 1917}}) || a.Batch.FinishedReasons[0] != "" {
		t.Fatalf("decoded %v %v, batch %+v", vals, ids, a.Batch)
	}
	// A slim message (or a rid that did not ask) has none.
	slim, _ := DecodeAnyOutput(payloadOf(t, vectorByName(t, "output_stream_chunk")))
	if _, _, ok, err := slim.TopLogprobs(0); ok || err != nil {
		t.Fatalf("slim: %v %v", ok, err)
	}
}

// Ragged top-logprob columns are refused whole, naming what disagrees.
func TestTopLogprobShapes(t *testing.T) {
	t.Parallel()
	base := func() FullOutputBatch {
		return FullOutputBatch{RIDs: []string{"a", "b"}, FinishedReasons: []*FinishReason{nil, nil}, OutputIDs: [][]int32{{1, 2}, {3}},
			PromptTokens: []int{1, 1}, CompletionTokens: []int{2, 1}, CachedTokens: []int{0, 0},
			OutputTokenLogprobsVal: [][]float64{{-1, -1}, {}}, OutputTokenLogprobsIdx: [][]int32{{1, 2}, {}}}
	}
	for _, c := range []struct {
		vals [][][]float64
		idx  [][][]int32
		msg  string
	}{
		{[][][]float64{{{-1}, {-1}}, {}}, [][][]int32{{{1}, {2}}, {}}, ""},
		{[][][]float64{{{-1}, {-1}}}, [][][]int32{{{1}, {2}}}, "1 entries for 2 rids"},
		{[][][]float64{{{-1}}, {}}, [][][]int32{{{1}}, {}}, "1 tokens for 2 output ids"},
		{[][][]float64{{{-1}, {-1}}, {}}, [][][]int32{{{1}, {2, 3}}, {}}, "1 values for 2 ids"},
		{[][][]float64{{{-1}, {-1}}, {}}, [][][]int32{{{1}}, {}}, "2 tokens of values, 1 of ids"},
	} {
		f := base()
		f.SetOutputTopLogprobs(c.vals, c.idx)
		b, err := EncodeFullOutput(f)
		if err != nil {
			t.Fatal(err)
		}
		a, err := DecodeAnyOutput(b)
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("%v: %v", c.vals, err)
		case c.msg != "" && (err == nil || !strings.Contains(err.Error(), c.msg)):
			t.Errorf("%v %v: error %v, want %q", c.vals, c.idx, err, c.msg)
		case c.msg == "":
			if _, _, ok, _ := a.TopLogprobs(1); ok {
				t.Errorf("rid b did not ask, yet has top logprobs")
			}
			if b2, _ := EncodeFullOutput(*a.Full); !bytes.Equal(b, b2) {
				t.Errorf("round trip differs")
			}
		}
	}
}

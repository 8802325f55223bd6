package wire

import (
	"bytes"
	"strings"
	"testing"
)

// The full batch reduces to exactly the slim bytes of output_finished_batch.
func TestFullOutputSlimsToVector(t *testing.T) {
	t.Parallel()
	f := FullOutputBatch{
		RIDs: []string{"chatcmpl-7f3a-0", "req-b"},
		FinishedReasons: []*FinishReason{
			{Type: FinishStop, MatchedToken: ptr(151645)},
			{Type: FinishLength, Length: ptr(4)},
		},
		OutputIDs:              [][]int32{{1234, 151645}, {7}},
		PromptTokens:           []int{5, 3},
		CompletionTokens:       []int{3, 4},
		CachedTokens:           []int{0, 2},
		OutputTokenLogprobsVal: [][]float64{{-0.5, -0.0625}, {}},
		OutputTokenLogprobsIdx: [][]int32{{1234, 151645}, {}},
	}
	f.Other[2] = Raw{0x92, 0xa0, 0xa0} // decoded_texts
	b, err := EncodeFullOutput(f)
	if err != nil {
		t.Fatal(err)
	}
	if tag, _ := PeekTag(b); tag != TagOutputFull {
		t.Fatalf("tag %q", tag)
	}
	d, err := DecodeFullOutput(b)
	if err != nil {
		t.Fatal(err)
	}
	if b2, _ := EncodeFullOutput(d); !bytes.Equal(b, b2) {
		t.Fatalf("full round trip differs\n%x\n%x", b, b2)
	}
	if *d.FinishedReasons[0].MatchedToken != 151645 || *d.FinishedReasons[1].Length != 4 {
		t.Fatalf("finish reasons %+v %+v", d.FinishedReasons[0], d.FinishedReasons[1])
	}
	slim, err := EncodeOutput(d.Slim(0))
	if err != nil {
		t.Fatal(err)
	}
	if want := payloadOf(t, vectorByName(t, "output_finished_batch")); !bytes.Equal(slim, want) {
		t.Fatalf("slim got %x\nwant %x", slim, want)
	}
}

func TestFinishReasonShapes(t *testing.T) {
	t.Parallel()
	for _, f := range []*FinishReason{
		nil,
		{Type: FinishStop, MatchedToken: ptr(2)},
		{Type: FinishStop, MatchedStr: ptr("</s>")},
		{Type: FinishLength, Length: ptr(16)},
		{Type: FinishAbort, Message: ptr("KV transfer failed"), ErrType: ptr(ErrTypeTransferFailed)},
	} {
		b := appendFinishReason(nil, f)
		r := newReader(b)
		got, err := r.readFinishReason()
		if err != nil || r.End() != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		if b2 := appendFinishReason(nil, got); !bytes.Equal(b, b2) || got.Slim() != f.Slim() {
			t.Fatalf("%+v: round trip %x vs %x", f, b, b2)
		}
	}
	if _, err := DecodeFullOutput([]byte{0x92, 0xaf, 'B', 'a', 't', 'c', 'h', 'T', 'o', 'k', 'e', 'n', 'I', 'D', 'O', 'u', 't', 0x01}); err == nil ||
		!strings.Contains(err.Error(), "BatchTokenIDOut[1] rids: want array, got int") {
		t.Fatalf("error %v", err)
	}
}

package wire

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Input logprobs survive the full variant (NaN as nil), and the any-variant
// decoder routes by tag: slim stays slim, full is reduced and keeps them.
func TestInputLogprobsFullVariant(t *testing.T) {
	t.Parallel()
	msg := "prompt logprobs are not supported"
	f := FullOutputBatch{RIDs: []string{"a", "b"},
		FinishedReasons: []*FinishReason{{Type: FinishLength}, {Type: FinishAbort, Message: &msg}},
		OutputIDs:       [][]int32{{7}, {}},
		PromptTokens:    []int{3, 3}, CompletionTokens: []int{1, 0}, CachedTokens: []int{0, 0},
		OutputTokenLogprobsVal: [][]float64{{-0.5}, {}}, OutputTokenLogprobsIdx: [][]int32{{7}, {}}}
	f.SetInputLogprobs([][]float64{{math.NaN(), -1.25, -2}, {}}, [][]int32{{1, 2, 3}, {}})
	b, err := EncodeFullOutput(f)
	if err != nil {
		t.Fatal(err)
	}
	ao, err := DecodeAnyOutputFrames([][]byte{b, []byte("extra")})
	if err != nil {
		t.Fatal(err)
	}
	if ao.Full == nil || ao.Batch.FinishedReasons[0] != FinishLength || ao.Batch.FinishedReasons[1] != FinishAbort || ao.Batch.OutputIDs[0][0] != 7 {
		t.Fatalf("batch %+v", ao.Batch)
	}
	v, ids, ok, err := ao.PromptLogprobs(0)
	if err != nil || !ok || !math.IsNaN(v[0]) || v[1] != -1.25 || v[2] != -2 || len(ids) != 3 || ids[2] != 3 {
		t.Fatalf("input logprobs %v %v %v %v", v, ids, ok, err)
	}
	if ao.AbortMessage(1) != msg || ao.AbortMessage(0) != "" {
		t.Fatalf("abort messages %q %q", ao.AbortMessage(1), ao.AbortMessage(0))
	}
	slim, _ := EncodeOutput(f.Slim(3))
	so, err := DecodeAnyOutputFrames([][]byte{slim})
	if err != nil || so.Full != nil || so.Batch.EngineIndex != 3 {
		t.Fatalf("slim %+v %v", so, err)
	}
	if _, _, ok, _ := so.PromptLogprobs(0); ok || so.AbortMessage(1) != "" {
		t.Fatal("slim variant claims full-only data")
	}
	if _, err := DecodeAnyOutputFrames([][]byte{[]byte(EngineCoreDead)}); !errors.Is(err, ErrEngineDead) {
		t.Fatalf("sentinel: %v", err)
	}
	// Without input columns the full variant still decodes (key-tolerant).
	g := f
	g.Other = [len(fullFields)]Raw{}
	b, _ = EncodeFullOutput(g)
	if ao, err := DecodeAnyOutputFrames([][]byte{b}); err != nil {
		t.Fatal(err)
	} else if _, _, ok, _ := ao.PromptLogprobs(0); ok {
		t.Fatal("absent columns read as present")
	}
	// A ragged input column is a protocol error.
	g.SetInputLogprobs([][]float64{{1}}, [][]int32{{1}})
	b, _ = EncodeFullOutput(g)
	if _, err := DecodeAnyOutputFrames([][]byte{b}); err == nil || !strings.Contains(err.Error(), "1 entries for 2 rids") {
		t.Fatalf("ragged: %v", err)
	}
	if _, err := DecodeAnyOutputFrames([][]byte{{0xc1}}); err == nil {
		t.Fatal("garbage accepted")
	}
}

// DecodeAnyOutput never panics, and what it accepts as the full variant
// keeps its input logprobs through a re-encode.
func FuzzDecodeAnyOutput(f *testing.F) {
	seedVectors(f, "output")
	g := FullOutputBatch{RIDs: []string{"a"}, FinishedReasons: []*FinishReason{{Type: FinishStop}},
		OutputIDs: [][]int32{{1}}, PromptTokens: []int{2}, CompletionTokens: []int{1}, CachedTokens: []int{0}}
	g.SetInputLogprobs([][]float64{{math.NaN(), -1}}, [][]int32{{4, 5}})
	b, _ := EncodeFullOutput(g)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		ao, err := DecodeAnyOutput(b)
		if err != nil || ao.Full == nil {
			return
		}
		v1, i1, err := ao.Full.InputLogprobs()
		if err != nil {
			t.Fatalf("accepted batch has unreadable input logprobs: %v", err)
		}
		h := *ao.Full
		h.SetInputLogprobs(v1, i1)
		v2, i2, err := h.InputLogprobs()
		if err != nil || len(v2) != len(v1) || len(i2) != len(i1) {
			t.Fatalf("input logprobs do not survive a re-encode: %v", err)
		}
		for i := range ao.Batch.RIDs {
			_, _, _, _ = ao.PromptLogprobs(i)
			_ = ao.AbortMessage(i)
		}
	})
}

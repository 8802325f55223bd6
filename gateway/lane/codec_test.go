package lane

import (
	"math"
	"testing"

	"github.com/tsd-project/tsd/gateway/wire"
)

// A prefill's full-variant terminal message reaches the stream with its
// prompt logprobs and abort message instead of being dropped as malformed.
func TestDecodeOutputsFullVariant(t *testing.T) {
	t.Parallel()
	msg := "prompt logprobs are not supported"
	f := wire.FullOutputBatch{RIDs: []string{"a", "b"},
		FinishedReasons: []*wire.FinishReason{{Type: wire.FinishLength}, {Type: wire.FinishAbort, Message: &msg}},
		OutputIDs:       [][]int32{{7}, {}},
		PromptTokens:    []int{3, 3}, CompletionTokens: []int{1, 0}, CachedTokens: []int{0, 0}}
	f.SetInputLogprobs([][]float64{{math.NaN(), -1.25, -2}, nil}, [][]int32{{1, 2, 3}, nil})
	b, err := wire.EncodeFullOutput(f)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := decodeOutputs(b)
	if err != nil {
		t.Fatal(err)
	}
	a, c := outs[0], outs[1]
	if a.RID != "a" || a.Finished != wire.FinishLength || !a.HasPromptLogprobs || !math.IsNaN(a.PromptLogprobs[0]) || a.PromptLogprobs[1] != -1.25 || a.PromptLogprobIDs[2] != 3 {
		t.Fatalf("a = %+v", a)
	}
	if c.Finished != wire.FinishAbort || c.AbortMessage != msg || len(c.PromptLogprobs) != 0 {
		t.Fatalf("b = %+v", c)
	}
	slim, _ := wire.EncodeOutput(f.Slim(2))
	outs, err = decodeOutputs(slim)
	if err != nil || outs[0].HasPromptLogprobs || outs[0].EngineIndex != 2 || outs[1].AbortMessage != "" {
		t.Fatalf("slim: %+v %v", outs, err)
	}
}

// Engine output bytes are untrusted: decodeOutputs must not panic, and
// prompt logprobs it accepts pair one value with one token.
func FuzzDecodeOutputs(f *testing.F) {
	full := wire.FullOutputBatch{RIDs: []string{"a"}, FinishedReasons: []*wire.FinishReason{{Type: wire.FinishStop}},
		OutputIDs: [][]int32{{1}}, PromptTokens: []int{2}, CompletionTokens: []int{1}, CachedTokens: []int{0}}
	full.SetInputLogprobs([][]float64{{math.NaN(), -1}}, [][]int32{{4, 5}})
	b, _ := wire.EncodeFullOutput(full)
	f.Add(b)
	slim, _ := wire.EncodeOutput(full.Slim(1))
	f.Add(slim)
	f.Fuzz(func(t *testing.T, frame []byte) {
		outs, err := decodeOutputs(frame)
		if err != nil {
			return
		}
		for _, o := range outs {
			if len(o.PromptLogprobs) != len(o.PromptLogprobIDs) {
				t.Fatalf("%d prompt logprobs for %d tokens", len(o.PromptLogprobs), len(o.PromptLogprobIDs))
			}
		}
	})
}

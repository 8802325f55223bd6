package wire

import (
	"math"
	"testing"
)

// sameAsView reports where the in-place view differs from DecodeOutput's
// batch of the same frame ("" when it does not).
func sameAsView(o OutputBatch, v *OutputView) string {
	if len(v.RIDs) != len(o.RIDs) || v.EngineIndex != o.EngineIndex {
		return "rids or engine_index"
	}
	for i := range o.RIDs {
		if string(v.RIDs[i]) != o.RIDs[i] || v.FinishedReasons[i] != o.FinishedReasons[i] ||
			v.PromptTokens[i] != o.PromptTokens[i] || v.CompletionTokens[i] != o.CompletionTokens[i] ||
			v.CachedTokens[i] != o.CachedTokens[i] || !sameInts(v.OutputIDs[i], o.OutputIDs[i]) {
			return "rid " + o.RIDs[i]
		}
	}
	if len(v.OutputTokenLogprobsVal) != len(o.OutputTokenLogprobsVal) || len(v.OutputTokenLogprobsIdx) != len(o.OutputTokenLogprobsIdx) {
		return "logprob columns"
	}
	for i, vals := range o.OutputTokenLogprobsVal {
		if len(vals) != len(v.OutputTokenLogprobsVal[i]) {
			return "logprob values"
		}
		for j, f := range vals {
			if math.Float64bits(f) != math.Float64bits(v.OutputTokenLogprobsVal[i][j]) {
				return "logprob values"
			}
		}
	}
	for i, ids := range o.OutputTokenLogprobsIdx {
		if !sameInts(ids, v.OutputTokenLogprobsIdx[i]) {
			return "logprob ids"
		}
	}
	return ""
}

func sameInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func viewBatch(t testing.TB, n int, logprobs bool) []byte {
	o := OutputBatch{EngineIndex: 3}
	for i := range n {
		fin := FinishRunning
		if i%7 == 3 {
			fin = FinishLength
		}
		o.RIDs = append(o.RIDs, "chatcmpl-"+string(rune('a'+i%26))+"-0123456789")
		o.OutputIDs = append(o.OutputIDs, []int32{int32(i), int32(70000 + i)})
		o.FinishedReasons = append(o.FinishedReasons, fin)
		o.PromptTokens = append(o.PromptTokens, 32+i)
		o.CompletionTokens = append(o.CompletionTokens, i)
		o.CachedTokens = append(o.CachedTokens, i/2)
		if logprobs {
			o.OutputTokenLogprobsVal = append(o.OutputTokenLogprobsVal, []float64{-0.5, math.NaN()})
			o.OutputTokenLogprobsIdx = append(o.OutputTokenLogprobsIdx, []int32{int32(i), 1})
		}
	}
	b, err := EncodeOutput(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The view decodes what DecodeOutput decodes, batch after batch on one
// decoder (its reused buffers must not leak one batch into the next).
func TestOutputDecoderMatchesDecodeOutput(t *testing.T) {
	t.Parallel()
	var d OutputDecoder
	for _, c := range []struct {
		n  int
		lp bool
	}{{512, false}, {1, false}, {64, true}, {0, false}, {3, true}, {200, false}} {
		b := viewBatch(t, c.n, c.lp)
		o, err := DecodeOutput(b)
		if err != nil {
			t.Fatal(err)
		}
		v, err := d.Decode(b)
		if err != nil {
			t.Fatalf("n=%d: %v", c.n, err)
		}
		if why := sameAsView(o, v); why != "" {
			t.Fatalf("n=%d: view differs at %s", c.n, why)
		}
	}
	if !IsSlim(viewBatch(t, 1, false)) {
		t.Fatal("a slim batch is not slim")
	}
}

// Once its buffers have grown, the decoder allocates nothing per message
// (the lane's zero-allocation token path rests on it). Not parallel:
// AllocsPerRun reads global memstats.
func TestOutputDecoderAllocatesNothing(t *testing.T) {
	var d OutputDecoder
	for _, n := range []int{1, 64, 512} {
		b := viewBatch(t, n, n == 64)
		if _, err := d.Decode(b); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := d.Decode(b); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("rids=%d: %v allocations per message, want 0", n, allocs)
		}
	}
}

// FuzzOutputDecoder: the in-place decoder accepts exactly what
// DecodeOutput accepts, with the same contents, and never panics.
func FuzzOutputDecoder(f *testing.F) {
	seedVectors(f, "output")
	f.Add(viewBatch(f, 2, true))
	f.Add(viewBatch(f, 1, false))
	f.Add([]byte{0x90})
	var d OutputDecoder
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeOutput(b)
		v, verr := d.Decode(b)
		if (err == nil) != (verr == nil) {
			t.Fatalf("DecodeOutput err %v, view err %v", err, verr)
		}
		if err == nil {
			if why := sameAsView(o, v); why != "" {
				t.Fatalf("view differs at %s", why)
			}
		}
	})
}

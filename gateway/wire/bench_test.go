package wire

import "testing"

func benchRequest() GenerateRequest {
	ids := make([]int32, 500)
	for i := range ids {
		ids[i] = int32(1000 + i*257%150000)
	}
	sp := DefaultSamplingParams()
	sp.MaxNewTokens = ptr(256)
	sp.StopTokenIDs = []int32{151645, 151643}
	sp.Temperature, sp.TopP, sp.TopK = 0.7, 0.8, 20
	q := NewGenerateRequest("chatcmpl-0123456789abcdef-0", ids, sp.Normalized())
	q.Stream = true
	return q
}

func benchBatch() OutputBatch {
	const n = 64
	o := OutputBatch{}
	for i := 0; i < n; i++ {
		o.RIDs = append(o.RIDs, "chatcmpl-0123456789abcdef-"+string(rune('a'+i%26)))
		o.OutputIDs = append(o.OutputIDs, []int32{int32(100 + i), int32(151000 + i)})
		o.FinishedReasons = append(o.FinishedReasons, FinishRunning)
		o.PromptTokens = append(o.PromptTokens, 500)
		o.CompletionTokens = append(o.CompletionTokens, 40+i)
		o.CachedTokens = append(o.CachedTokens, 128)
		o.OutputTokenLogprobsVal = append(o.OutputTokenLogprobsVal, []float64{})
		o.OutputTokenLogprobsIdx = append(o.OutputTokenLogprobsIdx, []int32{})
	}
	return o
}

func BenchmarkEncodeRequest500(b *testing.B) {
	q := benchRequest()
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendGenerateRequest(buf[:0], q); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkEncodeRequest500Alloc(b *testing.B) {
	q := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeGenerateRequest(q); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRequest500(b *testing.B) {
	p, _ := EncodeGenerateRequest(benchRequest())
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeGenerateRequest(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeOutput64(b *testing.B) {
	o := benchBatch()
	buf := make([]byte, 0, 8192)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendOutput(buf[:0], o); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeOutput64(b *testing.B) {
	p, _ := EncodeOutput(benchBatch())
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeOutput(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutputDecoder64 is the token path's decode of the same batch:
// the in-place view, which allocates nothing once warm.
func BenchmarkOutputDecoder64(b *testing.B) {
	p, _ := EncodeOutput(benchBatch())
	var d OutputDecoder
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(p); err != nil {
			b.Fatal(err)
		}
	}
}

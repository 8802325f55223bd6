package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenizer/testcache"
)

// benchText is a few hundred KB of mixed text: the parity strings plus
// repeated prose, code and CJK.
func benchText(b *testing.B) string {
	b.Helper()
	var strs []string
	data, err := os.ReadFile("testdata/refs/strings.json")
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(data, &strs); err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for sb.Len() < 300<<10 {
		for _, s := range strs {
			sb.WriteString(s)
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

func benchEncode(b *testing.B, tk *Tokenizer) {
	text := benchText(b)
	// Split into request-sized prompts so the word cache sees realistic reuse.
	parts := strings.SplitAfter(text, "\n\n")
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		for _, p := range parts {
			if _, err := tk.Encode(p, false); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkEncodeDemo(b *testing.B) { benchEncode(b, demo(b)) }

func BenchmarkEncodeQwen3(b *testing.B) { benchEncode(b, loadReal(b, testcache.Qwen3)) }

func BenchmarkEncodeLlama3(b *testing.B) { benchEncode(b, loadReal(b, testcache.Llama3)) }

// BenchmarkDecodeStreamStep is the per-token cost of incremental detokenization
// through the stop jail (with two stop strings), as the gateway runs it.
func BenchmarkDecodeStreamStep(b *testing.B) {
	tk := loadReal(b, testcache.Qwen3)
	ids, _ := tk.Encode(benchText(b)[:20000], false)
	b.ResetTimer()
	n := 0
	for b.Loop() {
		sd := tk.NewStopDecoder(StopConfig{Strings: []string{"</answer>", "STOP NOW"}, SkipSpecial: true})
		for _, id := range ids {
			sd.Step(id)
		}
		sd.Finish()
		n += len(ids)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/token")
}

func BenchmarkLoadQwen3(b *testing.B) {
	dir := testcache.TokenizerDir(b, testcache.Qwen3)
	for b.Loop() {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeQwen3Cold encodes with an empty word cache each round:
// the cost of text never seen before.
func BenchmarkEncodeQwen3Cold(b *testing.B) {
	tk := loadReal(b, testcache.Qwen3)
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tk.model.mu.Lock()
		clear(tk.model.cache)
		tk.model.mu.Unlock()
		if _, err := tk.Encode(text, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeAgentPrompt is a chat prompt whose long system part
// (instructions + tool schemas) repeats across requests, as in agentic traffic.
func BenchmarkEncodeAgentPrompt(b *testing.B) {
	tk := loadReal(b, testcache.Qwen3)
	system := benchText(b)[:32<<10]
	n := 0
	b.SetBytes(int64(len(system)))
	for b.Loop() {
		n++
		p := "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\nquestion " + strings.Repeat("x", n%7) + "<|im_end|>\n<|im_start|>assistant\n"
		if _, err := tk.Encode(p, false); err != nil {
			b.Fatal(err)
		}
	}
}

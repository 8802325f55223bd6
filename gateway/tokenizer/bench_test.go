package tokenizer

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
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

// agentChat is a rendered ChatML conversation of about 2 KB in the shape
// agentic traffic has: a shared system prompt with tool schemas, then a
// history that grows a turn at a time. tail makes the newest user turn
// unique.
func agentChat(turns int, tail string) string {
	var sb strings.Builder
	sb.WriteString("<|im_start|>system\nYou are a coding agent working in a Go repository. Use the tools; read before you write; keep changes small.\n# Tools\n")
	for _, tool := range []string{"read_file", "grep", "run", "edit_file"} {
		sb.WriteString(`{"type": "function", "function": {"name": "` + tool + `", "description": "` + tool + ` on the workspace; paths are relative to the repository root", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}}, "required": ["path"]}}}` + "\n")
	}
	sb.WriteString("<|im_end|>\n")
	for i := 0; i < turns; i++ {
		sb.WriteString("<|im_start|>user\nStep " + strconv.Itoa(i) + ": look at gateway/tokenizer/cache.go and tell me where the budget is enforced.<|im_end|>\n")
		sb.WriteString("<|im_start|>assistant\n<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"path\": \"gateway/tokenizer\", \"pattern\": \"max\"}}\n</tool_call><|im_end|>\n")
	}
	sb.WriteString("<|im_start|>user\nAnd now? " + tail + "<|im_end|>\n<|im_start|>assistant\n")
	return sb.String()
}

// The prompt-cache benchmarks (cmd/tsd-bench/gobench.go lists them): a
// ~2 KB agent chat encoded without the cache (the BPE word cache warm, as
// in a serving gateway), through it on a miss (a new system prompt each
// time), an L0 hit (the same prompt again) and an L1 hit (the same
// history, a new last turn each time).
func BenchmarkPromptUncached(b *testing.B) {
	tk := loadReal(b, testcache.Qwen3)
	p := agentChat(4, "")
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tk.Encode(p, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPromptCacheMiss(b *testing.B) {
	tk := loadReal(b, testcache.Qwen3)
	c := NewCache(tk, 64<<20)
	p := agentChat(4, "")
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		if _, err := c.Encode(strconv.Itoa(n)+p, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPromptCacheL0(b *testing.B) {
	tk := loadReal(b, testcache.Qwen3)
	c := NewCache(tk, 64<<20)
	p := agentChat(4, "")
	if _, err := c.Encode(p, false); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Encode(p, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPromptCacheL1(b *testing.B) {
	tk := loadReal(b, testcache.Qwen3)
	c := NewCache(tk, 64<<20)
	if _, err := c.Encode(agentChat(4, "first"), false); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(agentChat(4, ""))))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		if _, err := c.Encode(agentChat(4, strconv.Itoa(n)), false); err != nil {
			b.Fatal(err)
		}
	}
	if st := c.Stats(); st.L1Hits < uint64(n) {
		b.Fatalf("want every round an L1 hit: %+v", st)
	}
}

// BenchmarkPromptCacheParallel is the L0 and L1 mix from every core at
// once: the cost of the cache's one mutex under contention.
func BenchmarkPromptCacheParallel(b *testing.B) {
	tk := loadReal(b, testcache.Qwen3)
	c := NewCache(tk, 64<<20)
	p := agentChat(4, "")
	if _, err := c.Encode(p, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			q := p
			if n := seq.Add(1); n%2 == 0 {
				q = agentChat(4, strconv.FormatInt(n, 10))
			}
			if _, err := c.Encode(q, false); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// pretokPrompt is a 32-word chat prompt, the size of the serving path's
// typical user turn.
const pretokPrompt = "Could you explain, in simple terms, why the sky looks blue during the day but turns red and orange at sunset? I'd really like a short answer with one simple example, please."

// BenchmarkPretok is the Split pre-tokenizer stage alone on each pattern
// with a hand-written matcher (pretok.go), that matcher against regexp2,
// on a 32-word prompt and on 64 KB of mixed prose, code and CJK.
func BenchmarkPretok(b *testing.B) {
	long := benchText(b)[:64<<10]
	for _, c := range []struct{ name, pat string }{
		{"qwen2", qwen2Pattern}, {"llama3", llama3Pattern}, {"gpt2", gpt2Pattern},
	} {
		re, err := compileRegex("bench", "pattern", c.pat)
		if err != nil {
			b.Fatal(err)
		}
		for _, in := range []struct{ name, text string }{{"prompt32", pretokPrompt}, {"mixed64k", long}} {
			for _, m := range []struct {
				name string
				sp   splitter
			}{{"fast", fastSplitter(c.pat)}, {"regexp2", regexSplitter{re}}} {
				b.Run(c.name+"/"+in.name+"/"+m.name, func(b *testing.B) {
					st := splitWith(m.sp, "Isolated", false)
					pieces := make([]string, 1)
					b.SetBytes(int64(len(in.text)))
					b.ReportAllocs()
					for b.Loop() {
						pieces[0] = in.text
						if _, err := st(pieces); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

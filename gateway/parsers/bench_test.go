package parsers

import (
	"strings"
	"testing"
)

// BenchmarkStreamQwen streams a thinking reply with a long tool call
// (a 16 KB file write) in 4-byte chunks, as a detokenizer would hand it
// over: the cost per reply byte of the parser chain.
func BenchmarkStreamQwen(b *testing.B) {
	body := strings.Repeat("line of code with \\\"quotes\\\" and é\\n", 400)
	text := "<think>\nPlan the write.\n</think>\n\nWriting it.\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"/tmp/x\", \"content\": \"" + body + "\"}}\n</tool_call>"
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		s, err := New(Config{Tool: "qwen", Reasoning: "qwen3", NewID: func(string, int) string { return "call_0" }})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for i := 0; i < len(text); i += 4 {
			n += len(s.Push(text[i:min(i+4, len(text))]))
		}
		n += len(s.Finish())
		if n == 0 {
			b.Fatal("no deltas")
		}
	}
}

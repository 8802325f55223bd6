package toolcall

import (
	"reflect"
	"testing"
)

// fuzzSplit checks that a parser's result does not depend on how the
// reply is chunked (mid-marker, mid-rune): the streamed deltas, joined,
// equal the whole-text parse. Seeds are the parser's vectors.
func fuzzSplit(f *testing.F, parser string) {
	vf := loadVectors(f, parser)
	for _, v := range vf.Vectors {
		f.Add(v.Text, []byte{1, 5, 2, 17, 3})
		f.Add(v.Text, []byte{7})
	}
	f.Fuzz(func(t *testing.T, text string, cuts []byte) {
		if len(cuts) == 0 {
			cuts = nil
		}
		whole := parseWhole(newTest(t, vf.Parser, vf.Tools), text)
		got := streamed(newTest(t, vf.Parser, vf.Tools), text, cuts)
		if !reflect.DeepEqual(got, whole) {
			t.Fatalf("text %q cuts %v\nstreamed %+v\nwhole    %+v", text, cuts, got, whole)
		}
	})
}

func FuzzQwen(f *testing.F)       { fuzzSplit(f, "qwen") }
func FuzzQwenXML(f *testing.F)    { fuzzSplit(f, "qwen_xml") }
func FuzzGLM45(f *testing.F)      { fuzzSplit(f, "glm45_moe") }
func FuzzGLM47(f *testing.F)      { fuzzSplit(f, "glm47_moe") }
func FuzzDeepSeek(f *testing.F)   { fuzzSplit(f, "deepseek") }
func FuzzDeepSeek31(f *testing.F) { fuzzSplit(f, "deepseek31") }
func FuzzDeepSeek32(f *testing.F) { fuzzSplit(f, "deepseek32") }
func FuzzDeepSeekV4(f *testing.F) { fuzzSplit(f, "deepseek_v4") }
func FuzzKimiK2(f *testing.F)     { fuzzSplit(f, "kimik2") }
func FuzzKimiK3(f *testing.F)     { fuzzSplit(f, "kimi_k3") }
func FuzzLlama(f *testing.F)      { fuzzSplit(f, "llama") }
func FuzzJSON(f *testing.F)       { fuzzSplit(f, "json") }
func FuzzHarmony(f *testing.F)    { fuzzSplit(f, "harmony") }
func FuzzInkling(f *testing.F)    { fuzzSplit(f, "inkling") }

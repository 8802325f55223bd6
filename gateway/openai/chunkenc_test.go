package openai

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func marshalEvent(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return "data: " + string(b) + "\n\n"
}

// jsonTexts are strings that exercise every escaping rule of encoding/json.
func jsonTexts() []string {
	ts := []string{"", "hi", " world", "a\"b\\c", "<script>&amp;</script>", "line\nbreak\r\t", "\b\f\x00\x01\x1f\x7f",
		"\u2028\u2029", "héllo 世界 🙂", "\xff", "ab\xc3", "\xed\xa0\x80", "\xf0\x9f\x99", "tail\\", strings.Repeat("x", 600)}
	for c := range 256 {
		ts = append(ts, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"z")
	}
	for _, r := range []rune{0x80, 0x7ff, 0x800, 0xfffd, 0xffff, 0x10000, 0x10ffff, 0x2027, 0x202a} {
		ts = append(ts, string(r))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := rng.IntN(24)
		b := make([]byte, n)
		for i := range b {
			switch rng.IntN(4) {
			case 0:
				b[i] = byte(rng.IntN(256))
			case 1:
				b[i] = byte(rng.IntN(0x20))
			default:
				b[i] = byte(0x20 + rng.IntN(0x5f))
			}
		}
		ts = append(ts, string(b))
		if n > 0 {
			ts = append(ts, string(b)+"\u2028"+string(b[:n/2]))
		}
	}
	return ts
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range jsonTexts() {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	}
}

// The encoder's events are byte for byte what json.Marshal of the
// chatChunk values streamChat used to send.
func TestChatChunkEncMatchesMarshal(t *testing.T) {
	for _, meta := range []struct {
		id, model string
		created   int64
	}{
		{"chatcmpl-0123456789abcdef01234567", "fake", 1764547200},
		{"chatcmpl-x", "Qwen/Qwen3-8B <a&b>", 0},
		{"", "m\u2028\"odel\xff", -5},
	} {
		enc := newChatChunkEnc(meta.id, meta.created, meta.model)
		chunk := func(c chunkChoice) chatChunk {
			return chatChunk{ID: meta.id, Object: "chat.completion.chunk", Created: meta.created, Model: meta.model, Choices: []chunkChoice{c}}
		}
		for _, index := range []int{0, 1, 7, 123} {
			empty := ""
			if got, want := string(enc.role(index)), marshalEvent(t, chunk(chunkChoice{Index: index, Delta: chunkDelta{Role: "assistant", Content: &empty}})); got != want {
				t.Fatalf("role: got %s, want %s", got, want)
			}
			for _, text := range jsonTexts() {
				text := text
				if got, want := string(enc.content(index, text)), marshalEvent(t, chunk(chunkChoice{Index: index, Delta: chunkDelta{Content: &text}})); got != want {
					t.Fatalf("content %q: got %s, want %s", text, got, want)
				}
			}
			for _, reason := range []string{"stop", "length", "abort"} {
				for _, matched := range []any{nil, "</s>", "a\"<b>", int32(151645), int32(-1), int64(7), 3.5, []int{1}} {
					f := reason
					if got, want := string(enc.finish(index, reason, matched)), marshalEvent(t, chunk(chunkChoice{Index: index, Delta: chunkDelta{}, FinishReason: &f, MatchedStop: matched})); got != want {
						t.Fatalf("finish %s %v: got %s, want %s", reason, matched, got, want)
					}
				}
			}
		}
	}
}

// A token's chunk costs no allocation once the buffer has grown.
func TestChatChunkEncNoAllocs(t *testing.T) {
	enc := newChatChunkEnc("chatcmpl-0123456789abcdef01234567", 1764547200, "fake")
	texts := []string{"hello", " wor<ld>", "\n", "世界", "\xff"}
	enc.content(0, strings.Repeat("x", 100))
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		_ = enc.content(0, texts[i%len(texts)])
		_ = enc.role(0)
		_ = enc.finish(0, "stop", "</s>")
		i++
	}); n != 0 {
		t.Fatalf("%v allocations per chunk, want 0", n)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a", "<&>", "\u2028", "\xff", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
		if !utf8.Valid(appendJSONString(nil, s)) {
			t.Fatalf("%q: invalid UTF-8 out", s)
		}
	})
}

// The completions encoder's events are json.Marshal's bytes of the
// completionResponse chunks streamCompletions used to send.
func TestCompletionChunkEncMatchesMarshal(t *testing.T) {
	for _, meta := range []struct {
		id, model string
		created   int64
	}{
		{"cmpl-0123456789abcdef01234567", "fake", 1764547200},
		{"", "m\u2028\"<odel>\xff", -5},
	} {
		enc := newCompletionChunkEnc(meta.id, meta.created, meta.model)
		chunk := func(c completionChoice) completionResponse {
			return completionResponse{ID: meta.id, Object: "text_completion", Created: meta.created, Model: meta.model, Choices: []completionChoice{c}}
		}
		for _, index := range []int{0, 3, 250} {
			for _, text := range jsonTexts() {
				if got, want := string(enc.text(index, text)), marshalEvent(t, chunk(completionChoice{Index: index, Text: text})); got != want {
					t.Fatalf("text %q: got %s, want %s", text, got, want)
				}
			}
			for _, matched := range []any{nil, "</s>", "a\"<b>", int32(151645), int64(7), []int{1}} {
				f := "stop"
				if got, want := string(enc.finish(index, f, matched)), marshalEvent(t, chunk(completionChoice{Index: index, FinishReason: &f, MatchedStop: matched})); got != want {
					t.Fatalf("finish %v: got %s, want %s", matched, got, want)
				}
			}
		}
	}
	enc := newCompletionChunkEnc("cmpl-x", 1, "fake")
	enc.text(0, strings.Repeat("x", 100))
	if n := testing.AllocsPerRun(1000, func() { _ = enc.text(0, "hello <world>"); _ = enc.finish(0, "length", nil) }); n != 0 {
		t.Fatalf("%v allocations per chunk, want 0", n)
	}
}

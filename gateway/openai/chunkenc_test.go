package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/jsonenc/jsontest"
)

func marshalEvent(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return "data: " + string(b) + "\n\n"
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
			for _, text := range jsontest.Strings() {
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
			for _, text := range jsontest.Strings() {
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

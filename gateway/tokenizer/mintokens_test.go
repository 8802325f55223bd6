package tokenizer

import (
	"strings"
	"testing"
)

// min_tokens: a stop string or stop token before min_tokens tokens is
// plain output; the first stop at or after it ends the generation.
func TestStopDecoderMinTokens(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	ids, _ := tk.Encode("a STOP b STOP c", false)
	stopsAt := func(cfg StopConfig) (string, int) {
		sd := tk.NewStopDecoder(cfg)
		var out strings.Builder
		for i, id := range ids {
			r := sd.Step(id)
			out.WriteString(r.Text)
			if r.Stopped {
				return out.String(), i + 1
			}
		}
		out.WriteString(sd.Finish())
		return out.String(), -1
	}
	first, at := stopsAt(StopConfig{Strings: []string{"STOP"}})
	if first != "a " || at < 0 {
		t.Fatalf("no min_tokens: %q at %d", first, at)
	}
	// With min_tokens past the first STOP, the second one ends it.
	got, at2 := stopsAt(StopConfig{Strings: []string{"STOP"}, MinTokens: at + 1})
	if got != "a STOP b " || at2 <= at {
		t.Fatalf("min_tokens %d: %q at %d", at+1, got, at2)
	}
	// Past every stop: nothing ends it, all text comes out.
	all, at3 := stopsAt(StopConfig{Strings: []string{"STOP"}, MinTokens: len(ids) + 1})
	if all != "a STOP b STOP c" || at3 != -1 {
		t.Fatalf("min_tokens beyond the text: %q at %d", all, at3)
	}

	// A stop token id before min_tokens is output like any token.
	tok := ids[len(ids)-1]
	sd := tk.NewStopDecoder(StopConfig{TokenIDs: []int32{tok}, IgnoreEOS: true, MinTokens: 2})
	if r := sd.Step(tok); r.Stopped {
		t.Fatalf("stop token as token 1 of min 2 stopped: %+v", r)
	}
	if r := sd.Step(tok); !r.Stopped || r.MatchedToken != tok {
		t.Fatalf("stop token as token 2 of min 2: %+v", r)
	}
}

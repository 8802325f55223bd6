package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fallbackTokenizer is a byte-fallback BPE with a non-special and a
// special added token, for the ids the demo's byte-level vocabulary
// does not have: 5 and 6 are the two bytes of "é", 8 is "<tool>"
// (special=false), 9 is "<s>" (special=true).
func fallbackTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	const tj = `{"added_tokens":[
	{"id":8,"content":"<tool>","special":false},
	{"id":9,"content":"<s>","special":true}],
	"normalizer":null,"pre_tokenizer":null,"decoder":{"type":"ByteFallback"},"post_processor":null,
	"model":{"type":"BPE","byte_fallback":true,"unk_token":"<unk>",
	"vocab":{"<unk>":0,"a":1,"b":2,"ab":3,"abb":4,"<0xC3>":5,"<0xA9>":6,"bb":7},
	"merges":[]}}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tj), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatalf("load byte-fallback tokenizer: %v", err)
	}
	return tk
}

// byteStep is the detokenizer's byte path alone (what every step took
// before the whole-token table): the reference the steady path must match.
type byteStep struct {
	d DecodeStream
}

func (b *byteStep) step(id int32) string {
	b.d.pending = b.d.t.DecodeBytes(b.d.pending, []int32{id}, b.d.skipSpecial)
	return b.d.take()
}

// Each step's text is exactly what the byte path gives, for the ids that
// are not whole characters on their own, held bytes, added and special
// tokens with and without skip_special_tokens, and ids out of range.
func TestDecodeStreamTrickyIDs(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	fb := fallbackTokenizer(t)
	b := func(c byte) int32 { // the demo's byte-level token of one byte
		id, ok := tk.TokenToID(string(byteToRune[c]))
		if !ok {
			t.Fatalf("no byte token for %#x", c)
		}
		return id
	}
	word := func(s string) int32 {
		ids, _ := tk.Encode(s, false)
		if len(ids) != 1 {
			t.Fatalf("%q is %d tokens", s, len(ids))
		}
		return ids[0]
	}
	x, hello := word("x"), word("hello")
	const imEnd, eot = 1002, 1000
	for _, c := range []struct {
		name string
		tk   *Tokenizer
		skip bool
		ids  []int32
		want []string // one per step, then the Flush
	}{
		{"whole tokens", tk, true, []int32{hello, x}, []string{"hello", "x", ""}},
		{"emoji byte by byte", tk, true, []int32{b(0xF0), b(0x9F), b(0x98), b(0x80), x}, []string{"", "", "", "😀", "x", ""}},
		{"whole token completes nothing held", tk, true, []int32{b(0xE2), b(0x82), b(0xAC), hello}, []string{"", "", "€", "hello", ""}},
		{"lead byte then whole token", tk, true, []int32{b(0xF0), x}, []string{"", "\ufffdx", ""}},
		{"lead byte then flush", tk, true, []int32{x, b(0xF0)}, []string{"x", "", "\ufffd"}},
		{"stray continuation byte", tk, true, []int32{b(0x80), x}, []string{"\ufffd", "x", ""}},
		{"special skipped", tk, true, []int32{x, imEnd, x}, []string{"x", "", "x", ""}},
		{"special kept", tk, false, []int32{x, imEnd, eot}, []string{"x", "<|im_end|>", "<|endoftext|>", ""}},
		{"special skipped while a byte is held", tk, true, []int32{b(0xC3), imEnd, b(0xA9)}, []string{"", "", "é", ""}},
		{"special kept while a byte is held", tk, false, []int32{b(0xC3), imEnd}, []string{"", "\ufffd<|im_end|>", ""}},
		{"out of range ids", tk, true, []int32{-1, 1 << 20, x}, []string{"", "", "x", ""}},
		{"out of range while held", tk, true, []int32{b(0xC3), -1, b(0xA9)}, []string{"", "", "é", ""}},
		{"byte fallback pair", fb, true, []int32{5, 6, 1}, []string{"", "é", "a", ""}},
		{"byte fallback broken", fb, true, []int32{5, 1}, []string{"", "\ufffda", ""}},
		{"added non-special kept by skip", fb, true, []int32{1, 8, 9, 2}, []string{"a", "<tool>", "", "b", ""}},
		{"added special kept", fb, false, []int32{9, 3}, []string{"<s>", "ab", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ds := c.tk.NewDecodeStream(c.skip)
			ref := &byteStep{d: DecodeStream{t: c.tk, skipSpecial: c.skip}}
			var got []string
			for _, id := range c.ids {
				s := ds.Step(id)
				if r := ref.step(id); s != r {
					t.Errorf("step %d: %q, byte path %q", id, s, r)
				}
				got = append(got, s)
			}
			got = append(got, ds.Flush())
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("steps %q, want %q", got, c.want)
			}
			// StepMany over the same ids gives the same text in all.
			ms := c.tk.NewDecodeStream(c.skip)
			if all := ms.StepMany(c.ids) + ms.Flush(); all != strings.Join(c.want, "") {
				t.Errorf("StepMany %q, want %q", all, strings.Join(c.want, ""))
			}
		})
	}
}

// Every id of a vocabulary steps to the bytes the byte path gives, from
// an empty state and after a held lead byte.
func TestDecodeStreamEveryID(t *testing.T) {
	t.Parallel()
	for _, tk := range []*Tokenizer{demo(t), fallbackTokenizer(t)} {
		for _, skip := range []bool{false, true} {
			for id := int32(0); id < int32(tk.VocabSize()); id++ {
				ds := tk.NewDecodeStream(skip)
				ref := &byteStep{d: DecodeStream{t: tk, skipSpecial: skip}}
				if s, r := ds.Step(id), ref.step(id); s != r {
					t.Fatalf("id %d skip=%v: %q, byte path %q", id, skip, s, r)
				}
				if s, r := ds.Flush(), ref.d.Flush(); s != r {
					t.Fatalf("id %d skip=%v flush: %q, byte path %q", id, skip, s, r)
				}
			}
		}
	}
}

// A steady token costs no allocation: whole tokens with nothing held
// return the tokenizer's own string, through the stop jail too.
func TestDecodeStreamAllocs(t *testing.T) {
	tk := demo(t)
	ids, _ := tk.Encode("The gateway renders the chat template and streams the answer.", false)
	ds := tk.NewDecodeStream(true)
	if a := testing.AllocsPerRun(100, func() {
		for _, id := range ids {
			ds.Step(id)
		}
		ds.Step(1002) // a skipped special token
	}); a != 0 {
		t.Errorf("DecodeStream.Step: %.1f allocations per run of %d tokens, want 0", a, len(ids)+1)
	}
	sd := tk.NewStopDecoder(StopConfig{IgnoreEOS: true, SkipSpecial: true, Strings: []string{"</answer>"}})
	if a := testing.AllocsPerRun(100, func() {
		for _, id := range ids {
			sd.Step(id)
		}
	}); a != 0 {
		t.Errorf("StopDecoder.Step with a stop string: %.1f allocations per run of %d tokens, want 0", a, len(ids))
	}
	sd = tk.NewStopDecoder(StopConfig{IgnoreEOS: true, SkipSpecial: true})
	if a := testing.AllocsPerRun(100, func() {
		for _, id := range ids {
			sd.Step(id)
		}
	}); a != 0 {
		t.Errorf("StopDecoder.Step: %.1f allocations per run of %d tokens, want 0", a, len(ids))
	}
}

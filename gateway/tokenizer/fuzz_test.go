package tokenizer

import (
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var (
	fuzzOnce sync.Once
	fuzzTok  *Tokenizer
)

func fuzzDemo(f *testing.F) *Tokenizer {
	fuzzOnce.Do(func() {
		tk, err := Load(demoDir)
		if err != nil {
			f.Fatal(err)
		}
		fuzzTok = tk
	})
	return fuzzTok
}

// Encoding any valid text and decoding it gives back its NFC form.
func FuzzEncodeRoundTrip(f *testing.F) {
	tk := fuzzDemo(f)
	for _, s := range []string{"", "Hello world", "  \n\t x", "<|im_start|>a<|im_end|>", "😀é\u0301", "'s 'LL 123"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		ids, err := tk.Encode(s, false)
		if err != nil {
			t.Fatalf("encode %q: %v", s, err)
		}
		if got, want := tk.Decode(ids, false), norm.NFC.String(s); got != want {
			t.Fatalf("round trip %q -> %q", want, got)
		}
	})
}

func idsFrom(data []byte, vocab int) []int32 {
	var ids []int32
	for len(data) >= 2 {
		ids = append(ids, int32(binary.LittleEndian.Uint16(data)%uint16(vocab)))
		data = data[2:]
	}
	return ids
}

// Streaming any id sequence emits valid UTF-8 pieces that add up to the
// one-shot decode, and the stop decoder cuts at the first stop occurrence.
func FuzzDecodeStream(f *testing.F) {
	tk := fuzzDemo(f)
	f.Add([]byte{0xF0, 0, 0x9F, 0, 0x98, 0, 0x80, 0}, "ab")
	f.Add([]byte("hello world, this is text"), "is")
	f.Fuzz(func(t *testing.T, data []byte, stop string) {
		ids := idsFrom(data, tk.VocabSize())
		ds := tk.NewDecodeStream(true)
		var b strings.Builder
		for _, id := range ids {
			s := ds.Step(id)
			if !utf8.ValidString(s) {
				t.Fatalf("invalid UTF-8 %q", s)
			}
			b.WriteString(s)
		}
		b.WriteString(ds.Flush())
		full := tk.Decode(ids, true)
		if b.String() != full {
			t.Fatalf("stream %q != decode %q", b.String(), full)
		}
		if stop == "" || !utf8.ValidString(stop) {
			return
		}
		sd := tk.NewStopDecoder(StopConfig{Strings: []string{stop}, SkipSpecial: true, IgnoreEOS: true})
		var out strings.Builder
		stopped := false
		for _, id := range ids {
			r := sd.Step(id)
			if strings.Contains(r.Text, stop) {
				t.Fatalf("emitted the stop string: %q", r.Text)
			}
			out.WriteString(r.Text)
			if r.Stopped {
				stopped = true
				break
			}
		}
		out.WriteString(sd.Finish())
		want := full
		if i := strings.Index(full, stop); i >= 0 {
			want = full[:i]
		}
		if out.String() != want || stopped != strings.Contains(full, stop) {
			t.Fatalf("stop %q: got %q (stopped %v), want %q", stop, out.String(), stopped, want)
		}
	})
}

package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"github.com/tsd-project/tsd/gateway/tokenizer/testcache"
)

// The patterns pretok.go matches by hand, each with regexp2 compiled as
// the loader compiles it: the reference the fast matchers must equal.
var pretokCases = sync.OnceValue(func() []pretokCase {
	var cs []pretokCase
	for _, c := range []struct{ name, pat string }{
		{"qwen2", qwen2Pattern}, {"llama3", llama3Pattern}, {"gpt2", gpt2Pattern},
	} {
		re, err := compileRegex("test", "pattern", c.pat)
		if err != nil {
			panic(err)
		}
		cs = append(cs, pretokCase{c.name, fastSplitter(c.pat), re})
	}
	return cs
})

type pretokCase struct {
	name string
	fast splitter
	re   *regexp2.Regexp
}

func regexSpans(tb testing.TB, re *regexp2.Regexp, s string) [][2]int {
	tb.Helper()
	spans, err := regexSplitter{re}.appendSpans(nil, s)
	if err != nil {
		tb.Fatalf("regexp2 on %q: %v", s, err)
	}
	return spans
}

// checkPretok fails unless every fast matcher gives regexp2's spans on s.
func checkPretok(tb testing.TB, s string) {
	tb.Helper()
	for _, c := range pretokCases() {
		want := regexSpans(tb, c.re, s)
		got, err := c.fast.appendSpans(nil, s)
		if err != nil {
			tb.Fatal(err)
		}
		if !slices.Equal(got, want) {
			tb.Fatalf("%s on %q:\n fast   %s\n regexp %s", c.name, s, showSpans(s, got), showSpans(s, want))
		}
	}
}

func showSpans(s string, spans [][2]int) string {
	var b strings.Builder
	for _, sp := range spans {
		fmt.Fprintf(&b, "%d:%q ", sp[0], s[sp[0]:sp[1]])
	}
	return b.String()
}

var pretokEdgeCases = []string{
	"", " ", "  ", "\n", "\r\n", "a", "1", "!", "'", "''", "' ", "'s",
	"Hello world", "Hello, world! How's it going?", "  leading and trailing  ",
	"I'm, you're, he'll, she'd, it's, they've, don't",
	"I'M YOU'RE HE'LL SHE'D IT'S THEY'VE DON'T", "'S 'T 'RE 'VE 'M 'LL 'D",
	"'Re 'rE 'Ve 'vE 'Ll 'lL 'x 'r 'v 'l 'rx 'vx 'lx", "'r", "'v", "'l", "'ll'",
	"'ſ 'ſt 'K 'k 'İ 'ı 'ß 'ẞ 'Ｓ 'ｓ", // long s, Kelvin sign, dotted/dotless i, fullwidth
	"x'ſ y'K z'S", "'''s", "a's'", "can't've", "'\u0301s", "'s\u0301",
	"12345 1234567 ½ ¼ ٣٤٥ ١٢٣٤ ⅧⅫ ²³ 𝟙𝟚𝟛 〇 ↉", "a1b2c3", "abc123def", "١٢٣abc",
	"日本語のテキスト 中文 한국어", "mixed日本abc中文123", "Здравствуй, мир! Γειά σου",
	"e\u0301 n\u0303 a\u0300\u0301b \u0301\u0302 \u0301a", "नमस्ते दुनिया", "مرحبا بالعالم",
	"😀 😀😀 a😀b 👍🏽 👨‍👩‍👧 🇺🇸 ❤️", "x\u200dy \u200b \ufeff",
	"a\r\nb\n\nc\r\r\n\nd", "  \n  x", " \n\n \t\n y", "\n\n\n", "\r", "\r\r", "a \n", "a\n ",
	"tab\there\t\tand\t \t", "\t\tx", "x\t", "\tx",
	"nbsp\u00a0here\u00a0\u00a0x \u00a0y\u00a0", "\u00a0x", "x\u00a0", "\u0085x\u0085 \u0085",
	"line\u2028sep\u2029para \u2028 x", "ideo\u3000space\u3000\u3000x", "\u1680\u2000\u200a\u202f\u205f x",
	"\v\f x \v", "trailing   ", "trailing\n", "trailing \n ", "spaces   before", "a   b",
	"a ,b ,, c !!! d ?!\n", " ...\n\n", "x ...\r\n\r\ny", "hello !\n", "! \n", " !", "  !", " !!\n\n x",
	"(hello) [world] {x} \"quoted\" 'single' `tick`", "a.b.c a-b-c a_b_c a/b/c",
	"$100.00 €50 ¥1000 50% #hash @user", "http://example.com/path?q=1&r=2#frag",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "    indented\n        code\n",
	"\x80", "\xff\xfe", "a\x80b", "\xc3", "\xc3(", "\xe2\x82", "\xe2\x82a", "\xf0\x9f\x98",
	"\xed\xa0\x80", "\xef\xbf\xbd", "'\x80", "' \x80", " \x80\n", "\x80\x80 x", "ab\xffcd 12\xff34",
	"\x00 \x00x \x01\x02", "\u00ad soft\u00adhyphen", "ǅ ǈ ᾈ", "ʰ ˆ ー 々",
	"ⅰⅱⅲ ⓵⓶ ①②③④", "ab123456789", "1 2 3 4", "1234 5678",
}

func TestPretokMatchesRegexp2(t *testing.T) {
	t.Parallel()
	for _, s := range pretokEdgeCases {
		checkPretok(t, s)
	}
	// Each edge case next to each other one: the joins reach states the
	// cases alone do not (a space run then a contraction, and so on).
	for _, a := range pretokEdgeCases {
		for _, b := range pretokEdgeCases[:40] {
			checkPretok(t, a+b)
		}
	}
}

// allRunes is every Unicode scalar value, UTF-8 encoded, with the start of
// each in the text.
var allRunes = sync.OnceValues(func() (string, []int) {
	var b strings.Builder
	var starts []int
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue // surrogates: no UTF-8 string holds them
		}
		starts = append(starts, b.Len())
		b.WriteRune(r)
	}
	return b.String(), starts
})

// The classes are regexp2's, code point by code point: each class regex,
// repeated, matches exactly the runs of the runes classOf puts in it
// (runs rather than single runes keep regexp2's per-match cost, which the
// race detector multiplies, off the million code points).
func TestPretokClassesEveryRune(t *testing.T) {
	t.Parallel()
	text, _ := allRunes()
	for _, c := range []struct {
		pat string
		in  func(uint8) bool
	}{
		{`\p{L}`, func(c uint8) bool { return c == clsLetter }},
		{`\p{N}`, func(c uint8) bool { return c == clsNumber }},
		{`\s`, func(c uint8) bool { return c == clsSpace || c == clsNewline }},
		{`[\r\n]`, func(c uint8) bool { return c == clsNewline }},
		{`[^\s\p{L}\p{N}]`, func(c uint8) bool { return c == clsOther }},
		{`[^\r\n\p{L}\p{N}]`, func(c uint8) bool { return c == clsOther || c == clsSpace }},
	} {
		re, err := compileRegex("test", "pattern", "(?:"+c.pat+")+")
		if err != nil {
			t.Fatal(err)
		}
		runs := func(s string) [][2]int {
			var out [][2]int
			for i := 0; i < len(s); {
				_, cls, n := runeAt(s, i)
				if c.in(cls) {
					if len(out) > 0 && out[len(out)-1][1] == i {
						out[len(out)-1][1] = i + n
					} else {
						out = append(out, [2]int{i, i + n})
					}
				}
				i += n
			}
			return out
		}
		if got, want := runs(text), regexSpans(t, re, text); !slices.Equal(got, want) {
			for k := range min(len(got), len(want)) {
				if got[k] != want[k] {
					r1, _, _ := runeAt(text, min(got[k][0], want[k][0]))
					t.Fatalf("%s: runs differ from U+%04X: classOf %q, regexp2 %q", c.pat, r1,
						text[got[k][0]:got[k][1]], text[want[k][0]:want[k][1]])
				}
			}
			t.Fatalf("%s: %d runs, regexp2 %d", c.pat, len(got), len(want))
		}
		// Invalid UTF-8: each byte is one U+FFFD to regexp2.
		for b := 0x80; b <= 0xff; b++ {
			s := "a" + string([]byte{byte(b)}) + "1 \xe2\x82!\xf0\x9f\x98\n"
			want := regexSpans(t, re, s)
			if got := runs(s); !slices.Equal(got, want) {
				t.Errorf("%s on %q: regexp2 %v, classes say %v", c.pat, s, want, got)
			}
		}
	}
}

// exhaustive says whether the every-code-point tests try the k-th code
// point r. Under the race detector (`make test`), which slows regexp2
// some thirtyfold, and with -short they try all below U+3000, every rune
// with a case fold or of \s, and a sample of the rest; plain `go test`
// tries every one.
func exhaustive(r rune, k int) bool {
	if !sampled() {
		return true
	}
	return r < 0x3000 || k%251 == 0 || unicode.SimpleFold(r) != r || unicode.IsSpace(r)
}

func sampled() bool { return raceEnabled || testing.Short() }

// (?i) in the contractions folds as regexp2 folds, for every code point in
// each letter's place: the contractions alone, regexp2 against
// foldedContraction scanned the way FindAll scans.
func TestPretokContractionFoldEveryRune(t *testing.T) {
	t.Parallel()
	re, err := compileRegex("test", "pattern", `(?i:'s|'t|'re|'ve|'m|'ll|'d)`)
	if err != nil {
		t.Fatal(err)
	}
	text, starts := allRunes()
	var b strings.Builder
	for k, i := range starts {
		if r, _, _ := runeAt(text, i); !exhaustive(r, k) {
			continue
		}
		end := len(text)
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		r := text[i:end]
		for _, probe := range []string{"'" + r, "'" + r + "e", "'" + r + "l", "'r" + r, "'v" + r, "'l" + r, "'R" + r, "'V" + r, "'L" + r} {
			b.WriteString(probe)
			b.WriteByte(' ')
		}
	}
	s := b.String()
	want := regexSpans(t, re, s)
	var got [][2]int
	for i := 0; i < len(s); {
		if s[i] == '\'' {
			if end := foldedContraction(s, i); end >= 0 {
				got = append(got, [2]int{i, end})
				i = end
				continue
			}
		}
		_, _, n := runeAt(s, i)
		i += n
	}
	if !slices.Equal(got, want) {
		for k := range min(len(got), len(want)) {
			if got[k] != want[k] {
				t.Fatalf("first difference at match %d: fast %q, regexp2 %q", k, s[got[k][0]:got[k][1]], s[want[k][0]:want[k][1]])
			}
		}
		t.Fatalf("fast %d matches, regexp2 %d", len(got), len(want))
	}
}

// pretokReps are runes of every class and encoded length, the contraction
// letters in their cases and folds, and invalid UTF-8.
var pretokReps = []string{
	"a", "Z", "é", "ſ", "\u212a", "日", "𝐀", "ǅ", "ʰ", // \p{L}
	"s", "S", "t", "T", "r", "R", "e", "E", "v", "V", "m", "M", "l", "L", "d", "D",
	"1", "½", "٣", "𝟙", "Ⅻ", // \p{N}
	" ", "\t", "\v", "\f", "\u0085", "\u00a0", "\u2028", "\u3000", "\r", "\n", // \s
	"!", "'", ".", "\u0301", "\u200d", "😀", "\ufffd", "\x00", "\x80", "\xe2\x82", // the rest
}

// Every sequence of three representatives, and of four from a smaller
// set (one of each class, the apostrophe and contraction letters): the
// pattern's alternatives look at most that far before deciding. Sampled
// (see exhaustive), the smaller set for both.
func TestPretokClassSequences(t *testing.T) {
	t.Parallel()
	small := []string{"a", "é", "1", " ", "\u00a0", "\n", "\r", "!", "\x80", "'", "s", "R", "e", "l", "\t"}
	reps := pretokReps
	if sampled() {
		reps, small = small, small[:10]
	}
	for _, a := range reps {
		for _, b := range reps {
			for _, c := range reps {
				checkPretok(t, a+b+c)
			}
		}
	}
	for _, a := range small {
		for _, b := range small {
			for _, c := range small {
				for _, d := range small {
					checkPretok(t, a+b+c+d)
				}
			}
		}
	}
}

// Every code point next to a rune of each class, both ways round, through
// the whole patterns: this catches a rune regexp2 treats differently in
// the compiled pattern (its first-character sets, say) than in its class
// alone.
func TestPretokEveryRuneInContext(t *testing.T) {
	t.Parallel()
	text, starts := allRunes()
	ctx := []string{"a", " ", "!", "1", "\n", "'", "  "}
	var b strings.Builder
	flush := func() {
		checkPretok(t, b.String())
		b.Reset()
	}
	for k, i := range starts {
		if r, _, _ := runeAt(text, i); !exhaustive(r, k) {
			continue
		}
		end := len(text)
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		r := text[i:end]
		for _, c := range ctx {
			b.WriteString(r)
			b.WriteString(c)
		}
		b.WriteString(r)
		if b.Len() > 64<<10 {
			flush()
		}
	}
	flush()
}

// Long whitespace and newline runs, where the patterns backtrack.
func TestPretokLongRuns(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		strings.Repeat(" ", 5000), strings.Repeat(" ", 5000) + "x", strings.Repeat(" \n", 3000) + " x",
		strings.Repeat("\u3000", 2000) + "x", strings.Repeat("a", 5000) + strings.Repeat("1", 5000),
		strings.Repeat("!", 5000) + strings.Repeat("\r\n", 2000), strings.Repeat("'s", 3000),
	} {
		checkPretok(t, s)
	}
}

// The loader picks the fast matcher for the patterns the real tokenizer
// files spell, after their JSON unescaping, and regexp2 for the rest.
func TestPretokSelected(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, file string, want splitter) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var raw struct {
			PreTokenizer struct {
				Pretokenizers []struct {
					Pattern struct{ Regex string }
				}
			} `json:"pre_tokenizer"`
		}
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		sp, err := compileSplitter(file, "p", raw.PreTokenizer.Pretokenizers[0].Pattern.Regex)
		if err != nil {
			t.Fatal(err)
		}
		if sp != want {
			t.Errorf("%s: %#v, want %#v", file, sp, want)
		}
	}
	t.Run("demo", func(t *testing.T) { check(t, demoDir+"/tokenizer.json", qwenSplitter{maxDigits: 1}) })
	t.Run("qwen3", func(t *testing.T) {
		check(t, testcache.TokenizerDir(t, testcache.Qwen3)+"/tokenizer.json", qwenSplitter{maxDigits: 1})
	})
	t.Run("llama3", func(t *testing.T) {
		check(t, testcache.TokenizerDir(t, testcache.Llama3)+"/tokenizer.json", qwenSplitter{maxDigits: 3})
	})
	if sp, _ := compileSplitter("t", "p", gpt2Pattern); sp != (gpt2Splitter{}) {
		t.Errorf("gpt2: %#v", sp)
	}
	if sp, _ := compileSplitter("t", "p", qwen2Pattern+"|x"); sp == nil {
		t.Error("nil splitter")
	} else if _, ok := sp.(regexSplitter); !ok {
		t.Errorf("other pattern: %T, want regexp2", sp)
	}
}

// The fast matchers equal regexp2 on any input, valid UTF-8 or not, and
// on the input read as a string of pretokReps (a byte each), which
// reaches the mixes of classes and folds that random bytes seldom do.
func FuzzPretokMatcher(f *testing.F) {
	for _, s := range pretokEdgeCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkPretok(t, s)
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			b.WriteString(pretokReps[int(s[i])%len(pretokReps)])
		}
		checkPretok(t, b.String())
	})
}

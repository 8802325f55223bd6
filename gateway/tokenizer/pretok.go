package tokenizer

import (
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// splitter finds the spans a Split pattern matches in s, appending them
// to dst as byte offsets in order. splitWith applies HF's behaviours to
// those spans whichever splitter produced them.
type splitter interface {
	appendSpans(dst [][2]int, s string) ([][2]int, error)
}

// regexSplitter is the general case: any pattern, through regexp2.
type regexSplitter struct{ re *regexp2.Regexp }

func (r regexSplitter) appendSpans(dst [][2]int, s string) ([][2]int, error) {
	locs, err := r.re.FindAllStringIndex(s, -1)
	if err != nil {
		return dst, err
	}
	for _, l := range locs {
		dst = append(dst, [2]int{l[0], l[1]})
	}
	return dst, nil
}

// The Split patterns with a hand-written matcher. They must be compared
// with the pattern string exactly as it leaves the JSON decoder.
const (
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// fastSplitter returns the hand-written matcher for pat, or nil when pat
// is not one of the patterns it implements. Each matcher gives exactly
// the spans regexp2's FindAllStringIndex gives for its pattern (compiled
// as compileRegex does); pretok_test.go checks that differentially, over
// every code point for the character classes and by fuzzing.
func fastSplitter(pat string) splitter {
	switch pat {
	case qwen2Pattern:
		return qwenSplitter{maxDigits: 1}
	case llama3Pattern:
		return qwenSplitter{maxDigits: 3}
	case gpt2Pattern:
		return gpt2Splitter{}
	}
	return nil
}

// Rune classes as the patterns see them in regexp2's default mode (the
// options compileRegex passes): \p{L} and \p{N} are Go's unicode.L and
// unicode.N tables and \s is unicode.IsSpace, which pretok_test.go checks
// for every code point. Every rune is in exactly one class; clsOther is
// [^\s\p{L}\p{N}].
const (
	clsOther uint8 = iota
	clsLetter
	clsNumber
	clsSpace   // \s other than \r and \n
	clsNewline // \r or \n
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for b := range t {
		t[b] = classOf(rune(b))
	}
	return t
}()

func classOf(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsSpace(r):
		return clsSpace
	case unicode.Is(unicode.L, r):
		return clsLetter
	case unicode.Is(unicode.N, r):
		return clsNumber
	}
	return clsOther
}

// runeAt decodes the rune at s[i] (i < len(s)) as regexp2 sees it: Go's
// decoding, so each byte of invalid UTF-8 is one U+FFFD (a clsOther rune)
// of width 1, which is also how regexp2 maps its rune offsets back to
// byte offsets.
func runeAt(s string, i int) (r rune, cls uint8, size int) {
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), asciiClass[b], 1
	}
	return runeAtSlow(s, i)
}

func runeAtSlow(s string, i int) (rune, uint8, int) {
	r, size := utf8.DecodeRuneInString(s[i:])
	return r, classOf(r), size
}

// classAt is runeAt's class, or clsNone past the end.
const clsNone uint8 = 255

func classAt(s string, i int) (cls uint8, size int) {
	if i >= len(s) {
		return clsNone, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	_, cls, size = runeAtSlow(s, i)
	return cls, size
}

// skipClass returns the end of the run of class cls starting at i.
func skipClass(s string, i int, cls uint8) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClass[b] != cls {
				break
			}
			i++
			continue
		}
		_, c, n := runeAtSlow(s, i)
		if c != cls {
			break
		}
		i += n
	}
	return i
}

// skipNewlines returns the end of the run of \r and \n starting at i.
func skipNewlines(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// spaceRun is the greedy \s+ at i (a whitespace rune there): its end, the
// start of its last rune, and the end of its last \r or \n (-1: none).
func spaceRun(s string, i int) (end, last, lastNL int) {
	lastNL = -1
	for end = i; end < len(s); {
		c, n := classAt(s, end)
		if c != clsSpace && c != clsNewline {
			break
		}
		if c == clsNewline {
			lastNL = end + 1
		}
		last = end
		end += n
	}
	return end, last, lastNL
}

// spaceTail is `\s+(?!\S)|\s+` at a whitespace run [i, end) whose last
// rune starts at last: the whole run at the end of the text, else the run
// but its last rune (which the lookahead needs as the space before \S),
// else, for a single space before \S, that space.
func spaceTail(s string, i, end, last int) int {
	if end < len(s) && last > i {
		return last
	}
	return end
}

// contractionFold holds the runes (?i) lets each letter of the
// contractions match: its orbit under Go's simple case folding, which is
// regexp2's IgnoreCase outside ECMAScript mode, so 's' also matches 'S'
// and 'ſ' (U+017F). pretok_test.go tries every code point in each place.
var contractionFold = func() (m [128][]rune) {
	for _, c := range "strvmlde" {
		r := c
		for {
			m[c] = append(m[c], r)
			if r = unicode.SimpleFold(r); r == c {
				break
			}
		}
	}
	return m
}()

func foldIs(r rune, lower byte) bool {
	for _, f := range contractionFold[lower] {
		if r == f {
			return true
		}
	}
	return false
}

// foldedContraction is `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at an apostrophe
// s[i]: the match's end, or -1.
func foldedContraction(s string, i int) int {
	j := i + 1
	if j >= len(s) {
		return -1
	}
	r, _, n := runeAt(s, j)
	j += n
	switch {
	case foldIs(r, 's'), foldIs(r, 't'), foldIs(r, 'm'), foldIs(r, 'd'):
		return j
	case foldIs(r, 'r'), foldIs(r, 'v'), foldIs(r, 'l'):
		if j >= len(s) {
			return -1
		}
		want := byte('e')
		if foldIs(r, 'l') {
			want = 'l'
		}
		if r2, _, n2 := runeAt(s, j); foldIs(r2, want) {
			return j + n2
		}
	}
	return -1
}

// qwenSplitter is qwen2Pattern (maxDigits 1) or llama3Pattern (3):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Every rune starts a match of some alternative, so the matches tile the
// text; at each position the first alternative that matches wins.
type qwenSplitter struct{ maxDigits int }

func (q qwenSplitter) appendSpans(dst [][2]int, s string) ([][2]int, error) {
	for i := 0; i < len(s); {
		end := q.matchAt(s, i)
		dst = append(dst, [2]int{i, end})
		i = end
	}
	return dst, nil
}

func (q qwenSplitter) matchAt(s string, i int) int {
	r, cls, n := runeAt(s, i)
	if r == '\'' {
		if end := foldedContraction(s, i); end >= 0 {
			return end
		}
	}
	switch cls {
	case clsLetter:
		return skipClass(s, i+n, clsLetter)
	case clsNumber:
		end := i + n
		for k := 1; k < q.maxDigits; k++ {
			c, m := classAt(s, end)
			if c != clsNumber {
				break
			}
			end += m
		}
		return end
	case clsOther, clsSpace:
		// [^\r\n\p{L}\p{N}]?\p{L}+ with the optional rune taken.
		if c, _ := classAt(s, i+n); c == clsLetter {
			return skipClass(s, i+n, clsLetter)
		}
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	if cls == clsOther {
		return skipNewlines(s, skipClass(s, i+n, clsOther))
	}
	if r == ' ' {
		if c, _ := classAt(s, i+1); c == clsOther {
			return skipNewlines(s, skipClass(s, i+1, clsOther))
		}
	}
	// Whitespace. `\s*[\r\n]+`: \s* gives back up to the run's last
	// newline, and [\r\n]+ takes just that one.
	end, last, lastNL := spaceRun(s, i)
	if lastNL >= 0 {
		return lastNL
	}
	return spaceTail(s, i, end, last)
}

// gpt2Splitter is gpt2Pattern, ByteLevel's use_regex split:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
type gpt2Splitter struct{}

func (gpt2Splitter) appendSpans(dst [][2]int, s string) ([][2]int, error) {
	for i := 0; i < len(s); {
		end := gpt2MatchAt(s, i)
		dst = append(dst, [2]int{i, end})
		i = end
	}
	return dst, nil
}

func gpt2MatchAt(s string, i int) int {
	r, cls, n := runeAt(s, i)
	if r == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	if cls == clsLetter || cls == clsNumber || cls == clsOther {
		return skipClass(s, i+n, cls)
	}
	if r == ' ' {
		if c, _ := classAt(s, i+1); c == clsLetter || c == clsNumber || c == clsOther {
			return skipClass(s, i+1, c)
		}
	}
	end, last, _ := spaceRun(s, i)
	return spaceTail(s, i, end, last)
}

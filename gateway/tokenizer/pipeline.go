package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// normalizer maps a piece of text before pre-tokenization.
type normalizer func(string) string

func parseNormalizer(file, field string, raw json.RawMessage) (normalizer, error) {
	typ, err := typed(raw)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %s: %w", file, field, err)
	}
	switch typ {
	case "":
		return nil, nil
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Sequence":
		var s struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("parse %s: %s: %w", file, field, err)
		}
		var fs []normalizer
		for i, r := range s.Normalizers {
			n, err := parseNormalizer(file, fmt.Sprintf("%s.normalizers[%d]", field, i), r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				fs = append(fs, n)
			}
		}
		return func(x string) string {
			for _, f := range fs {
				x = f(x)
			}
			return x
		}, nil
	}
	return nil, unsupported(file, field+".type", fmt.Sprintf("normalizer %q", typ))
}

// preTokenizer is one stage of pre-tokenization: it maps a list of pieces
// to a new list, as HF's PreTokenizedString.
type preTokenizer func(pieces []string) ([]string, error)

// stage is a flattened pre-tokenizer step. byteLevel marks the plain
// byte→rune mapping, which the BPE word cache can apply on a miss only.
type stage struct {
	fn        preTokenizer
	byteLevel bool
}

// gpt2Pattern is the regex ByteLevel applies with use_regex=true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

func compileRegex(file, field, pat string) (*regexp2.Regexp, error) {
	// Long whitespace runs make `\s+(?!\S)` backtrack deeply; the default
	// stack limit would turn a legal prompt into an error.
	re, err := regexp2.Compile(pat, regexp2.None, regexp2.OptionMaxBacktrackingStackSize(1<<26))
	if err != nil {
		return nil, &fieldError{file, field, fmt.Sprintf("compile regex %q: %v", pat, err)}
	}
	return re, nil
}

// compileSplitter is the splitter for a Split pattern: the hand-written
// matcher when pretok.go has one for exactly this pattern (the common
// models' patterns, which every prompt goes through), else regexp2.
func compileSplitter(file, field, pat string) (splitter, error) {
	if sp := fastSplitter(pat); sp != nil {
		return sp, nil
	}
	re, err := compileRegex(file, field, pat)
	if err != nil {
		return nil, err
	}
	return regexSplitter{re}, nil
}

func parsePreTokenizer(file, field string, raw json.RawMessage) ([]stage, error) {
	typ, err := typed(raw)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %s: %w", file, field, err)
	}
	switch typ {
	case "":
		return nil, nil
	case "Sequence":
		var s struct {
			Pretokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("parse %s: %s: %w", file, field, err)
		}
		var stages []stage
		for i, r := range s.Pretokenizers {
			st, err := parsePreTokenizer(file, fmt.Sprintf("%s.pretokenizers[%d]", field, i), r)
			if err != nil {
				return nil, err
			}
			stages = append(stages, st...)
		}
		return stages, nil
	case "Split":
		var s struct {
			Pattern struct {
				Regex  *string `json:"Regex"`
				String *string `json:"String"`
			} `json:"pattern"`
			Behavior string `json:"behavior"`
			Invert   bool   `json:"invert"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("parse %s: %s: %w", file, field, err)
		}
		var pat string
		switch {
		case s.Pattern.Regex != nil:
			pat = *s.Pattern.Regex
		case s.Pattern.String != nil:
			pat = regexp2.Escape(*s.Pattern.String)
		default:
			return nil, &fieldError{file, field + ".pattern", "neither Regex nor String"}
		}
		sp, err := compileSplitter(file, field+".pattern", pat)
		if err != nil {
			return nil, err
		}
		if _, ok := splitModes[s.Behavior]; !ok {
			return nil, unsupported(file, field+".behavior", fmt.Sprintf("Split behavior %q", s.Behavior))
		}
		return []stage{{fn: splitWith(sp, s.Behavior, s.Invert)}}, nil
	case "ByteLevel":
		var s struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("parse %s: %s: %w", file, field, err)
		}
		var stages []stage
		if s.AddPrefixSpace {
			stages = append(stages, stage{fn: func(p []string) ([]string, error) {
				for i, x := range p {
					if !strings.HasPrefix(x, " ") {
						p[i] = " " + x
					}
				}
				return p, nil
			}})
		}
		if s.UseRegex == nil || *s.UseRegex {
			sp, err := compileSplitter(file, field, gpt2Pattern)
			if err != nil {
				return nil, err
			}
			stages = append(stages, stage{fn: splitWith(sp, "Isolated", false)})
		}
		stages = append(stages, stage{byteLevel: true, fn: func(p []string) ([]string, error) {
			for i, x := range p {
				p[i] = byteLevelEncode(x)
			}
			return p, nil
		}})
		return stages, nil
	case "Digits":
		var s struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("parse %s: %s: %w", file, field, err)
		}
		pat := `\p{N}+` // Rust char::is_numeric: any N category
		if s.IndividualDigits {
			pat = `\p{N}`
		}
		sp, err := compileSplitter(file, field, pat)
		if err != nil {
			return nil, err
		}
		return []stage{{fn: splitWith(sp, "Isolated", false)}}, nil
	}
	return nil, unsupported(file, field+".type", fmt.Sprintf("pre-tokenizer %q", typ))
}

// splitWith splits every piece on the spans of sp with one of HF's
// behaviours, whichever matcher sp is. invert swaps the roles of matches
// and the text between them (gpt-4o's tokenizer keeps the matches and
// removes the rest that way).
func splitWith(sp splitter, behavior string, invert bool) preTokenizer {
	mode := splitModes[behavior]
	return func(pieces []string) ([]string, error) {
		buf := spanBufs.Get().(*[][2]int)
		defer putSpanBuf(buf)
		spans := (*buf)[:0]
		o := splitOut{mode: mode}
		for pi, p := range pieces {
			var err error
			if spans, err = sp.appendSpans(spans[:0], p); err != nil {
				return nil, fmt.Errorf("split pre-token: %w", err)
			}
			*buf = spans
			// Room for this piece's segments and, on the first piece, one
			// for each of the rest.
			n := segments(spans, len(p))
			if pi == 0 {
				n += len(pieces) - 1
			}
			o.out = slices.Grow(o.out, n)
			o.first = len(o.out) // merges never cross into another piece
			prev := 0
			for _, l := range spans {
				if l[0] == l[1] {
					continue
				}
				if l[0] > prev {
					o.add(p[prev:l[0]], invert)
				}
				o.add(p[l[0]:l[1]], !invert)
				prev = l[1]
			}
			if prev < len(p) {
				o.add(p[prev:], invert)
			}
			if o.pending != "" {
				o.out = append(o.out, o.pending)
				o.pending = ""
			}
		}
		if o.out == nil {
			o.out = []string{}
		}
		return o.out, nil
	}
}

// segments counts the segments spans cut a text of length n into: the
// non-empty spans and the gaps around them.
func segments(spans [][2]int, n int) int {
	k, prev := 0, 0
	for _, l := range spans {
		if l[0] == l[1] {
			continue
		}
		if l[0] > prev {
			k++
		}
		k++
		prev = l[1]
	}
	if prev < n {
		k++
	}
	return k
}

// spanBufs keeps the span lists splitWith fills, so that a prompt's split
// allocates only the pieces it returns.
var spanBufs = sync.Pool{New: func() any { return new([][2]int) }}

func putSpanBuf(b *[][2]int) {
	if cap(*b) <= 1<<16 { // a huge prompt's list is not worth keeping
		spanBufs.Put(b)
	}
}

const (
	splitIsolated = iota
	splitRemoved
	splitMergedWithPrevious
	splitMergedWithNext
)

// splitModes are the Split behaviours tsd applies, by their name in
// tokenizer.json: the one list the loader checks a file's against.
var splitModes = map[string]int{
	"Isolated":           splitIsolated,
	"Removed":            splitRemoved,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
}

// splitOut applies a Split behaviour to one piece's segments in order.
type splitOut struct {
	mode    int
	out     []string
	first   int    // index in out of the piece's first segment
	pending string // MergedWithNext carries a match into the next segment
}

func (o *splitOut) add(s string, isMatch bool) {
	switch {
	case !isMatch || o.mode == splitIsolated:
		if o.pending != "" {
			s = o.pending + s
			o.pending = ""
		}
		o.out = append(o.out, s)
	case o.mode == splitRemoved:
	case o.mode == splitMergedWithPrevious:
		if len(o.out) > o.first {
			o.out[len(o.out)-1] += s
		} else {
			o.out = append(o.out, s)
		}
	case o.mode == splitMergedWithNext:
		o.pending += s
	}
}

// byteToRune is GPT-2's reversible byte→printable-rune map: printable
// Latin-1 bytes stay themselves, the rest shift to U+0100 and up.
var byteToRune [256]rune
var runeToByte = map[rune]byte{}

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

func byteLevelEncode(s string) string {
	b := make([]byte, 0, len(s)*2)
	for i := 0; i < len(s); i++ {
		b = utf8.AppendRune(b, byteToRune[s[i]])
	}
	return string(b)
}

// byteLevelDecode maps a byte-level token string back to raw bytes; runes
// outside the map (e.g. added tokens' text) pass through as UTF-8.
func byteLevelDecode(dst []byte, tok string) []byte {
	for _, r := range tok {
		if b, ok := runeToByte[r]; ok {
			dst = append(dst, b)
		} else {
			dst = append(dst, string(r)...)
		}
	}
	return dst
}

// parseDecoder accepts the decoders byte-level models use. It reports
// whether tokens go through the ByteLevel mapping (they always do for the
// models we support; a bare ByteFallback/Fuse chain is also accepted).
func parseDecoder(file, field string, raw json.RawMessage) (bool, error) {
	typ, err := typed(raw)
	if err != nil {
		return false, fmt.Errorf("parse %s: %s: %w", file, field, err)
	}
	switch typ {
	case "":
		return false, nil
	case "ByteLevel":
		return true, nil
	case "ByteFallback", "Fuse":
		return false, nil
	case "Sequence":
		var s struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return false, fmt.Errorf("parse %s: %s: %w", file, field, err)
		}
		bl := false
		for i, r := range s.Decoders {
			b, err := parseDecoder(file, fmt.Sprintf("%s.decoders[%d]", field, i), r)
			if err != nil {
				return false, err
			}
			bl = bl || b
		}
		return bl, nil
	}
	return false, unsupported(file, field+".type", fmt.Sprintf("decoder %q", typ))
}

// postPiece is one element of TemplateProcessing's "single" template.
type postPiece struct {
	special string // token content, or "" for the sequence itself
	id      int32
}

type postProcessor struct {
	single []postPiece // nil: sequence only
}

func parsePostProcessor(file, field string, raw json.RawMessage) (postProcessor, error) {
	typ, err := typed(raw)
	if err != nil {
		return postProcessor{}, fmt.Errorf("parse %s: %s: %w", file, field, err)
	}
	switch typ {
	case "", "ByteLevel":
		return postProcessor{}, nil
	case "Sequence":
		var s struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return postProcessor{}, fmt.Errorf("parse %s: %s: %w", file, field, err)
		}
		var pp postProcessor
		for i, r := range s.Processors {
			p, err := parsePostProcessor(file, fmt.Sprintf("%s.processors[%d]", field, i), r)
			if err != nil {
				return pp, err
			}
			if p.single != nil {
				pp = p
			}
		}
		return pp, nil
	case "TemplateProcessing":
		var s struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return postProcessor{}, fmt.Errorf("parse %s: %s: %w", file, field, err)
		}
		var pp postProcessor
		for _, e := range s.Single {
			switch {
			case e.SpecialToken != nil:
				pp.single = append(pp.single, postPiece{special: e.SpecialToken.ID})
			case e.Sequence != nil:
				pp.single = append(pp.single, postPiece{})
			}
		}
		return pp, nil
	}
	return postProcessor{}, unsupported(file, field+".type", fmt.Sprintf("post-processor %q", typ))
}

// isWordRune is what single_word added tokens treat as a word character.
func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

package tokenizer

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Tokenizer is a loaded tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	model           *bpe
	normalizer      normalizer
	preTok          []preTokenizer
	post            postProcessor
	byteLevelDecode bool
	added           *addedVocab
	segs            segCache

	// idText is what each token id decodes to, its raw bytes held as a
	// string (possibly not UTF-8: a byte-fallback or byte-level piece of a
	// character); idWhole marks the ids whose bytes are complete UTF-8 on
	// their own, so the incremental detokenizer hands out idText[id]
	// itself, with no allocation, when nothing is pending (stream.go).
	idText    []string
	idWhole   []bool
	idToken   []string // token id -> token string as in the vocabulary
	isSpecial []bool   // added token with special=true

	// From tokenizer_config.json.
	BOSToken, EOSToken, PadToken, UnkToken string
	AddBOS, AddEOS                         bool
	// ModelVocabSize is config.json's vocab_size (0 when absent); it may
	// exceed VocabSize() when the embedding is padded.
	ModelVocabSize int

	eos []int32

	// pieceOff says why the cache may not cut this tokenizer's input at
	// added tokens (its normalizer or pre-tokenizer may act across them,
	// cache.go); "" when it may.
	pieceOff string

	chatTemplate       *jinja.Template
	chatTemplateText   string // its source, for ChatTemplateUses
	ChatTemplateSource string // where the template came from, for logs
}

// VocabSize is one more than the highest token id.
func (t *Tokenizer) VocabSize() int { return len(t.idToken) }

// EOS returns the end-of-sequence ids: config.json and
// generation_config.json eos_token_id (int or list) plus
// tokenizer_config.json's eos_token, in that order, without duplicates.
func (t *Tokenizer) EOS() []int32 { return append([]int32(nil), t.eos...) }

// TokenToID looks a token string up (added tokens included).
func (t *Tokenizer) TokenToID(tok string) (int32, bool) {
	if id, ok := t.added.byContent[tok]; ok {
		return id, true
	}
	id, ok := t.model.vocab[tok]
	return id, ok
}

// IDToToken returns the vocabulary string of id ("" when out of range).
func (t *Tokenizer) IDToToken(id int32) string {
	if id < 0 || int(id) >= len(t.idToken) {
		return ""
	}
	return t.idToken[id]
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.isSpecial) && t.isSpecial[id]
}

func (t *Tokenizer) buildIDTable(added []AddedToken) {
	n := 0
	for _, id := range t.model.vocab {
		n = max(n, int(id)+1)
	}
	for _, a := range added {
		n = max(n, int(a.ID)+1)
	}
	t.idToken = make([]string, n)
	t.idText = make([]string, n)
	t.idWhole = make([]bool, n)
	t.isSpecial = make([]bool, n)
	for tok, id := range t.model.vocab {
		t.idToken[id] = tok
		t.idText[id] = string(t.tokenBytes(tok))
	}
	for _, a := range added {
		t.idToken[a.ID] = a.Content
		t.idText[a.ID] = a.Content
		t.isSpecial[a.ID] = a.Special
	}
	for id, s := range t.idText {
		t.idWhole[id] = utf8.ValidString(s)
	}
}

// tokenBytes is what one vocabulary token decodes to.
func (t *Tokenizer) tokenBytes(tok string) []byte {
	if len(tok) == 6 && strings.HasPrefix(tok, "<0x") && tok[5] == '>' && t.model.byteFallback {
		var b byte
		if _, err := fmt.Sscanf(tok, "<0x%02X>", &b); err == nil {
			return []byte{b}
		}
	}
	if t.byteLevelDecode {
		return byteLevelDecode(nil, tok)
	}
	return []byte(tok)
}

// Encode tokenizes text. addSpecial applies the post-processor (e.g. a
// Llama BOS); chat prompts are rendered with their special tokens already
// in the text and must be encoded with addSpecial=false.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int32, error) {
	ids := make([]int32, 0, len(text)/3+4)
	if addSpecial {
		for _, p := range t.post.single {
			if p.special != "" {
				ids = append(ids, p.id)
			} else {
				break
			}
		}
	}
	ids, err := t.appendBody(ids, text)
	if err != nil {
		return nil, err
	}
	if addSpecial {
		seen := false
		for _, p := range t.post.single {
			if p.special == "" {
				seen = true
			} else if seen {
				ids = append(ids, p.id)
			}
		}
	}
	return ids, nil
}

// appendBody appends the ids of text without the post-processor's
// tokens: the added-token split, then each plain segment on its own.
// That it is a fold over segments is what the cache's L1 relies on
// (cache.go): cutting text after a raw added token cuts its ids there.
func (t *Tokenizer) appendBody(ids []int32, text string) ([]int32, error) {
	for _, seg := range t.added.split(text, t.normalizer) {
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		var err error
		if ids, err = t.encodeSegment(ids, seg); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// encodeSegment encodes text between added tokens. Pre-tokenization never
// crosses an added token, so long segments (system prompts, tool schemas:
// the parts agentic traffic repeats) are cached whole, exactly.
func (t *Tokenizer) encodeSegment(ids []int32, seg segment) ([]int32, error) {
	cacheable := len(seg.text) >= minCachedSegment && len(seg.text) <= maxCachedSegment
	if cacheable {
		if hit, ok := t.segs.get(seg.text, seg.normalized); ok {
			return append(ids, hit...), nil
		}
	}
	start := len(ids)
	s := seg.text
	if t.normalizer != nil && !seg.normalized {
		s = t.normalizer(s)
	}
	words := []string{s}
	for _, st := range t.preTok {
		var err error
		if words, err = st(words); err != nil {
			return nil, fmt.Errorf("pre-tokenize: %w", err)
		}
	}
	for _, w := range words {
		ids = t.model.word(w, ids)
	}
	if cacheable {
		t.segs.put(seg.text, seg.normalized, ids[start:])
	}
	return ids, nil
}

const (
	minCachedSegment = 512
	maxCachedSegment = 1 << 20
	segCacheBytes    = 64 << 20
)

// segCache maps segment text to ids, bounded by total text bytes.
type segCache struct {
	mu    sync.Mutex
	m     map[segKey][]int32
	bytes int
}

type segKey struct {
	text       string
	normalized bool
}

func (c *segCache) get(text string, normalized bool) ([]int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids, ok := c.m[segKey{text, normalized}]
	return ids, ok
}

func (c *segCache) put(text string, normalized bool, ids []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.bytes+len(text)+4*len(ids) > segCacheBytes {
		// Start over rather than track recency: bounded, and the hot
		// segments come back on the next request.
		c.m, c.bytes = map[segKey][]int32{}, 0
	}
	k := segKey{text, normalized}
	if _, dup := c.m[k]; !dup {
		c.m[k] = append([]int32(nil), ids...)
		c.bytes += len(text) + 4*len(ids)
	}
}

// DecodeBytes returns the raw bytes ids decode to; skipSpecial drops
// added tokens marked special. Out-of-range ids decode to nothing.
func (t *Tokenizer) DecodeBytes(dst []byte, ids []int32, skipSpecial bool) []byte {
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.idText) || (skipSpecial && t.isSpecial[id]) {
			continue
		}
		dst = append(dst, t.idText[id]...)
	}
	return dst
}

// Decode turns ids into text; invalid UTF-8 becomes U+FFFD per maximal
// invalid subsequence, as Rust's from_utf8_lossy (and so HF) does.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	return lossyString(t.DecodeBytes(nil, ids, skipSpecial))
}

// lossyString converts bytes to a string, replacing each maximal invalid
// subsequence with one U+FFFD (Unicode §3.9 "substitution of maximal
// subparts"); Go's own conversions replace per byte instead.
func lossyString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += maximalSubpart(b[i:])
	}
	return sb.String()
}

// maximalSubpart is the length of the invalid sequence at the start of b:
// a lead byte plus the continuation bytes that could still have completed it.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		n++
		lo, hi = 0x80, 0xBF
	}
	return n
}

// incompleteTail is the length of a trailing, still-completable UTF-8
// prefix in b (0 when b ends on a boundary or with garbage).
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return 0
		}
		if c >= 0xC0 { // a lead byte: is it waiting for more?
			tail := b[len(b)-k:]
			if maximalSubpart(tail) == k && k < utf8Len(c) {
				return k
			}
			return 0
		}
	}
	return 0
}

func utf8Len(c byte) int {
	switch {
	case c >= 0xF0:
		return 4
	case c >= 0xE0:
		return 3
	case c >= 0xC0:
		return 2
	}
	return 1
}

// segment is a piece of input: an added token (id >= 0) or text to
// pre-tokenize.
type segment struct {
	text       string
	id         int32
	normalized bool // text already went through the normalizer
}

type addedVocab struct {
	byContent map[string]int32
	raw       *trie // tokens with normalized=false: matched on raw text
	norm      *trie // normalized=true: matched after normalization
	rawTokens []*AddedToken
}

// trieNode's children are found by IndexByte over keys: most nodes have
// one child, and a map per byte was most of the cost of scanning a chat
// for its added tokens.
type trieNode struct {
	keys []byte
	kids []*trieNode
	tok  *AddedToken
}

func (n *trieNode) child(c byte) *trieNode {
	if i := bytes.IndexByte(n.keys, c); i >= 0 {
		return n.kids[i]
	}
	return nil
}

type trie struct {
	root  trieNode
	first [256]bool // bytes that can start a token: a cheap skip
}

func (tr *trie) add(a *AddedToken) {
	tr.first[a.Content[0]] = true
	n := &tr.root
	for i := 0; i < len(a.Content); i++ {
		c := n.child(a.Content[i])
		if c == nil {
			c = &trieNode{}
			n.keys = append(n.keys, a.Content[i])
			n.kids = append(n.kids, c)
		}
		n = c
	}
	n.tok = a
}

// longestAt returns the longest token that matches s at i.
func (tr *trie) longestAt(s string, i int) *AddedToken {
	if !tr.first[s[i]] {
		return nil
	}
	n := &tr.root
	var best *AddedToken
	for j := i; j < len(s); j++ {
		n = n.child(s[j])
		if n == nil {
			break
		}
		if n.tok != nil {
			best = n.tok
		}
	}
	return best
}

func newAddedVocab(tokens []AddedToken) *addedVocab {
	v := &addedVocab{byContent: map[string]int32{}}
	for i := range tokens {
		a := &tokens[i]
		if a.Content == "" {
			continue
		}
		v.byContent[a.Content] = a.ID
		// As HF: tokens flagged normalized match the normalized text,
		// the rest match the raw input.
		if a.Normalized {
			if v.norm == nil {
				v.norm = &trie{}
			}
			v.norm.add(a)
		} else {
			if v.raw == nil {
				v.raw = &trie{}
			}
			v.raw.add(a)
			v.rawTokens = append(v.rawTokens, a)
		}
	}
	return v
}

// split cuts text at added tokens, leftmost-longest, honouring
// lstrip/rstrip (the token swallows adjacent whitespace) and single_word.
func (v *addedVocab) split(text string, nz normalizer) []segment {
	segs := splitTrie(v.raw, text, false)
	if v.norm == nil {
		return segs
	}
	var out []segment
	for _, s := range segs {
		if s.id >= 0 {
			out = append(out, s)
			continue
		}
		n := s.text
		if nz != nil {
			n = nz(n)
		}
		out = append(out, splitTrie(v.norm, n, true)...)
	}
	return out
}

func splitTrie(tr *trie, text string, normalized bool) []segment {
	if tr == nil {
		return []segment{{text: text, id: -1, normalized: normalized}}
	}
	var out []segment
	start := 0 // start of pending plain text
	for {
		a, mStart, mEnd := tr.next(text, start, start)
		if a == nil {
			break
		}
		if mStart > start {
			out = append(out, segment{text: text[start:mStart], id: -1, normalized: normalized})
		}
		out = append(out, segment{id: a.ID})
		start = mEnd
	}
	if start < len(text) {
		out = append(out, segment{text: text[start:], id: -1, normalized: normalized})
	}
	return out
}

// next finds the first added token matched at or after i,
// leftmost-longest, honouring single_word and lstrip/rstrip (the match
// [mStart, mEnd) swallows adjacent whitespace, but lstrip never reaches
// back before start, where the pending plain text begins). nil: none.
// splitTrie and the cache's piece cuts (cache.go) both scan with it, so
// they agree on where every added token is.
func (tr *trie) next(text string, start, i int) (a *AddedToken, mStart, mEnd int) {
	for i < len(text) {
		if !tr.first[text[i]] {
			// A token's first byte is never a UTF-8 continuation byte, so
			// stepping bytes here lands on the same rune starts stepping
			// runes would.
			i++
			continue
		}
		a = tr.longestAt(text, i)
		if a == nil || (a.SingleWord && !singleWordOK(text, i, i+len(a.Content))) {
			_, n := utf8.DecodeRuneInString(text[i:])
			i += n
			continue
		}
		mStart, mEnd = i, i+len(a.Content)
		if a.LStrip {
			for mStart > start {
				r, n := utf8.DecodeLastRuneInString(text[start:mStart])
				if !unicode.IsSpace(r) {
					break
				}
				mStart -= n
			}
		}
		if a.RStrip {
			for mEnd < len(text) {
				r, n := utf8.DecodeRuneInString(text[mEnd:])
				if !unicode.IsSpace(r) {
					break
				}
				mEnd += n
			}
		}
		return a, mStart, mEnd
	}
	return nil, 0, 0
}

func singleWordOK(s string, from, to int) bool {
	if from > 0 {
		r, _ := utf8.DecodeLastRuneInString(s[:from])
		if isWordRune(r) {
			return false
		}
	}
	if to < len(s) {
		r, _ := utf8.DecodeRuneInString(s[to:])
		if isWordRune(r) {
			return false
		}
	}
	return true
}

package tokenizer

import (
	"container/list"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// The prompt cache in front of Encode (the idea is SMG's two-level
// tokenizer cache; the code and the cut rule are ours):
//
//   - L0: the whole text, exactly. A repeated prompt costs one map
//     lookup and one copy.
//   - L1: pieces of the text cut right after raw added tokens
//     (<|im_start|>, <|im_end|>, <|eot_id|>: what a rendered chat template
//     is stitched from). Encode is a fold over the segments between added
//     tokens (appendBody), so the ids of text are the ids of its pieces
//     end to end. A piece is cut only once it holds minPiece bytes, left
//     to right, so the cuts of a text's beginning depend on that beginning
//     alone: a shared system prompt, or the history a conversation's next
//     turn repeats, is cut the same way every time and found again.
//
// Both levels are one table: every entry maps a text to the ids Encode
// gives it (without the post-processor's tokens, which are added around
// the result), so an entry stored as a whole prompt serves as a piece of
// a later one and the other way round. Memory is bounded by a byte budget
// over what entries hold (key bytes, 4 bytes per id, a fixed overhead),
// least recently used first out.
//
// In front of both sits our own addition, the render level: a chat's
// inputs (its messages as the client sent them and every field that
// changes the template's output, keyed by the front end: RenderKey) →
// the rendered prompt and its ids. A repeated chat then skips decoding
// its messages into template values and rendering the template as well
// as the tokenizer, which cost far more than encoding a short prompt.
// Render entries live in the same LRU list and byte budget as the
// others (their cost counts the rendered text too), in a map of their
// own so no prompt text can be mistaken for a render key. An entry
// remembers the template it was rendered with and is a miss under
// another one (SetChatTemplate); a template that reads the clock
// (strftime_now) is never cached at this level, as its output is not a
// function of the inputs alone.
//
// Results are copies: the caller owns the slice it gets and may change
// it (TestCacheResultIsCallers); the stored ids are never handed out.

// minPiece is the fewest bytes an L1 piece holds: shorter runs between
// added tokens ("\n<|im_start|>", "user\n") merge into the next piece, as
// encoding them costs less than keeping an entry for them.
const minPiece = 128

// entryOverhead is what an entry costs beyond its key and ids: the map
// slot, the entry and its list links (an estimate, on the safe side).
const entryOverhead = 96

// Cache is a bounded prompt cache for one Tokenizer. It is safe for
// concurrent use; a Cache with no budget passes every call to Encode.
type Cache struct {
	tok      *Tokenizer
	max      int64
	l1       bool
	l1Off    string  // why L1 is off, "" when on (or the cache is off)
	pre, suf []int32 // the post-processor's tokens around the sequence

	mu    sync.Mutex
	m     map[string]*cacheEntry
	rm    map[string]*cacheEntry // render entries
	lru   *list.List             // of *cacheEntry, most recently used first
	bytes int64

	l0Hits, l1Hits, misses atomic.Uint64
	renderHits             atomic.Uint64
	bytesNow               atomic.Int64
}

type cacheEntry struct {
	key string
	ids []int32       // never changed once stored
	el  *list.Element // its place in Cache.lru; nil while not listed
	// A render entry's prompt text and the template that rendered it;
	// tmpl is nil for a text entry.
	text string
	tmpl *jinja.Template
}

func (e *cacheEntry) cost() int64 {
	return int64(len(e.key)+len(e.text)+4*len(e.ids)) + entryOverhead
}

// NewCache puts a cache of maxBytes in front of t's Encode; maxBytes <= 0
// gives a cache that caches nothing.
func NewCache(t *Tokenizer, maxBytes int64) *Cache {
	c := &Cache{tok: t, max: max(maxBytes, 0)}
	seen := false
	for _, p := range t.post.single {
		switch {
		case p.special == "":
			seen = true
		case seen:
			c.suf = append(c.suf, p.id)
		default:
			c.pre = append(c.pre, p.id)
		}
	}
	if c.max == 0 {
		return c
	}
	c.m = map[string]*cacheEntry{}
	c.rm = map[string]*cacheEntry{}
	c.lru = list.New()
	c.l1Off = t.pieceOff
	if c.l1Off == "" {
		c.l1Off = addedTokensCrossPieces(t.added.rawTokens)
	}
	c.l1 = c.l1Off == ""
	return c
}

// CacheStats is a cache's account since it was made.
type CacheStats struct {
	Enabled bool
	// L0Hits: whole prompts found (RenderHits of them as a whole chat,
	// its template render skipped too); L1Hits: prompts not found whole
	// of which at least one piece was; Misses: neither.
	L0Hits, L1Hits, Misses uint64
	RenderHits             uint64
	Bytes, MaxBytes        int64
	// L1Off says why L1 is off for this tokenizer ("" when it is on).
	L1Off string
}

// HitRate is the share of lookups that found something (L0 or L1); 0
// before the first.
func (s CacheStats) HitRate() float64 {
	n := s.L0Hits + s.L1Hits + s.Misses
	if n == 0 {
		return 0
	}
	return float64(s.L0Hits+s.L1Hits) / float64(n)
}

// Stats reads the counters; safe at any time.
func (c *Cache) Stats() CacheStats {
	return CacheStats{Enabled: c.max > 0, L0Hits: c.l0Hits.Load(), L1Hits: c.l1Hits.Load(), Misses: c.misses.Load(),
		RenderHits: c.renderHits.Load(), Bytes: c.bytesNow.Load(), MaxBytes: c.max, L1Off: c.l1Off}
}

// Tokenizer is the tokenizer the cache is in front of.
func (c *Cache) Tokenizer() *Tokenizer { return c.tok }

// Encode is Tokenizer.Encode through the cache: the same ids, always a
// slice the caller owns.
func (c *Cache) Encode(text string, addSpecial bool) ([]int32, error) {
	if c.max == 0 {
		return c.tok.Encode(text, addSpecial)
	}
	if ids, ok := c.get(text); ok {
		c.l0Hits.Add(1)
		out := make([]int32, 0, len(c.pre)+len(ids)+len(c.suf))
		return c.wrap(out, ids, addSpecial), nil
	}
	out := make([]int32, 0, len(c.pre)+len(text)/3+4+len(c.suf))
	if addSpecial {
		out = append(out, c.pre...)
	}
	body := len(out)
	hit := false
	var err error
	for from := 0; from < len(text); {
		to := len(text)
		if c.l1 {
			to = c.tok.nextCut(text, from)
		}
		piece := text[from:to]
		if to-from < minPiece || (from == 0 && to == len(text)) {
			// Too short to keep, or the whole text, which L0 missed.
			if out, err = c.tok.appendBody(out, piece); err != nil {
				return nil, err
			}
		} else if ids, ok := c.get(piece); ok {
			out = append(out, ids...)
			hit = true
		} else {
			start := len(out)
			if out, err = c.tok.appendBody(out, piece); err != nil {
				return nil, err
			}
			c.put(piece, out[start:])
		}
		from = to
	}
	c.put(text, out[body:])
	if hit {
		c.l1Hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	if addSpecial {
		out = append(out, c.suf...)
	}
	return out, nil
}

// Rendered is the prompt text and ids (without special tokens around
// them, as Encode(text, false) gives) stored for the chat whose
// RenderKey is key under the tokenizer's current chat template; ok false
// when there are none. A hit counts as an L0 hit. The ids are the
// caller's.
func (c *Cache) Rendered(key string) (text string, ids []int32, ok bool) {
	if c.max == 0 {
		return "", nil, false
	}
	tmpl := c.tok.chatTemplate
	c.mu.Lock()
	e := c.rm[key]
	if e == nil || e.tmpl != tmpl {
		c.mu.Unlock()
		return "", nil, false
	}
	c.toFront(e)
	text, ids = e.text, append(make([]int32, 0, len(e.ids)), e.ids...)
	c.mu.Unlock()
	c.l0Hits.Add(1)
	c.renderHits.Add(1)
	return text, ids, true
}

// PutRendered stores text, the current chat template's rendering of the
// chat whose RenderKey is key, and ids, its Encode(text, false), for
// Rendered. Nothing is kept when the template's output may change
// between renders of the same inputs (it reads the clock).
func (c *Cache) PutRendered(key, text string, ids []int32) {
	tmpl := c.tok.chatTemplate
	if c.max == 0 || tmpl == nil || strings.Contains(c.tok.chatTemplateText, "strftime_now") {
		return
	}
	e := &cacheEntry{key: key, text: text, ids: ids, tmpl: tmpl}
	cost := e.cost()
	if cost > c.max/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.rm[key]; old != nil {
		c.unlink(old)
		c.bytes -= old.cost()
	}
	e.key, e.text, e.ids = strings.Clone(key), strings.Clone(text), append([]int32(nil), ids...)
	c.rm[e.key] = e
	c.toFront(e)
	c.bytes += cost
	c.evictLocked()
}

// RenderKey is the render level's key of a chat: every input that can
// change what the chat template renders, each length-prefixed so no two
// different inputs share a key. The front end passes its messages as the
// client sent them (a hit then stands for the checks they passed too),
// the tools the template sees, the template's kwargs, the
// add_generation_prompt switch and the model name.
func RenderKey(model string, messages, tools, kwargs []byte, addGenerationPrompt bool) string {
	var b strings.Builder
	b.Grow(len(model) + len(messages) + len(tools) + len(kwargs) + 24)
	for _, f := range [][]byte{[]byte(model), messages, tools, kwargs} {
		var n [binary.MaxVarintLen64]byte
		b.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		b.Write(f)
	}
	if addGenerationPrompt {
		b.WriteByte(1)
	} else {
		b.WriteByte(0)
	}
	return b.String()
}

func (c *Cache) wrap(out, ids []int32, addSpecial bool) []int32 {
	if addSpecial {
		out = append(out, c.pre...)
	}
	out = append(out, ids...)
	if addSpecial {
		out = append(out, c.suf...)
	}
	return out
}

// get returns the stored ids of key (not to be changed) and marks it used.
func (c *Cache) get(key string) ([]int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[key]
	if e == nil {
		return nil, false
	}
	c.toFront(e)
	return e.ids, true
}

// put stores a copy of ids under a copy of key (so the entry pins no
// caller's memory), evicting the least recently used entries beyond the
// budget. An entry over an eighth of the budget is not kept: one huge
// prompt must not flush everything else.
func (c *Cache) put(key string, ids []int32) {
	cost := int64(len(key)+4*len(ids)) + entryOverhead
	if cost > c.max/8 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[key]; e != nil {
		c.toFront(e)
		return
	}
	e := &cacheEntry{key: strings.Clone(key), ids: append([]int32(nil), ids...)}
	c.m[e.key] = e
	c.toFront(e)
	c.bytes += cost
	c.evictLocked()
}

// evictLocked drops the least recently used entries beyond the budget.
func (c *Cache) evictLocked() {
	for c.bytes > c.max && c.lru.Len() > 0 {
		old := c.lru.Back().Value.(*cacheEntry)
		c.unlink(old)
		if old.tmpl != nil {
			delete(c.rm, old.key)
		} else {
			delete(c.m, old.key)
		}
		c.bytes -= old.cost()
	}
	c.bytesNow.Store(c.bytes)
}

// toFront lists e as the most recently used.
func (c *Cache) toFront(e *cacheEntry) {
	if e.el == nil {
		e.el = c.lru.PushFront(e)
		return
	}
	c.lru.MoveToFront(e.el)
}

// unlink takes e off the list.
func (c *Cache) unlink(e *cacheEntry) {
	if e.el != nil {
		c.lru.Remove(e.el)
		e.el = nil
	}
}

// nextCut is where the L1 piece that starts at from ends: right after the
// first raw added token (its rstrip whitespace included) that leaves the
// piece minPiece bytes or more, else the end of text. from is always 0 or
// a cut, so the scan starts where splitTrie's would.
func (t *Tokenizer) nextCut(text string, from int) int {
	tr := t.added.raw
	if tr == nil {
		return len(text)
	}
	for start := from; ; {
		a, _, mEnd := tr.next(text, start, start)
		if a == nil || mEnd >= len(text) {
			return len(text)
		}
		if mEnd-from >= minPiece {
			return mEnd
		}
		start = mEnd
	}
}

// pipelineCrossesPieces says why a tokenizer.json's normalizer or
// pre-tokenizer might make the ids of one piece between added tokens
// depend on another ("" when neither can). Hugging Face tokenizers, and
// appendBody, normalize and pre-tokenize each piece between raw added
// tokens on its own; a stage is trusted only when it is known to act on
// that piece alone, whatever precedes it. Metaspace with
// prepend_scheme "first" is the known exception: it marks the input's
// first piece only.
func pipelineCrossesPieces(normalizer, preTokenizer json.RawMessage) string {
	if why := stageCrosses("normalizer", normalizer, map[string]bool{
		"NFC": true, "NFD": true, "NFKC": true, "NFKD": true, "Lowercase": true,
		"Replace": true, "Strip": true, "StripAccents": true, "Prepend": true,
	}, "normalizers"); why != "" {
		return why
	}
	return stageCrosses("pre_tokenizer", preTokenizer, map[string]bool{
		"ByteLevel": true, // add_prefix_space marks every piece alike
		"Split":     true, "Digits": true, "Whitespace": true, "WhitespaceSplit": true,
		"Punctuation": true, "BertPreTokenizer": true, "UnicodeScripts": true,
	}, "pretokenizers")
}

func stageCrosses(field string, raw json.RawMessage, piecewise map[string]bool, listKey string) string {
	typ, err := typed(raw)
	if err != nil {
		return fmt.Sprintf("%s: unreadable (%v)", field, err)
	}
	switch {
	case typ == "":
		return ""
	case typ == "Sequence":
		var s map[string]json.RawMessage
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Sprintf("%s: unreadable (%v)", field, err)
		}
		if err := json.Unmarshal(s[listKey], &list); err != nil && len(s[listKey]) > 0 {
			return fmt.Sprintf("%s.%s: unreadable (%v)", field, listKey, err)
		}
		for i, r := range list {
			if why := stageCrosses(fmt.Sprintf("%s.%s[%d]", field, listKey, i), r, piecewise, listKey); why != "" {
				return why
			}
		}
		return ""
	case typ == "Metaspace":
		var m struct {
			PrependScheme *string `json:"prepend_scheme"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Sprintf("%s: unreadable (%v)", field, err)
		}
		if m.PrependScheme != nil && *m.PrependScheme == "first" {
			return field + `: Metaspace with prepend_scheme "first" marks only the input's first piece`
		}
		return ""
	case piecewise[typ]:
		return ""
	}
	return fmt.Sprintf("%s: %s is not known to act on each piece between added tokens alone", field, typ)
}

// addedTokensCrossPieces says why the raw added tokens might make the
// split of a text's beginning depend on what follows it ("" when they
// cannot). nextCut cuts right after a token; the split before that point
// must come out the same whatever text comes after, and a piece encoded
// alone the same as inside the whole. That fails when
//   - a token is single_word: whether it matches looks at the character
//     before it, which may lie in the previous piece;
//   - a token strips whitespace to its right and another token starts
//     with whitespace: the strip could run into and past the cut;
//   - a token holds another one after its first byte: a match of the
//     longer one could straddle the shorter one's cut.
func addedTokensCrossPieces(tokens []*AddedToken) string {
	rstrip := ""
	for _, a := range tokens {
		if a.SingleWord {
			return fmt.Sprintf("added token %q is single_word", a.Content)
		}
		if a.RStrip {
			rstrip = a.Content
		}
	}
	for _, a := range tokens {
		if r, _ := utf8.DecodeRuneInString(a.Content); rstrip != "" && unicode.IsSpace(r) {
			return fmt.Sprintf("added token %q strips whitespace to its right and %q starts with whitespace", rstrip, a.Content)
		}
	}
	for _, outer := range tokens {
		if len(outer.Content) < 2 {
			continue
		}
		for _, inner := range tokens {
			if inner != outer && len(inner.Content) < len(outer.Content) && strings.Contains(outer.Content[1:], inner.Content) {
				return fmt.Sprintf("added token %q holds %q after its start", outer.Content, inner.Content)
			}
		}
	}
	return ""
}

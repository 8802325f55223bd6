package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// system is a system prompt long enough to be an L1 piece of its own.
var system = "<|im_start|>system\nYou are a careful assistant. Answer briefly, cite the files you read, and never invent an API. " +
	strings.Repeat("Tools: read_file(path), grep(pattern), run(cmd). ", 4) + "<|im_end|>\n"

func chat(turns ...string) string {
	var sb strings.Builder
	sb.WriteString(system)
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		sb.WriteString("<|im_start|>" + role + "\n" + t + "<|im_end|>\n")
	}
	sb.WriteString("<|im_start|>assistant\n")
	return sb.String()
}

// render is a conversation after a long system prompt, through tk's own
// chat template (its special tokens are what L1 cuts at), or ChatML when
// it has none.
func render(t *testing.T, tk *Tokenizer, turns ...string) string {
	t.Helper()
	if tk.chatTemplate == nil {
		return chat(turns...)
	}
	msgs := []map[string]string{{"role": "system", "content": strings.TrimSuffix(strings.TrimPrefix(system, "<|im_start|>system\n"), "<|im_end|>\n")}}
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": c})
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tk.ApplyChatTemplate(ChatInput{Messages: raw, AddGenerationPrompt: true})
	if err != nil {
		t.Fatalf("render %v: %v", turns, err)
	}
	return out
}

// parityStrings are every string of the tokenizer parity data: the id
// refs' texts and the rendered chat templates.
func parityStrings(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	var refs idRefs
	readRefs(t, "tokenizer_ids_"+name+".json", &refs)
	for _, c := range refs.Cases {
		if c.Error == "" {
			out = append(out, c.Text)
		}
	}
	if data, err := os.ReadFile(filepath.Join("testdata", "refs", "template_"+name+".json")); err == nil {
		var tr templateRefs
		if err := json.Unmarshal(data, &tr); err != nil {
			t.Fatal(err)
		}
		for _, c := range tr.Cases {
			if c.Text != nil {
				out = append(out, *c.Text)
			}
		}
	}
	return out
}

// checkThroughCache encodes every string through caches in every state
// and wants the ids Encode gives, byte for byte: cold (a fresh cache),
// warm (the same string again: L0), and behind a warm shared prefix
// (a chat whose system prompt and earlier turns the cache already holds,
// then the string as the newest turn: L1), with and without the
// post-processor's tokens.
func checkThroughCache(t *testing.T, tk *Tokenizer, strs []string) (hits CacheStats) {
	t.Helper()
	shared := NewCache(tk, 64<<20)
	bad := 0
	check := func(what, s string, c *Cache, addSpecial bool) {
		want, werr := tk.Encode(s, addSpecial)
		got, gerr := c.Encode(s, addSpecial)
		if (werr != nil) != (gerr != nil) || !equalIDs(got, want) {
			bad++
			if bad <= 5 {
				t.Errorf("%s %q (addSpecial %v):\n got  %v (%v)\n want %v (%v)", what, s, addSpecial, got, gerr, want, werr)
			}
		}
	}
	for _, s := range strs {
		for _, add := range []bool{false, true} {
			cold := NewCache(tk, 64<<20)
			check("cold", s, cold, add)
			check("warm", s, cold, add)
			check("shared cold", s, shared, add)
			check("shared warm", s, shared, add)
		}
		q, a := "first question, long enough to make a piece of its own: "+strings.Repeat("why? ", 30), "an answer "+strings.Repeat("because. ", 30)
		check("warm prefix", render(t, tk, q, a), shared, false)
		check("behind warm prefix", render(t, tk, q, a, s), shared, false)
		check("after warm prefix", render(t, tk, s), shared, false)
	}
	if bad > 0 {
		t.Errorf("%d encodings through the cache differ", bad)
	}
	return shared.Stats()
}

// Pins: ids through the cache are Encode's, for every string of the
// parity data, on every real tokenizer, cold, warm and behind a warm
// shared prefix; and the shared prefix is found (L1 hits).
func TestCacheParity(t *testing.T) {
	for _, rt := range realTokenizers {
		t.Run(rt.name, func(t *testing.T) {
			tk := loadReal(t, rt.pkg)
			st := checkThroughCache(t, tk, parityStrings(t, rt.name))
			t.Logf("L1 off: %q; stats %+v", st.L1Off, st)
			if st.L1Off != "" {
				t.Errorf("L1 is off for %s: %s", rt.name, st.L1Off)
			}
			if rt.template && st.L1Hits == 0 {
				t.Errorf("no L1 hit on a shared rendered prefix: %+v", st)
			}
		})
	}
	t.Run("demo", func(t *testing.T) {
		var strs []string
		data, err := os.ReadFile(filepath.Join("testdata", "refs", "strings.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &strs); err != nil {
			t.Fatal(err)
		}
		if st := checkThroughCache(t, demo(t), strs); st.L1Hits == 0 {
			t.Errorf("no L1 hit on a shared prefix: %+v", st)
		}
	})
}

// Pins: with L1 off (a tokenizer whose pipeline may act across added
// tokens), the cache still answers exactly and only ever hits whole.
func TestCacheL1OffIsExact(t *testing.T) {
	tk := *demo(t)
	tk.pieceOff = `pre_tokenizer: Metaspace with prepend_scheme "first" marks only the input's first piece`
	c := NewCache(&tk, 1<<20)
	for _, s := range []string{chat("a"), chat("b"), chat("a")} {
		want, _ := tk.Encode(s, false)
		got, err := c.Encode(s, false)
		if err != nil || !equalIDs(got, want) {
			t.Fatalf("%q: got %v (%v) want %v", s, got, err, want)
		}
	}
	st := c.Stats()
	if st.L1Off == "" || st.L1Hits != 0 || st.L0Hits != 1 || st.Misses != 2 {
		t.Errorf("stats %+v: want L1 off, 0 L1 hits, 1 L0 hit, 2 misses", st)
	}
}

// Pins: the caller owns the ids the cache returns: changing them does
// not change what the next lookup of the same prompt (or of a prompt
// sharing its pieces) returns.
func TestCacheResultIsCallers(t *testing.T) {
	tk := demo(t)
	c := NewCache(tk, 1<<20)
	p := chat("hello there")
	want, _ := tk.Encode(p, false)
	for round := 0; round < 3; round++ {
		got, err := c.Encode(p, false)
		if err != nil || !equalIDs(got, want) {
			t.Fatalf("round %d: got %v (%v) want %v", round, got, err, want)
		}
		for i := range got {
			got[i] = -1
		}
	}
	q := chat("hello there", "hi", "more")
	want, _ = tk.Encode(q, false)
	if got, _ := c.Encode(q, false); !equalIDs(got, want) {
		t.Fatalf("after scribbling: got %v want %v", got, want)
	}
}

// Pins: which level answers: a new prompt misses, the same one again hits
// L0, a new prompt behind the same system prompt hits L1, and so does the
// next turn of a conversation.
func TestCacheLevels(t *testing.T) {
	tk := demo(t)
	c := NewCache(tk, 1<<20)
	long := strings.Repeat("tell me more about it ", 10)
	steps := []struct {
		prompt         string
		l0, l1, misses uint64
	}{
		{chat("what is tsd?"), 0, 0, 1},
		{chat("what is tsd?"), 1, 0, 1},
		{chat("something else"), 1, 1, 1},
		{chat(long), 1, 2, 1},
		{chat(long, long+"!"), 1, 3, 1},
		{chat(long, long+"!", "ok"), 1, 4, 1},
		{"no special tokens at all, " + long, 1, 4, 2},
	}
	for i, s := range steps {
		if _, err := c.Encode(s.prompt, false); err != nil {
			t.Fatal(err)
		}
		st := c.Stats()
		if st.L0Hits != s.l0 || st.L1Hits != s.l1 || st.Misses != s.misses {
			t.Errorf("step %d: l0 %d l1 %d misses %d, want %d %d %d", i, st.L0Hits, st.L1Hits, st.Misses, s.l0, s.l1, s.misses)
		}
	}
	if r := c.Stats().HitRate(); r < 0.7 || r > 0.72 {
		t.Errorf("hit rate %.3f, want 5/7", r)
	}
}

// Pins: the byte budget holds after every insert, the least recently used
// entry leaves first, an entry over an eighth of the budget is not kept,
// and a zero budget caches nothing.
func TestCacheBudget(t *testing.T) {
	tk := demo(t)
	const budget = 8 << 10
	c := NewCache(tk, budget)
	prompts := make([]string, 40)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("prompt %03d: %s", i, strings.Repeat("x y ", 20))
	}
	for _, p := range prompts {
		if _, err := c.Encode(p, false); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		var sum int64
		n := 0
		for el := c.lru.Front(); el != nil; el = el.Next() {
			sum += el.Value.(*cacheEntry).cost()
			n++
		}
		if sum != c.bytes || n != len(c.m) || c.bytes > budget || c.Stats().Bytes != c.bytes {
			t.Fatalf("accounting: list %d bytes %d entries, counted %d bytes %d entries, stats %d (budget %d)", sum, n, c.bytes, len(c.m), c.Stats().Bytes, budget)
		}
		c.mu.Unlock()
	}
	// The newest stayed, the oldest left.
	if _, ok := c.get(prompts[len(prompts)-1]); !ok {
		t.Error("newest prompt evicted")
	}
	if _, ok := c.get(prompts[0]); ok {
		t.Error("oldest prompt kept beyond the budget")
	}
	// A hit refreshes: touch the oldest kept prompt, then push one fewer
	// new prompts (all of one size) than the cache holds: the touched one
	// stays, the one after it leaves.
	n := len(c.m)
	o := len(prompts) - n
	if _, ok := c.get(prompts[o]); !ok {
		t.Fatalf("prompt %d should be the oldest kept of %d", o, n)
	}
	for i := 0; i < n-1; i++ {
		_, _ = c.Encode(fmt.Sprintf("prompt %03d: %s", 100+i, strings.Repeat("x y ", 20)), false)
	}
	_, okUsed := c.get(prompts[o])
	_, okNext := c.get(prompts[o+1])
	if !okUsed || okNext {
		t.Errorf("LRU order: prompt %d (used) kept %v, prompt %d (unused) kept %v", o, okUsed, o+1, okNext)
	}
	huge := strings.Repeat("big ", budget/8)
	_, _ = c.Encode(huge, false)
	if _, ok := c.get(huge); ok {
		t.Error("an entry over an eighth of the budget was kept")
	}
	off := NewCache(tk, 0)
	_, _ = off.Encode(prompts[0], false)
	_, _ = off.Encode(prompts[0], false)
	if st := off.Stats(); st.Enabled || st.L0Hits+st.L1Hits+st.Misses != 0 || st.Bytes != 0 {
		t.Errorf("zero budget: %+v", st)
	}
}

// Pins: many goroutines sharing one cache each get Encode's ids (run
// under -race).
func TestCacheConcurrent(t *testing.T) {
	tk := demo(t)
	c := NewCache(tk, 64<<10)
	var prompts []string
	for i := 0; i < 16; i++ {
		turns := []string{}
		for j := 0; j <= i%5; j++ {
			turns = append(turns, fmt.Sprintf("turn %d of %d %s", j, i%3, strings.Repeat("words ", 25)))
		}
		prompts = append(prompts, chat(turns...))
	}
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		want[i], _ = tk.Encode(p, true)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < 200; k++ {
				i := (g*7 + k) % len(prompts)
				got, err := c.Encode(prompts[i], true)
				if err != nil || !equalIDs(got, want[i]) {
					errs <- fmt.Sprintf("goroutine %d prompt %d: got %v (%v)", g, i, got, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Pins: L1 is off exactly for pipelines that may act across added tokens,
// read from tokenizer.json's normalizer and pre_tokenizer.
func TestPipelineCrossesPieces(t *testing.T) {
	for _, c := range []struct {
		name, norm, pre string
		off             bool
	}{
		{"none", ``, ``, false},
		{"qwen-like", `{"type":"NFC"}`, `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"x"},"behavior":"Isolated"},{"type":"ByteLevel","add_prefix_space":false}]}`, false},
		{"byte-level prefix space marks every piece", `null`, `{"type":"ByteLevel","add_prefix_space":true}`, false},
		{"empty normalizer sequence", `{"type":"Sequence","normalizers":[]}`, `{"type":"Digits"}`, false},
		{"metaspace always", ``, `{"type":"Metaspace","replacement":"▁","prepend_scheme":"always"}`, false},
		{"metaspace first", ``, `{"type":"Metaspace","replacement":"▁","prepend_scheme":"first"}`, true},
		{"metaspace first nested", ``, `{"type":"Sequence","pretokenizers":[{"type":"Digits"},{"type":"Metaspace","prepend_scheme":"first"}]}`, true},
		{"unknown normalizer", `{"type":"Precompiled"}`, ``, true},
		{"unknown pre-tokenizer", ``, `{"type":"FancyNew"}`, true},
		{"unreadable", `{"type":`, ``, true},
	} {
		why := pipelineCrossesPieces(json.RawMessage(c.norm), json.RawMessage(c.pre))
		if (why != "") != c.off {
			t.Errorf("%s: reason %q, want off=%v", c.name, why, c.off)
		}
	}
}

// Pins: L1 is off for added-token sets whose matches could straddle or
// reach across a cut.
func TestAddedTokensCrossPieces(t *testing.T) {
	tok := func(s string, mod func(*AddedToken)) *AddedToken {
		a := &AddedToken{Content: s, Special: true}
		if mod != nil {
			mod(a)
		}
		return a
	}
	for _, c := range []struct {
		name   string
		tokens []*AddedToken
		off    bool
	}{
		{"chatml", []*AddedToken{tok("<|im_start|>", nil), tok("<|im_end|>", nil), tok("<|endoftext|>", nil)}, false},
		{"llama numbering", []*AddedToken{tok("<|reserved_special_token_1|>", nil), tok("<|reserved_special_token_10|>", nil)}, false},
		{"single_word", []*AddedToken{tok("<mask>", func(a *AddedToken) { a.SingleWord = true })}, true},
		{"rstrip and a space-led token", []*AddedToken{tok("<s>", func(a *AddedToken) { a.RStrip = true }), tok(" <x>", nil)}, true},
		{"rstrip alone", []*AddedToken{tok("<s>", func(a *AddedToken) { a.RStrip = true }), tok("<x>", nil)}, false},
		{"one token inside another", []*AddedToken{tok("<a>", nil), tok("[<a>]", nil)}, true},
		{"one token starting another", []*AddedToken{tok("<a>", nil), tok("<a>b", nil)}, false},
	} {
		why := addedTokensCrossPieces(c.tokens)
		if (why != "") != c.off {
			t.Errorf("%s: reason %q, want off=%v", c.name, why, c.off)
		}
	}
}

// Any text, special tokens included, encodes through the cache to
// Encode's ids, whatever the cache held before.
func FuzzCacheMatchesEncode(f *testing.F) {
	tk := fuzzDemo(f)
	c := NewCache(tk, 256<<10)
	for _, s := range []string{"", chat("hi"), chat(strings.Repeat("a b ", 40), "c"), "<|im_end|><|im_end|>", system + "x", "  <|im_start|>  \n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range []string{s, system + s, s + system, chat(s, s)} {
			want, werr := tk.Encode(p, false)
			got, gerr := c.Encode(p, false)
			if (werr != nil) != (gerr != nil) || !equalIDs(got, want) {
				t.Fatalf("%q:\n got  %v (%v)\n want %v (%v)", p, got, gerr, want, werr)
			}
		}
	})
}

package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

const demoDir = "testdata/demo"

func demo(t testing.TB) *Tokenizer {
	t.Helper()
	tk, err := Load(demoDir)
	if err != nil {
		t.Fatalf("load demo tokenizer: %v", err)
	}
	return tk
}

// The demo tokenizer has the vocabulary layout ts-fake and the demo profile rely on.
func TestDemoLayout(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	if tk.VocabSize() != 1003 || tk.ModelVocabSize != 1003 {
		t.Fatalf("vocab %d / config %d, want 1003", tk.VocabSize(), tk.ModelVocabSize)
	}
	if got := tk.EOS(); len(got) != 2 || got[0] != 1002 || got[1] != 1000 {
		t.Fatalf("EOS = %v, want [1002 1000]", got)
	}
	for id, s := range map[int32]string{1000: "<|endoftext|>", 1001: "<|im_start|>", 1002: "<|im_end|>"} {
		if tk.IDToToken(id) != s || !tk.IsSpecial(id) {
			t.Errorf("id %d = %q special=%v", id, tk.IDToToken(id), tk.IsSpecial(id))
		}
	}
	if !tk.HasChatTemplate() || tk.ChatTemplateSource != "tokenizer_config.json" {
		t.Errorf("chat template from %q", tk.ChatTemplateSource)
	}
	ids, _ := tk.Encode("The gateway renders the chat template.", false)
	if len(ids) > 12 {
		t.Errorf("common corpus text took %d tokens (%v): merges not applied?", len(ids), ids)
	}
	for _, id := range ids {
		if id >= 1000 {
			t.Errorf("plain text produced special id %d", id)
		}
	}
}

// Every id of the demo vocabulary has a token (the vocab is dense).
func TestDemoDense(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	for id := int32(0); id < int32(tk.VocabSize()); id++ {
		if tk.IDToToken(id) == "" {
			t.Fatalf("id %d has no token", id)
		}
	}
}

// Decode(Encode(s)) gives back NFC(s) for a spread of inputs.
func TestDemoRoundTrip(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	var strs []string
	data, err := os.ReadFile("testdata/refs/strings.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &strs); err != nil {
		t.Fatal(err)
	}
	for _, s := range strs {
		ids, err := tk.Encode(s, false)
		if err != nil {
			t.Fatalf("encode %q: %v", s, err)
		}
		if got := tk.Decode(ids, false); got != norm.NFC.String(s) {
			t.Errorf("round trip %q -> %v -> %q", s, ids, got)
		}
	}
}

// Special tokens are split out before BPE and hidden by skipSpecial.
func TestSpecialTokens(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	ids, _ := tk.Encode("<|im_start|>user\nHi<|im_end|>", false)
	if ids[0] != 1001 || ids[len(ids)-1] != 1002 {
		t.Fatalf("ids %v", ids)
	}
	if got := tk.Decode(ids, true); got != "user\nHi" {
		t.Errorf("skip special: %q", got)
	}
	if got := tk.Decode(ids, false); got != "<|im_start|>user\nHi<|im_end|>" {
		t.Errorf("keep special: %q", got)
	}
	if got := tk.Decode([]int32{-1, 5000}, false); got != "" {
		t.Errorf("out of range ids decode to %q", got)
	}
}

// lstrip/rstrip swallow neighbouring whitespace; single_word needs word boundaries.
func TestAddedTokenFlags(t *testing.T) {
	t.Parallel()
	v := newAddedVocab([]AddedToken{
		{ID: 1, Content: "<mask>", LStrip: true, RStrip: true},
		{ID: 2, Content: "cat", SingleWord: true},
		{ID: 3, Content: "<a>"},
		{ID: 4, Content: "<ab>"},
	})
	show := func(segs []segment) string {
		var b strings.Builder
		for _, s := range segs {
			if s.id >= 0 {
				b.WriteString("[" + string(rune('0'+s.id)) + "]")
			} else {
				b.WriteString("(" + s.text + ")")
			}
		}
		return b.String()
	}
	for in, want := range map[string]string{
		"x  <mask>  y":   "(x)[1](y)",
		"a cat sat":      "(a )[2]( sat)",
		"concatenate":    "(concatenate)",
		"<ab><a>":        "[4][3]",
		"caté cat":       "(caté )[2]",
		"plain":          "(plain)",
		"<mask>":         "[1]",
		"cat, <a>cat!":   "[2](, )[3][2](!)",
		"\t<mask>\nnext": "[1](next)",
	} {
		if got := show(v.split(in, nil)); got != want {
			t.Errorf("split(%q) = %s, want %s", in, got, want)
		}
	}
}

// Malformed UTF-8 becomes one U+FFFD per maximal invalid subpart, as Rust's from_utf8_lossy.
func TestLossyString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ok":                   "ok",
		"\xf0\x9f\x98":         "\ufffd",
		"\xf0\x9f\x98x":        "\ufffdx",
		"\xff\xfe":             "\ufffd\ufffd",
		"a\xe2\x82":            "a\ufffd",
		"\xed\xa0\x80":         "\ufffd\ufffd\ufffd", // surrogate: E0..9F only after ED
		"\xc3":                 "\ufffd",
		"\xe2\x82\xac\xe2\x82": "€\ufffd",
	} {
		if got := lossyString([]byte(in)); got != want {
			t.Errorf("lossy(%q) = %q, want %q", in, got, want)
		}
	}
}

// Streaming never emits broken UTF-8 and concatenates to the one-shot decode.
func TestDecodeStreamUTF8(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	text := "Emoji 😀👍 and 你好 and café, mixed 123."
	ids, _ := tk.Encode(text, false)
	ds := tk.NewDecodeStream(false)
	var b strings.Builder
	for _, id := range ids {
		s := ds.Step(id)
		if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
			t.Fatalf("step emitted %q", s)
		}
		b.WriteString(s)
	}
	b.WriteString(ds.Flush())
	if b.String() != text {
		t.Fatalf("stream %q, want %q", b.String(), text)
	}
	// Byte tokens one at a time: the 4-byte emoji appears only when complete.
	ds = tk.NewDecodeStream(false)
	e := []byte("😀")
	for i, c := range e {
		id, ok := tk.TokenToID(string(byteToRune[c]))
		if !ok {
			t.Fatal("byte token missing")
		}
		got := ds.Step(id)
		if i < 3 && got != "" {
			t.Fatalf("byte %d emitted %q early", i, got)
		}
		if i == 3 && got != "😀" {
			t.Fatalf("completed emoji gave %q", got)
		}
	}
	// A broken sequence followed by ASCII is replaced, not held forever.
	ds = tk.NewDecodeStream(false)
	f0, _ := tk.TokenToID(string(byteToRune[0xF0]))
	x, _ := tk.TokenToID("x")
	if got := ds.Step(f0); got != "" {
		t.Fatalf("lead byte emitted %q", got)
	}
	if got := ds.Step(x); got != "\ufffdx" {
		t.Fatalf("broken then x: %q", got)
	}
	if got := ds.Step(f0) + ds.Flush(); got != "\ufffd" {
		t.Fatalf("flush of dangling lead byte: %q", got)
	}
}

func feed(t *testing.T, tk *Tokenizer, sd *StopDecoder, ids []int32) (string, StopResult) {
	t.Helper()
	var b strings.Builder
	var last StopResult
	for _, id := range ids {
		r := sd.Step(id)
		b.WriteString(r.Text)
		if r.Stopped {
			return b.String(), r
		}
		last = r
	}
	b.WriteString(sd.Finish())
	return b.String(), last
}

// The jail never leaks the start of a stop string and cuts at the match.
func TestStopDecoderStrings(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	ids, _ := tk.Encode("Hello world. STOP here and more", false)
	sd := tk.NewStopDecoder(StopConfig{Strings: []string{"STOP", "never"}, SkipSpecial: true})
	var emitted strings.Builder
	var res StopResult
	for _, id := range ids {
		res = sd.Step(id)
		emitted.WriteString(res.Text)
		if strings.Contains(emitted.String(), "S") {
			t.Fatalf("leaked part of the stop string: %q", emitted.String())
		}
		if res.Stopped {
			break
		}
	}
	if !res.Stopped || res.Matched != "STOP" || emitted.String() != "Hello world. " {
		t.Fatalf("got %q %+v", emitted.String(), res)
	}
	if !sd.Done() || sd.Step(ids[0]).Text != "" {
		t.Fatal("decoder kept going after the stop")
	}

	// IncludeStop keeps the stop text.
	sd = tk.NewStopDecoder(StopConfig{Strings: []string{"STOP"}, IncludeStop: true})
	out, res := feed(t, tk, sd, ids)
	if out != "Hello world. STOP" || !res.Stopped {
		t.Fatalf("include stop: %q %+v", out, res)
	}

	// A held prefix that turns out not to be a stop is released at the end.
	ids2, _ := tk.Encode("ends with ST", false)
	sd = tk.NewStopDecoder(StopConfig{Strings: []string{"STOP"}})
	out, res = feed(t, tk, sd, ids2)
	if out != "ends with ST" || res.Stopped {
		t.Fatalf("release at finish: %q %+v", out, res)
	}
}

// EOS and stop token ids end the generation; their text is hidden.
func TestStopDecoderTokens(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	ids, _ := tk.Encode("Hi there", false)
	sd := tk.NewStopDecoder(StopConfig{SkipSpecial: true})
	out, res := feed(t, tk, sd, append(append([]int32{}, ids...), 1002, 5, 6))
	if out != "Hi there" || !res.Stopped || res.MatchedToken != 1002 || res.Matched != "" {
		t.Fatalf("eos: %q %+v", out, res)
	}
	sd = tk.NewStopDecoder(StopConfig{IgnoreEOS: true, SkipSpecial: true})
	out, res = feed(t, tk, sd, append(append([]int32{}, ids...), 1002))
	if out != "Hi there" || res.Stopped {
		t.Fatalf("ignore_eos: %q %+v", out, res)
	}
	dot, _ := tk.Encode(".", false)
	stopIDs, byID := tk.SplitStops([]string{".", "not one token at all"})
	if len(stopIDs) != 1 || stopIDs[0] != dot[0] || byID[dot[0]] != "." {
		t.Fatalf("SplitStops = %v %v", stopIDs, byID)
	}
	sd = tk.NewStopDecoder(StopConfig{TokenIDs: stopIDs, TokenStrings: byID, Strings: []string{"."}})
	seq, _ := tk.Encode("Hi. More", false)
	out, res = feed(t, tk, sd, seq)
	if out != "Hi" || res.Matched != "." {
		t.Fatalf("single-token stop: %q %+v", out, res)
	}
}

// Unsupported tokenizer.json content fails at load time naming the file and field.
func TestUnsupportedErrors(t *testing.T) {
	t.Parallel()
	base, err := os.ReadFile(filepath.Join(demoDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field, value, want string
	}{
		{"model", `{"type":"WordPiece","vocab":{}}`, `model.type: unsupported model "WordPiece"`},
		{"model", `{"type":"Unigram","vocab":[]}`, `model.type: unsupported model "Unigram"`},
		{"pre_tokenizer", `{"type":"Metaspace"}`, `pre_tokenizer.type: unsupported pre-tokenizer "Metaspace"`},
		{"pre_tokenizer", `{"type":"Sequence","pretokenizers":[{"type":"Whitespace"}]}`, `pre_tokenizer.pretokenizers[0].type`},
		{"normalizer", `{"type":"Precompiled"}`, `normalizer.type: unsupported normalizer "Precompiled"`},
		{"decoder", `{"type":"WordPiece"}`, `decoder.type: unsupported decoder`},
		{"post_processor", `{"type":"BertProcessing"}`, `post_processor.type`},
	} {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(base, &m)
		m[c.field] = json.RawMessage(c.value)
		data, _ := json.Marshal(m)
		dir := t.TempDir()
		_ = os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644)
		_, err := Load(dir)
		var fe *fieldError
		if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), "tokenizer.json: "+c.want) {
			t.Errorf("%s=%s: err %v, want it to mention %q", c.field, c.value, err, c.want)
		}
	}
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "tokenizer.model"), []byte("x"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.model is not supported") {
		t.Errorf("sentencepiece dir: %v", err)
	}
}

// Merges in "a b" string form load the same as [a, b] pairs; byte fallback and ignore_merges work.
func TestBPEVariants(t *testing.T) {
	t.Parallel()
	tj := `{"added_tokens":[],"normalizer":null,"pre_tokenizer":null,"decoder":{"type":"ByteFallback"},"post_processor":null,
	"model":{"type":"BPE","byte_fallback":true,"ignore_merges":%s,"unk_token":"<unk>",
	"vocab":{"<unk>":0,"a":1,"b":2,"ab":3,"abb":4,"<0xC3>":5,"<0xA9>":6,"bb":7},
	"merges":%s}}`
	for _, c := range []struct {
		ignore, merges, in string
		want               []int32
	}{
		{"false", `["a b","ab b"]`, "abb", []int32{4}},
		{"false", `[["a","b"],["ab","b"]]`, "abab", []int32{3, 3}},
		{"false", `[["b","b"],["a","b"]]`, "abb", []int32{1, 7}},
		{"true", `[["b","b"],["a","b"]]`, "abb", []int32{4}},
		{"false", `[]`, "é", []int32{5, 6}},
		{"false", `[]`, "z", []int32{0}},
	} {
		dir := t.TempDir()
		_ = os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(strings.Replace(strings.Replace(tj, "%s", c.ignore, 1), "%s", c.merges, 1)), 0o644)
		tk, err := Load(dir)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		got, _ := tk.Encode(c.in, false)
		if !equalIDs(got, c.want) {
			t.Errorf("%+v: got %v", c, got)
		}
	}
	// Byte fallback tokens decode to their byte.
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(strings.Replace(strings.Replace(tj, "%s", "false", 1), "%s", "[]", 1)), 0o644)
	tk, _ := Load(dir)
	if got := tk.Decode([]int32{5, 6, 1}, false); got != "éa" {
		t.Errorf("byte fallback decode %q", got)
	}
}

// Template resolution order (docs/protocol.md §11.3) and EOS merging across files.
func TestConfigResolution(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, _ := os.ReadFile(filepath.Join(demoDir, f))
		_ = os.WriteFile(filepath.Join(dir, f), data, 0o644)
	}
	render := func(opts LoadOptions) string {
		tk, err := LoadWith(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		s, err := tk.ApplyChatTemplate(ChatInput{Messages: json.RawMessage(`[{"role":"user","content":"x"}]`)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := render(LoadOptions{}); got != "<|im_start|>user\nx<|im_end|>\n" {
		t.Fatalf("tokenizer_config template: %q", got)
	}
	_ = os.WriteFile(filepath.Join(dir, "other.jinja"), []byte("other"), 0o644)
	if got := render(LoadOptions{}); got != "other" {
		t.Fatalf("*.jinja: %q", got)
	}
	_ = os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("jinja"), 0o644)
	if got := render(LoadOptions{}); got != "jinja" {
		t.Fatalf("chat_template.jinja: %q", got)
	}
	_ = os.WriteFile(filepath.Join(dir, "chat_template.json"), []byte(`{"chat_template":"json {{ messages[0].content }}"}`), 0o644)
	if got := render(LoadOptions{}); got != "json x" {
		t.Fatalf("chat_template.json: %q", got)
	}
	explicit := filepath.Join(t.TempDir(), "mine.jinja")
	_ = os.WriteFile(explicit, []byte("explicit"), 0o644)
	if got := render(LoadOptions{ChatTemplatePath: explicit}); got != "explicit" {
		t.Fatalf("explicit: %q", got)
	}

	model := t.TempDir()
	_ = os.WriteFile(filepath.Join(model, "config.json"), []byte(`{"eos_token_id": 7}`), 0o644)
	_ = os.WriteFile(filepath.Join(model, "generation_config.json"), []byte(`{"eos_token_id": [8, 7]}`), 0o644)
	tk, err := LoadWith(dir, LoadOptions{ModelDir: model})
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.EOS(); !equalIDs(got, []int32{7, 8, 1002}) {
		t.Fatalf("EOS %v", got)
	}
}

// Chat template inputs keep JSON key order, so tojson matches Python's.
func TestTemplateKeyOrder(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	if err := tk.SetChatTemplate(`{{ tools[0] | tojson }}|{{ messages[0].x }}|{{ flag }}`); err != nil {
		t.Fatal(err)
	}
	got, err := tk.ApplyChatTemplate(ChatInput{
		Messages: json.RawMessage(`[{"x": 12345678901234}]`),
		Tools:    json.RawMessage(`[{"zeta": 1, "alpha": {"b": 2.5, "a": null}, "mid": "é"}]`),
		Kwargs:   json.RawMessage(`{"flag": true}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"zeta": 1, "alpha": {"b": 2.5, "a": null}, "mid": "é"}|12345678901234|True`; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// Without a template the caller gets ErrNoChatTemplate.
func TestNoTemplate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, _ := os.ReadFile(filepath.Join(demoDir, "tokenizer.json"))
	_ = os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644)
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk.ApplyChatTemplate(ChatInput{Messages: json.RawMessage(`[]`)}); !errors.Is(err, ErrNoChatTemplate) {
		t.Fatalf("err %v", err)
	}
}

// The post-processor adds Llama's BOS only when asked.
func TestAddSpecialLlama(t *testing.T) {
	tk := loadReal(t, realTokenizers[1].pkg)
	with, _ := tk.Encode("Hello world", true)
	without, _ := tk.Encode("Hello world", false)
	if !equalIDs(with, []int32{128000, 9906, 1917}) || !equalIDs(without, []int32{9906, 1917}) {
		t.Fatalf("with %v without %v", with, without)
	}
	q := loadReal(t, realTokenizers[0].pkg)
	if ids, _ := q.Encode("Hello world", true); !equalIDs(ids, []int32{9707, 1879}) {
		t.Fatalf("qwen %v", ids)
	}
	if got := q.EOS(); !equalIDs(got, []int32{151645}) {
		t.Fatalf("qwen EOS from tokenizer_config: %v", got)
	}
}

// Split behaviours (and invert) cut pieces as HF's pre-tokenizer does.
func TestSplitBehaviours(t *testing.T) {
	t.Parallel()
	re, err := compileRegex("t", "f", "-")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		behavior string
		invert   bool
		want     string
	}{
		{"Isolated", false, "the|-|final|-|-|countdown"},
		{"Removed", false, "the|final|countdown"},
		{"MergedWithPrevious", false, "the-|final--|countdown"},
		{"MergedWithNext", false, "the|-final|--countdown"},
		{"Removed", true, "-|-|-"},
		{"Isolated", true, "the|-|final|-|-|countdown"},
	} {
		got, err := splitWith(regexSplitter{re}, c.behavior, c.invert)([]string{"the-final--countdown"})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, "|") != c.want {
			t.Errorf("%s invert=%v: %q, want %q", c.behavior, c.invert, strings.Join(got, "|"), c.want)
		}
	}
	got, _ := splitWith(regexSplitter{re}, "MergedWithPrevious", false)([]string{"-a", "-b"})
	if strings.Join(got, "|") != "-|a|-|b" {
		t.Errorf("merge crossed pieces: %q", got)
	}
}

// The heap merge (long words) picks exactly the merges the simple loop does.
func TestMergeHeapMatchesLoop(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	alphabet := []string{"a", "b", "e", "t", "h", " ", "n", "o", "s", "r", "d", "i"}
	x := uint64(42)
	for round := 0; round < 300; round++ {
		x = x*6364136223846793005 + 1442695040888963407
		n := 2 + int(x>>33)%400
		var syms []int32
		for i := 0; i < n; i++ {
			x = x*6364136223846793005 + 1442695040888963407
			id, _ := tk.TokenToID(byteLevelEncode(alphabet[int(x>>33)%len(alphabet)]))
			syms = append(syms, id)
		}
		want := tk.model.mergeLoop(append([]int32(nil), syms...))
		got := tk.model.mergeHeap(append([]int32(nil), syms...))
		if !equalIDs(got, want) {
			t.Fatalf("round %d: heap %v loop %v", round, got, want)
		}
	}
}

// Megabyte-long runs encode in linear-ish time and round-trip.
func TestLongRuns(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	for _, s := range []string{strings.Repeat(" ", 1<<20), strings.Repeat("a", 1<<18), strings.Repeat("\n", 1<<19) + "x", strings.Repeat("ab ", 1<<17)} {
		ids, err := tk.Encode(s, false)
		if err != nil {
			t.Fatalf("len %d: %v", len(s), err)
		}
		if tk.Decode(ids, false) != s {
			t.Fatalf("len %d: round trip failed", len(s))
		}
	}
}

// Digits and GPT-2 style ByteLevel (use_regex, add_prefix_space) pre-tokenizers.
func TestOtherPreTokenizers(t *testing.T) {
	t.Parallel()
	run := func(js, in string) string {
		stages, err := parsePreTokenizer("t", "pre_tokenizer", json.RawMessage(js))
		if err != nil {
			t.Fatal(err)
		}
		p := []string{in}
		for _, st := range stages {
			if p, err = st.fn(p); err != nil {
				t.Fatal(err)
			}
		}
		return strings.Join(p, "|")
	}
	if got := run(`{"type":"Digits","individual_digits":true}`, "ab12c٣"); got != "ab|1|2|c|٣" {
		t.Errorf("digits: %q", got)
	}
	if got := run(`{"type":"Digits","individual_digits":false}`, "ab12c"); got != "ab|12|c" {
		t.Errorf("digits grouped: %q", got)
	}
	if got := run(`{"type":"ByteLevel","add_prefix_space":true,"use_regex":true}`, "Hi you're 42!"); got != "ĠHi|Ġyou|'re|Ġ42|!" {
		t.Errorf("byte level: %q", got)
	}
}

// Long segments between special tokens are cached whole; hits give the same ids.
func TestSegmentCache(t *testing.T) {
	t.Parallel()
	tk := demo(t)
	system := strings.Repeat("You are a careful assistant. Tools: {\"name\": \"get_weather\"}\n", 40)
	prompt := "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
	first, _ := tk.Encode(prompt, false)
	if len(tk.segs.m) != 1 {
		t.Fatalf("segments cached: %d", len(tk.segs.m))
	}
	second, _ := tk.Encode(prompt, false)
	fresh, _ := demo(t).Encode(prompt, false)
	if !equalIDs(first, second) || !equalIDs(first, fresh) {
		t.Fatal("cached encoding differs")
	}
	// A hit must not alias: callers may modify what Encode returns.
	second[2] = -7
	third, _ := tk.Encode(prompt, false)
	if !equalIDs(first, third) {
		t.Fatal("cache entry was modified through a returned slice")
	}
}

// ChatTemplateUses finds a template variable as a whole word only.
func TestChatTemplateUses(t *testing.T) {
	tk := &Tokenizer{}
	if err := tk.SetChatTemplate(`{%- if enable_thinking is defined and not enable_thinking %}x{% endif %}{{ my_reasoning_effort2 }}`); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"enable_thinking": true, "reasoning_effort": false, "my_reasoning_effort2": true, "thinking": false, "": false} {
		if got := tk.ChatTemplateUses(name); got != want {
			t.Errorf("ChatTemplateUses(%q) = %v", name, got)
		}
	}
}

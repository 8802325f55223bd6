// Command gendemo trains the demo model's byte-level BPE tokenizer on
// corpus.txt (our own text) and writes tokenizer.json, tokenizer_config.json,
// config.json and generation_config.json, so the demo and the tests use a
// vocabulary that is ours and small enough to commit.
//
//	go run ./cmd/gendemo [-out gateway/tokenizer/testdata/demo]
package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dlclark/regexp2/v2"
)

//go:embed corpus.txt
var corpus string

// Layout: ids 0..255 single bytes, 256..NumMerged-1 merges, then the
// special tokens. ts-fake samples ids below NumMerged, so random output
// never contains a special token by accident.
const (
	NumMerged = 1000
	EndOfText = NumMerged     // <|endoftext|>
	ImStart   = NumMerged + 1 // <|im_start|>
	ImEnd     = NumMerged + 2 // <|im_end|>, the EOS
	VocabSize = NumMerged + 3
)

// splitPattern is the Qwen2-style pre-tokenizer regex.
const splitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

const chatTemplate = `{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- 'Tools you may call:' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>tool\n' + message.content + '<|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' }}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
{{- '\ncall ' + call.function.name + ' ' }}
{%- if call.function.arguments is string %}{{- call.function.arguments }}{%- else %}{{- call.function.arguments | tojson }}{%- endif %}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '(no thinking)\n' }}{%- endif %}
{%- endif %}`

func main() {
	out := flag.String("out", "gateway/tokenizer/testdata/demo", "output directory")
	flag.Parse()
	files, err := Build()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(*out, name), data, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("wrote %d files to %s (vocab %d, eos %d)\n", len(files), *out, VocabSize, ImEnd)
}

var byteToRune [256]rune

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
	}
}

// Build trains the tokenizer and returns the files by name.
func Build() (map[string][]byte, error) {
	re := regexp2.MustCompile(splitPattern, regexp2.None)
	locs, err := re.FindAllStringIndex(corpus, -1)
	if err != nil {
		return nil, fmt.Errorf("split corpus: %w", err)
	}
	counts := map[string]int{}
	for _, l := range locs {
		counts[corpus[l[0]:l[1]]]++
	}
	type word struct {
		syms []string
		n    int
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	words := make([]word, 0, len(keys))
	for _, k := range keys {
		var syms []string
		for i := 0; i < len(k); i++ {
			syms = append(syms, string(byteToRune[k[i]]))
		}
		words = append(words, word{syms, counts[k]})
	}

	vocab := map[string]int{}
	var tokens []string
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
		tokens = append(tokens, string(byteToRune[b]))
	}
	var merges [][2]string
	for len(tokens) < NumMerged {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.n
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if _, exists := vocab[p[0]+p[1]]; exists {
				continue
			}
			if n > bestN || (n == bestN && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestN = p, n
			}
		}
		if bestN == 0 {
			return nil, fmt.Errorf("corpus exhausted after %d tokens; write more text", len(tokens))
		}
		merged := best[0] + best[1]
		vocab[merged] = len(tokens)
		tokens = append(tokens, merged)
		merges = append(merges, best)
		for wi := range words {
			s := words[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, merged)
					i++
					continue
				}
				out = append(out, s[i])
			}
			words[wi].syms = out
		}
	}

	added := []map[string]any{}
	for _, a := range []struct {
		id      int
		content string
	}{{EndOfText, "<|endoftext|>"}, {ImStart, "<|im_start|>"}, {ImEnd, "<|im_end|>"}} {
		added = append(added, map[string]any{"id": a.id, "content": a.content, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	var vb strings.Builder
	vb.WriteString("{")
	for i, t := range tokens {
		k, _ := json.Marshal(t)
		if i > 0 {
			vb.WriteString(",")
		}
		fmt.Fprintf(&vb, "\n   %s: %d", k, i)
	}
	vb.WriteString("\n  }")
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	tok := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": splitPattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		"post_processor": byteLevel,
		"decoder":        byteLevel,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": json.RawMessage(vb.String()), "merges": merges,
		},
	}
	tokJSON, err := marshal(tok)
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": false, "add_prefix_space": false,
		"bos_token": nil, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": nil,
		"model_max_length": 4096, "clean_up_tokenization_spaces": false, "chat_template": chatTemplate,
	}
	cfgJSON, _ := marshal(cfg)
	model := map[string]any{"architectures": []string{"TsdDemoForCausalLM"}, "model_type": "tsd-demo",
		"vocab_size": VocabSize, "eos_token_id": ImEnd, "max_position_embeddings": 4096}
	modelJSON, _ := marshal(model)
	gen := map[string]any{"eos_token_id": []int{ImEnd, EndOfText}, "temperature": 0.7, "top_p": 0.9}
	genJSON, _ := marshal(gen)
	return map[string][]byte{
		"tokenizer.json":         tokJSON,
		"tokenizer_config.json":  cfgJSON,
		"config.json":            modelJSON,
		"generation_config.json": genJSON,
	}, nil
}

// marshal indents without HTML escaping so the files stay readable.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Package tokenizer loads Hugging Face tokenizer.json files (byte-level BPE:
// Qwen2/3, Llama 3, DeepSeek, GPT-style), renders chat templates, and turns
// engine token ids back into text incrementally, with stop strings held back
// until they are decided. The gateway needs all of this because the engines
// speak token ids only over the ZMQ lane (docs/protocol.md §11.3).
package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// LoadOptions tunes Load.
type LoadOptions struct {
	// ModelDir holds config.json / generation_config.json and is searched
	// for chat templates; empty means the tokenizer directory.
	ModelDir string
	// ChatTemplatePath overrides template discovery (docs/protocol.md §11.3).
	ChatTemplatePath string
	// CacheWords bounds the per-word BPE cache; 0 means 65536 words.
	CacheWords int
}

// rawTokenizerJSON is the subset of tokenizer.json we read. Fields stay raw
// where their shape depends on a "type" so errors can name the field.
type rawTokenizerJSON struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

// AddedToken is one entry of tokenizer.json's added_tokens.
type AddedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// fieldError names the file and JSON field that we cannot handle, so a
// user with an unsupported model sees exactly why at load time.
type fieldError struct {
	file, field, msg string
}

func (e *fieldError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.file, e.field, e.msg)
}

func unsupported(file, field, what string) error {
	return &fieldError{file: file, field: field, msg: "unsupported " + what}
}

// Load reads a tokenizer directory (tokenizer.json, tokenizer_config.json,
// and where present config.json, generation_config.json, chat templates).
func Load(dir string) (*Tokenizer, error) { return LoadWith(dir, LoadOptions{}) }

// LoadWith is Load with options.
func LoadWith(dir string, opts LoadOptions) (*Tokenizer, error) {
	tokFile := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(tokFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			for _, alt := range []string{"tokenizer.model", "tiktoken.model"} {
				if _, e := os.Stat(filepath.Join(dir, alt)); e == nil {
					return nil, fmt.Errorf("load tokenizer from %s: %s is not supported (need tokenizer.json)", dir, alt)
				}
			}
		}
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := parseTokenizerJSON(tokFile, data, opts.CacheWords)
	if err != nil {
		return nil, err
	}
	if err := t.loadConfigs(dir, opts); err != nil {
		return nil, err
	}
	return t, nil
}

func parseTokenizerJSON(file string, data []byte, cacheWords int) (*Tokenizer, error) {
	var raw rawTokenizerJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	t := &Tokenizer{}
	var err error
	if t.model, err = parseBPE(file, raw.Model, cacheWords); err != nil {
		return nil, err
	}
	if t.normalizer, err = parseNormalizer(file, "normalizer", raw.Normalizer); err != nil {
		return nil, err
	}
	stages, err := parsePreTokenizer(file, "pre_tokenizer", raw.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if n := len(stages); n > 0 && stages[n-1].byteLevel {
		// The byte mapping is per word: let the BPE cache do it on a miss.
		stages = stages[:n-1]
		t.model.byteLevelWords = true
	}
	for _, st := range stages {
		t.preTok = append(t.preTok, st.fn)
	}
	if t.byteLevelDecode, err = parseDecoder(file, "decoder", raw.Decoder); err != nil {
		return nil, err
	}
	if t.post, err = parsePostProcessor(file, "post_processor", raw.PostProcessor); err != nil {
		return nil, err
	}
	t.pieceOff = pipelineCrossesPieces(raw.Normalizer, raw.PreTokenizer)
	t.added = newAddedVocab(raw.AddedTokens)
	t.buildIDTable(raw.AddedTokens)
	for i := range t.post.single {
		p := &t.post.single[i]
		if p.special != "" {
			id, ok := t.TokenToID(p.special)
			if !ok {
				return nil, &fieldError{file, "post_processor.special_tokens", fmt.Sprintf("token %q not in vocabulary", p.special)}
			}
			p.id = id
		}
	}
	return t, nil
}

// typed peeks at {"type": ...}; null JSON yields "".
func typed(raw json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return "", nil
	}
	var h struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", err
	}
	return h.Type, nil
}

// specialString accepts "x" or {"content": "x"} (tokenizer_config.json style).
func specialString(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Content
	}
	return ""
}

// intOrList accepts 5 or [5, 6] (config.json eos_token_id).
func intOrList(raw json.RawMessage) []int32 {
	if len(raw) == 0 {
		return nil
	}
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}
	}
	var many []int32
	if json.Unmarshal(raw, &many) == nil {
		return many
	}
	return nil
}

func (t *Tokenizer) loadConfigs(dir string, opts LoadOptions) error {
	modelDir := opts.ModelDir
	if modelDir == "" {
		modelDir = dir
	}
	cfgFile := filepath.Join(dir, "tokenizer_config.json")
	var cfg map[string]json.RawMessage
	if data, err := os.ReadFile(cfgFile); err == nil {
		if err := json.Unmarshal(data, &cfg); err != nil {
			return fmt.Errorf("parse %s: %w", cfgFile, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read tokenizer config: %w", err)
	}
	t.BOSToken = specialString(cfg["bos_token"])
	t.EOSToken = specialString(cfg["eos_token"])
	t.PadToken = specialString(cfg["pad_token"])
	t.UnkToken = specialString(cfg["unk_token"])
	_ = json.Unmarshal(cfg["add_bos_token"], &t.AddBOS)
	_ = json.Unmarshal(cfg["add_eos_token"], &t.AddEOS)

	eos := map[int32]bool{}
	var order []int32
	addEOS := func(ids []int32) {
		for _, id := range ids {
			if !eos[id] {
				eos[id] = true
				order = append(order, id)
			}
		}
	}
	for _, name := range []string{"config.json", "generation_config.json"} {
		f := filepath.Join(modelDir, name)
		data, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("read %s: %w", name, err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("parse %s: %w", f, err)
		}
		addEOS(intOrList(m["eos_token_id"]))
		if name == "config.json" {
			_ = json.Unmarshal(m["vocab_size"], &t.ModelVocabSize)
		}
	}
	if t.EOSToken != "" {
		if id, ok := t.TokenToID(t.EOSToken); ok {
			addEOS([]int32{id})
		}
	}
	t.eos = order

	tmpl, src, err := discoverChatTemplate(modelDir, opts.ChatTemplatePath, cfg["chat_template"])
	if err != nil {
		return err
	}
	if tmpl != "" {
		if err := t.SetChatTemplate(tmpl); err != nil {
			return fmt.Errorf("compile chat template from %s: %w", src, err)
		}
		t.ChatTemplateSource = src
	}
	return nil
}

// discoverChatTemplate follows docs/protocol.md §11.3: explicit path, then
// chat_template.json, chat_template.jinja, any *.jinja in the model
// directory, then tokenizer_config.json's chat_template.
func discoverChatTemplate(modelDir, explicit string, cfgField json.RawMessage) (string, string, error) {
	if explicit != "" {
		data, err := os.ReadFile(explicit)
		if err != nil {
			return "", "", fmt.Errorf("read chat template: %w", err)
		}
		if strings.HasSuffix(explicit, ".json") {
			s, err := templateFromJSON(data)
			return s, explicit, err
		}
		return string(data), explicit, nil
	}
	if data, err := os.ReadFile(filepath.Join(modelDir, "chat_template.json")); err == nil {
		s, err := templateFromJSON(data)
		if err != nil {
			return "", "", fmt.Errorf("chat_template.json: %w", err)
		}
		return s, filepath.Join(modelDir, "chat_template.json"), nil
	}
	if data, err := os.ReadFile(filepath.Join(modelDir, "chat_template.jinja")); err == nil {
		return string(data), filepath.Join(modelDir, "chat_template.jinja"), nil
	}
	if m, _ := filepath.Glob(filepath.Join(modelDir, "*.jinja")); len(m) > 0 {
		sort.Strings(m)
		data, err := os.ReadFile(m[0])
		if err != nil {
			return "", "", fmt.Errorf("read chat template: %w", err)
		}
		return string(data), m[0], nil
	}
	if len(cfgField) > 0 && string(cfgField) != "null" {
		s, err := templateValue(cfgField)
		if err != nil {
			return "", "", fmt.Errorf("tokenizer_config.json: chat_template: %w", err)
		}
		return s, "tokenizer_config.json", nil
	}
	return "", "", nil
}

func templateFromJSON(data []byte) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return "", err
	}
	return templateValue(m["chat_template"])
}

// templateValue accepts a string or a list of {name, template} (the
// "default" entry wins, as in transformers).
func templateValue(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", errors.New("neither a string nor a list of named templates")
	}
	for _, e := range list {
		if e.Name == "default" {
			return e.Template, nil
		}
	}
	return "", errors.New("no template named \"default\"")
}

package fakemodel

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Vocab maps token ids to the bytes they spell, so ts-fake can read a
// prompt and spell a reply. It reads a tokenizer.json's vocabulary only
// (no merges): spelling is greedy longest match, which any byte-level
// vocabulary can do for every text because its first 256 entries are the
// single bytes. Decoding the ids it spells gives the text back, which is
// all a reply needs (the ids need not be the ones the real BPE would
// pick).
type Vocab struct {
	bytes  map[int]string // id -> bytes
	ids    map[string]int // bytes -> lowest id
	maxLen int
}

// ByteVocab is the fallback without a tokenizer.json: id b is byte b, as
// in the demo tokenizer (gateway/tokenizer/testdata/demo), whose first 256
// ids are the single bytes in order.
func ByteVocab() *Vocab {
	v := &Vocab{bytes: map[int]string{}, ids: map[string]int{}, maxLen: 1}
	for b := 0; b < 256; b++ {
		v.bytes[b] = string([]byte{byte(b)})
		v.ids[string([]byte{byte(b)})] = b
	}
	return v
}

// byteDecoder inverts GPT-2's byte-level alphabet: printable bytes stand
// for themselves, the others for U+0100 onwards in byte order.
var byteDecoder = func() map[rune]byte {
	m := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[rune(b)] = byte(b)
			continue
		}
		m[rune(256+n)] = byte(b)
		n++
	}
	return m
}()

// LoadVocab reads dir/tokenizer.json (or the file itself when path names
// one).
func LoadVocab(path string) (*Vocab, error) {
	file := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		file = filepath.Join(path, "tokenizer.json")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("load vocabulary: %w", err)
	}
	var tj struct {
		Model struct {
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
		Decoder *struct {
			Type string `json:"type"`
		} `json:"decoder"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return nil, fmt.Errorf("load vocabulary %s: %w", file, err)
	}
	var vocab map[string]int
	if err := json.Unmarshal(tj.Model.Vocab, &vocab); err != nil {
		return nil, fmt.Errorf("load vocabulary %s: model.vocab: %w", file, err)
	}
	byteLevel := tj.Decoder != nil && tj.Decoder.Type == "ByteLevel"
	v := &Vocab{bytes: map[int]string{}, ids: map[string]int{}}
	for tok, id := range vocab {
		s, ok := tok, true
		if byteLevel {
			s, ok = fromByteLevel(tok)
		} else {
			s = sentencePiece(tok)
		}
		if ok {
			v.add(id, s)
		}
	}
	for _, a := range tj.AddedTokens {
		v.add(a.ID, a.Content)
	}
	return v, nil
}

func (v *Vocab) add(id int, s string) {
	v.bytes[id] = s
	if old, ok := v.ids[s]; (!ok || id < old) && s != "" {
		v.ids[s] = id
	}
	v.maxLen = max(v.maxLen, len(s))
}

func fromByteLevel(tok string) (string, bool) {
	var b strings.Builder
	for _, r := range tok {
		c, ok := byteDecoder[r]
		if !ok {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// sentencePiece reads a SentencePiece-style token: ▁ is a space and
// <0xNN> a byte-fallback byte.
func sentencePiece(tok string) string {
	if len(tok) == 6 && strings.HasPrefix(tok, "<0x") && tok[5] == '>' {
		if n, err := strconv.ParseUint(tok[3:5], 16, 8); err == nil {
			return string([]byte{byte(n)})
		}
	}
	return strings.ReplaceAll(tok, "▁", " ")
}

// Encode spells text as ids (greedy longest match); it fails on a byte
// no token spells.
func (v *Vocab) Encode(text string) ([]int, error) {
	var out []int
	for i := 0; i < len(text); {
		n := min(v.maxLen, len(text)-i)
		for ; n > 0; n-- {
			if id, ok := v.ids[text[i:i+n]]; ok {
				out = append(out, id)
				break
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("spell reply: no token for byte 0x%02x at offset %d", text[i], i)
		}
		i += n
	}
	return out, nil
}

// Decode is the text ids spell (unknown ids spell nothing).
func (v *Vocab) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(v.bytes[int(id)])
	}
	return b.String()
}

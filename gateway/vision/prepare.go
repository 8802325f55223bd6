package vision

// Preparing a prompt's images for the encode role: one anchor per image
// in the rendered prompt, expanded to the image's token count, and each
// image decoded, preprocessed and hashed into the tokenapi.Image the
// dispatcher routes (docs/protocol.md §9).

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// Tokens are a Qwen-VL model's image anchor tokens.
type Tokens struct {
	Start, Pad, End int32
}

// LoadTokens reads vision_start_token_id, image_token_id and
// vision_end_token_id from the model's config.json (top level or under
// text_config, as Qwen2-VL / Qwen3-VL write them).
func LoadTokens(dir string) (Tokens, error) {
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return Tokens{}, fmt.Errorf("read model config: %w", err)
	}
	type ids struct {
		Start *int32 `json:"vision_start_token_id"`
		End   *int32 `json:"vision_end_token_id"`
		Pad   *int32 `json:"image_token_id"`
	}
	var c struct {
		ids
		Text *ids `json:"text_config"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Tokens{}, fmt.Errorf("parse %s: %w", path, err)
	}
	pick := func(top, nested *int32) *int32 {
		if top != nil {
			return top
		}
		return nested
	}
	var t ids
	if c.Text != nil {
		t = *c.Text
	}
	s, p, e := pick(c.Start, t.Start), pick(c.Pad, t.Pad), pick(c.End, t.End)
	if s == nil || p == nil || e == nil {
		return Tokens{}, fmt.Errorf("%s: vision_start_token_id, image_token_id and vision_end_token_id are required for images", path)
	}
	return Tokens{Start: *s, Pad: *p, End: *e}, nil
}

// ItemHash is an image's identity: the hex digest of its raw bytes (the
// encoder ring's consistent-hashing key, epd.NewRing) and the int64 the
// wire item's hash field carries. SMG uses blake3; tsd uses SHA-256 (in the standard
// library), which only changes which encoder a given image lands on.
func ItemHash(raw []byte) (hexDigest string, id int64) {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), int64(binary.BigEndian.Uint64(sum[:8]) >> 1)
}

// Prepare turns raw image bytes (ParseImageURL's output, in prompt
// order) and the templated, tokenized prompt into the expanded prompt and
// one tokenapi.Image per image, ready for the dispatcher: decode (lim),
// preprocess (cfg), find one anchor per image, expand it to the image's
// token count, hash. Errors about the images wrap ErrBadImage; anchor
// mismatches wrap ErrPlaceholders (both 400s).
func Prepare(ids []int32, raws [][]byte, cfg Config, vt Tokens, lim Limits) ([]int32, []tokenapi.Image, error) {
	pos, err := FindImagePlaceholders(ids, vt.Start, vt.Pad, vt.End, len(raws))
	if err != nil {
		return nil, nil, err
	}
	patches := make([]*Patches, len(raws))
	counts := make([]int, len(raws))
	for i, raw := range raws {
		img, _, err := Decode(raw, lim)
		if err != nil {
			return nil, nil, fmt.Errorf("image %d: %w", i, err)
		}
		if patches[i], err = cfg.Preprocess(img); err != nil {
			return nil, nil, fmt.Errorf("image %d: %w", i, err)
		}
		counts[i] = patches[i].NumTokens(cfg.MergeSize)
	}
	out, offsets, err := ExpandImagePads(ids, pos, counts, vt.Pad)
	if err != nil {
		return nil, nil, err
	}
	imgs := make([]tokenapi.Image, len(raws))
	for i, raw := range raws {
		h, id := ItemHash(raw)
		p := patches[i]
		// gen's span is half-open, the wire's (ExpandImagePads) inclusive.
		imgs[i] = tokenapi.Image{Hash: h, ID: id, Pixels: p.Pixels, Dim: p.Dim, GridTHW: p.Grid,
			Offset: [2]int{offsets[i][0], offsets[i][1] + 1}, PadToken: vt.Pad}
	}
	return out, imgs, nil
}

// ErrPlaceholders means the rendered prompt's image anchors do not match
// the request's images (SMG: multimodal_prompt_contract_mismatch): a 400.
var ErrPlaceholders = errors.New("image placeholders do not match the images")

// FindImagePlaceholders returns the positions of the image anchors a
// Qwen-VL chat template renders, `<|vision_start|><|image_pad|><|vision_end|>`:
// every padID directly between start and end. want is the number of images;
// a different count is ErrPlaceholders.
func FindImagePlaceholders(ids []int32, startID, padID, endID int32, want int) ([]int, error) {
	var pos []int
	for i := 1; i+1 < len(ids); i++ {
		if ids[i] == padID && ids[i-1] == startID && ids[i+1] == endID {
			pos = append(pos, i)
		}
	}
	if len(pos) != want {
		return nil, fmt.Errorf("%w: the prompt has %d image anchors for %d images", ErrPlaceholders, len(pos), want)
	}
	return pos, nil
}

// ExpandImagePads replaces the single pad token at each placeholder
// position with counts[i] copies of padID (the image's embedding length,
// vision.Patches.NumTokens) and returns the new ids and each image's span
// in wire form: [start, end] with end inclusive (SGLang's offsets).
// Positions must be increasing and hold padID.
func ExpandImagePads(ids []int32, placeholders []int, counts []int, padID int32) ([]int32, [][2]int, error) {
	if len(placeholders) != len(counts) {
		return nil, nil, fmt.Errorf("%w: %d placeholders for %d images", ErrPlaceholders, len(placeholders), len(counts))
	}
	extra := 0
	for i, p := range placeholders {
		switch {
		case p < 0 || p >= len(ids):
			return nil, nil, fmt.Errorf("%w: placeholder %d at %d is outside the prompt of %d tokens", ErrPlaceholders, i, p, len(ids))
		case i > 0 && p <= placeholders[i-1]:
			return nil, nil, fmt.Errorf("%w: placeholder positions not increasing", ErrPlaceholders)
		case ids[p] != padID:
			return nil, nil, fmt.Errorf("%w: token %d at placeholder %d is not the image pad %d", ErrPlaceholders, ids[p], p, padID)
		case counts[i] < 1:
			return nil, nil, fmt.Errorf("image %d needs %d pad tokens, want at least 1", i, counts[i])
		}
		extra += counts[i] - 1
	}
	out := make([]int32, 0, len(ids)+extra)
	offsets := make([][2]int, len(placeholders))
	prev := 0
	for i, p := range placeholders {
		out = append(out, ids[prev:p]...)
		start := len(out)
		for k := 0; k < counts[i]; k++ {
			out = append(out, padID)
		}
		offsets[i] = [2]int{start, len(out) - 1}
		prev = p + 1
	}
	out = append(out, ids[prev:]...)
	return out, offsets, nil
}

package epd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/vision"
	"github.com/tsd-project/tsd/gateway/wire"
)

// VisionTokens are a Qwen-VL model's image anchor tokens.
type VisionTokens struct {
	Start, Pad, End int32
}

// LoadVisionTokens reads vision_start_token_id, image_token_id and
// vision_end_token_id from the model's config.json (top level or under
// text_config, as Qwen2-VL / Qwen3-VL write them).
func LoadVisionTokens(dir string) (VisionTokens, error) {
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return VisionTokens{}, fmt.Errorf("read model config: %w", err)
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
		return VisionTokens{}, fmt.Errorf("parse %s: %w", path, err)
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
		return VisionTokens{}, fmt.Errorf("%s: vision_start_token_id, image_token_id and vision_end_token_id are required for images", path)
	}
	return VisionTokens{Start: *s, Pad: *p, End: *e}, nil
}

// Prepared is a prompt with its images preprocessed and pads expanded:
// what every leg shares.
type Prepared struct {
	InputIDs []int32                   // expanded prompt
	Items    []wire.MultimodalDataItem // full items (pixels included), prompt order
	Hashes   []string                  // hex content hash per item: the encoder routing key
	PadID    int32
}

// PrepareImages turns raw image bytes (ParseImageURL's output, in prompt
// order) and the templated, tokenized prompt into the expanded prompt and
// the full items: decode (limits), preprocess (cfg), find one anchor per
// image, expand it to the image's token count, hash. Errors about the
// images wrap vision.ErrBadImage; anchor mismatches wrap ErrPlaceholders
// (both 400s).
func PrepareImages(ids []int32, raws [][]byte, cfg vision.Config, vt VisionTokens, lim vision.Limits) (Prepared, error) {
	out, patches, offsets, err := prepare(ids, raws, cfg, vt, lim)
	if err != nil {
		return Prepared{}, err
	}
	p := Prepared{InputIDs: out, PadID: vt.Pad, Items: make([]wire.MultimodalDataItem, len(raws)), Hashes: make([]string, len(raws))}
	for i, raw := range raws {
		h, id := ItemHash(raw)
		p.Hashes[i] = h
		p.Items[i] = ImageItem(patches[i], id, offsets[i])
	}
	return p, nil
}

// prepare is PrepareImages up to the wire items: the expanded prompt, each
// image's patches and its pad span (wire form, end inclusive).
func prepare(ids []int32, raws [][]byte, cfg vision.Config, vt VisionTokens, lim vision.Limits) ([]int32, []*vision.Patches, [][2]int, error) {
	pos, err := FindImagePlaceholders(ids, vt.Start, vt.Pad, vt.End, len(raws))
	if err != nil {
		return nil, nil, nil, err
	}
	patches := make([]*vision.Patches, len(raws))
	counts := make([]int, len(raws))
	for i, raw := range raws {
		img, _, err := vision.Decode(raw, lim)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("image %d: %w", i, err)
		}
		if patches[i], err = cfg.Preprocess(img); err != nil {
			return nil, nil, nil, fmt.Errorf("image %d: %w", i, err)
		}
		counts[i] = patches[i].NumTokens(cfg.MergeSize)
	}
	out, offsets, err := ExpandImagePads(ids, pos, counts, vt.Pad)
	if err != nil {
		return nil, nil, nil, err
	}
	return out, patches, offsets, nil
}

// PrepareGen is PrepareImages for a front end that hands the request to
// the dispatcher through gen: the expanded prompt and one gen.Image per
// image (pixels as float32, span half-open). The dispatcher builds the
// wire items from them (ImageItem).
func PrepareGen(ids []int32, raws [][]byte, cfg vision.Config, vt VisionTokens, lim vision.Limits) ([]int32, []gen.Image, error) {
	out, patches, offsets, err := prepare(ids, raws, cfg, vt, lim)
	if err != nil {
		return nil, nil, err
	}
	imgs := make([]gen.Image, len(raws))
	for i, raw := range raws {
		h, id := ItemHash(raw)
		p := patches[i]
		imgs[i] = gen.Image{Hash: h, ID: id, Pixels: p.Pixels, Dim: p.Dim, GridTHW: p.Grid,
			Offset: [2]int{offsets[i][0], offsets[i][1] + 1}, PadToken: vt.Pad}
	}
	return out, imgs, nil
}

// Legs is what the dispatcher sends for one image request.
type Legs struct {
	Workers []string             // encode worker per item (Ring.Pick on its hash)
	Rooms   []uint64             // embedding room per item
	Encode  []wire.EncodeRequest // one per item, to Workers[i]'s rank 0
	Prefill *wire.MultimodalInputs
	Decode  *wire.MultimodalInputs
}

// Picker chooses the encode worker of an image from its content hash: a
// *Ring (consistent_hashing, the default), or the gateway's round_robin
// and random encode policies.
type Picker interface {
	Pick(hash string) string
}

// PlanLegs picks each item's encoder with ring, mints its room (distinct
// from the PD room) and builds the encode requests and the prefill/decode
// multimodal inputs. addr gives a worker's embedding rendezvous
// (registration, else Plan); false means it is unknown (not ready).
func PlanLegs(rid string, p Prepared, ring Picker, addr func(worker string) (Encoder, bool), pdRoom uint64, rnd func() uint64) (Legs, error) {
	n := len(p.Items)
	l := Legs{Workers: make([]string, n), Rooms: MintItemRooms(n, pdRoom, rnd)}
	encs := make([]Encoder, n)
	for i, h := range p.Hashes {
		w := ring.Pick(h)
		if w == "" {
			return Legs{}, fmt.Errorf("plan encode legs: no encode worker for image %d", i)
		}
		e, ok := addr(w)
		if !ok {
			return Legs{}, fmt.Errorf("plan encode legs: encode worker %s has no bootstrap address", w)
		}
		l.Workers[i], encs[i] = w, e
	}
	var err error
	if l.Encode, err = BuildEncodeRequests(rid, p.Items, encs, l.Rooms); err != nil {
		return Legs{}, err
	}
	pre, err := PrefillItems(p.Items, encs, l.Rooms)
	if err != nil {
		return Legs{}, err
	}
	l.Prefill = Inputs(pre, int(p.PadID))
	l.Decode = Inputs(DecodeItems(p.Items), int(p.PadID))
	return l, nil
}

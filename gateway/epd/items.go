package epd

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/tsd-project/tsd/gateway/vision"
	"github.com/tsd-project/tsd/gateway/wire"
)

// Encoder is where an encode worker's embeddings are fetched from: its
// bootstrap host and --disaggregation-bootstrap-port (from its
// registration, else the Plan; docs/architecture.md §D5).
type Encoder struct {
	Host string
	Port int
}

// ItemHash is an image's identity: the hex digest of its raw bytes (the
// consistent-hashing key for PickEncoder) and the int64 the wire item's
// hash field carries. SMG uses blake3; tsd uses SHA-256 (in the standard
// library), which only changes which encoder a given image lands on.
func ItemHash(raw []byte) (hexDigest string, id int64) {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), int64(binary.BigEndian.Uint64(sum[:8]) >> 1)
}

// PadValue is the item's pad_value: its hash folded below 2^30, as the
// engines derive it (SGLang's `hash % (1 << 30)`).
func PadValue(id int64) int64 { return id % (1 << 30) }

// maxRoom keeps rooms in [0, 2^63-1), the range SMG mints in (63 bits on
// purpose: no de-duplication is done, docs/protocol.md §8.1).
const maxRoom = uint64(math.MaxInt64)

// MintItemRooms mints one bootstrap room per image item, uniform in
// [0, 2^63-1), distinct within the request and from avoid (the request's
// PD room). rnd is injected so tests are deterministic.
func MintItemRooms(n int, avoid uint64, rnd func() uint64) []uint64 {
	rooms := make([]uint64, 0, n)
	used := map[uint64]bool{avoid: true}
	for len(rooms) < n {
		r := rnd() & maxRoom
		if r == maxRoom || used[r] {
			continue
		}
		used[r] = true
		rooms = append(rooms, r)
	}
	return rooms
}

// ImageItem is the full wire item for one preprocessed image: pixels as a
// float32 tensor [patches, dim] (inline; MoveFeaturesOutOfBand moves big
// ones to aux frames), hash, pad_value, the pad span in the expanded prompt
// (offset, wire form [start, end] inclusive) and image_grid_thw in
// model_specific_data.
func ImageItem(p *vision.Patches, id int64, offset [2]int) wire.MultimodalDataItem {
	rows := p.Grid[0] * p.Grid[1] * p.Grid[2]
	data := make([]byte, 4*len(p.Pixels))
	for i, v := range p.Pixels {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	pad := PadValue(id)
	return wire.MultimodalDataItem{
		Modality:          wire.ModalityImage,
		Hash:              &id,
		PadValue:          &pad,
		Offsets:           [][2]int{offset},
		Feature:           &wire.Tensor{Dtype: "float32", Shape: []int{rows, p.Dim}, Data: data},
		ModelSpecificData: GridTHWRaw(p.Grid),
	}
}

// GridTHWRaw is model_specific_data for one image: the msgpack map
// {"image_grid_thw": [[t, h, w]]} (tsd's design; the engine's key name).
func GridTHWRaw(g [3]int) wire.Raw {
	b := []byte{0x81, 0xae}
	b = append(b, "image_grid_thw"...)
	b = append(b, 0x91, 0x93)
	for _, v := range g {
		b = appendUint(b, uint64(v))
	}
	return b
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

// BuildEncodeRequests is one EncodeRequest per item for the encode legs:
// rid "<rid>-enc-<i>" (unique on the encode engine), request_id = the
// client request's rid, the chosen encoder's own bootstrap host/port, the
// item's room, and the item with its pixels.
func BuildEncodeRequests(rid string, items []wire.MultimodalDataItem, encoders []Encoder, rooms []uint64) ([]wire.EncodeRequest, error) {
	if len(encoders) != len(items) || len(rooms) != len(items) {
		return nil, fmt.Errorf("build encode requests: %d items, %d encoders, %d rooms", len(items), len(encoders), len(rooms))
	}
	out := make([]wire.EncodeRequest, len(items))
	for i, it := range items {
		if it.Feature == nil {
			return nil, fmt.Errorf("build encode requests: item %d has no pixels", i)
		}
		encRID := EncodeRID(rid, i)
		q := wire.NewEncodeRequest(encRID, encoders[i].Host, encoders[i].Port, rooms[i], it)
		parent := rid
		q.RequestID = &parent
		out[i] = q
	}
	return out, nil
}

// EncodeRID is the rid of item i's encode request.
func EncodeRID(rid string, i int) string { return rid + "-enc-" + strconv.Itoa(i) }

// PrefillItems are the items as the prefill leg carries them: no pixels,
// each with encode_handshake naming its encoder and room.
func PrefillItems(items []wire.MultimodalDataItem, encoders []Encoder, rooms []uint64) ([]wire.MultimodalDataItem, error) {
	if len(encoders) != len(items) || len(rooms) != len(items) {
		return nil, fmt.Errorf("prefill items: %d items, %d encoders, %d rooms", len(items), len(encoders), len(rooms))
	}
	out := make([]wire.MultimodalDataItem, len(items))
	for i, it := range items {
		out[i] = it.ForPrefill(wire.EncodeHandshakeInfo{BootstrapHost: encoders[i].Host, BootstrapPort: encoders[i].Port, BootstrapRoom: rooms[i]})
	}
	return out, nil
}

// DecodeItems are the items as the decode leg carries them: metadata only
// (it needs the spans for placeholder padding and M-RoPE).
func DecodeItems(items []wire.MultimodalDataItem) []wire.MultimodalDataItem {
	out := make([]wire.MultimodalDataItem, len(items))
	for i, it := range items {
		out[i] = it.ForDecode()
	}
	return out
}

// Inputs wraps per-leg items as request field 22, with the image pad id.
func Inputs(items []wire.MultimodalDataItem, imageTokenID int) *wire.MultimodalInputs {
	id := imageTokenID
	return &wire.MultimodalInputs{Items: items, ImTokenID: &id}
}

// InlineLimit is the largest tensor the lane carries inline (ext type 3);
// bigger ones travel as out-of-band frames (docs/protocol.md §9.3).
const InlineLimit = 256

// MoveFeaturesOutOfBand moves every feature of q bigger than InlineLimit
// into aux frames, numbering them from 1 (frame k follows the payload at
// position k: [type, payload, aux1, aux2, ...]); send the returned frames
// after the payload. q's items are copied, the caller's are untouched.
func MoveFeaturesOutOfBand(q *wire.EncodeRequest) [][]byte {
	var aux [][]byte
	items := make([]wire.MultimodalDataItem, len(q.Items))
	for i, it := range q.Items {
		if it.Feature != nil && it.Feature.AuxIndex == 0 && len(it.Feature.Data) > InlineLimit {
			t := *it.Feature
			aux = append(aux, t.Data)
			t.Data, t.AuxIndex = nil, len(aux)
			it.Feature = &t
		}
		items[i] = it
	}
	q.Items = items
	return aux
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

package epd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/internal/msgpack"
)

// Encoder is where an encode worker's embeddings are fetched from: its
// bootstrap host and --disaggregation-bootstrap-port (from its
// registration, else the Plan; docs/architecture.md §D5).
type Encoder struct {
	Host string
	Port int
}

// Legs is what the dispatcher sends for one image request: per image its
// encode leg, and the multimodal inputs of the prefill and the decode.
type Legs struct {
	Encode  []EncodeLeg
	Prefill *wire.MultimodalInputs // no pixels; each item names its encoder and room
	Decode  *wire.MultimodalInputs // metadata only
}

// EncodeLeg is one image's encode request, ready to send to DP rank 0 of
// Worker: Payload first, then the Aux frames.
type EncodeLeg struct {
	Worker  string             // the encode worker (the encoder ring's Pick on the image's hash)
	Room    uint64             // the embedding's room (MintItemRooms)
	Request wire.EncodeRequest // its big tensors out of band (MoveFeaturesOutOfBand)
	Payload []byte             // Request, encoded
	Aux     [][]byte           // the out-of-band tensor frames
}

// Picker chooses the encode worker of an image from its content hash: the
// encoder ring (NewRing; consistent_hashing, the default), or the
// gateway's round_robin and random encode policies.
type Picker interface {
	Pick(hash string) string
}

// ErrNoEncoder is wrapped when an image has no encode worker to go to
// (none is ready, or its embedding address is not known yet): a 503, as
// for a missing prefill or decode.
var ErrNoEncoder = errors.New("plan encode legs: no encode worker")

// BuildLegs builds every leg of an image request in one pass over its
// images (docs/protocol.md §9): for each, ring picks a worker on the
// image's content hash (the consistent-hashing encoder ring: a repeated image
// lands where its embedding may be cached), addr says where that worker's embeddings are
// fetched from (false: not known yet, the worker is not ready), a room of
// its own is minted (distinct from pdRoom and the others), and the image's
// one wire item is cut into the three views: with its pixels for the
// encode request, with the encode_handshake for the prefill, metadata
// only for the decode. rnd is injected so tests are deterministic.
func BuildLegs(rid string, images []tokenapi.Image, ring Picker, addr func(worker string) (Encoder, bool), pdRoom uint64, rnd func() uint64) (Legs, error) {
	n := len(images)
	if n == 0 {
		return Legs{}, nil
	}
	rooms := MintItemRooms(n, pdRoom, rnd)
	l := Legs{Encode: make([]EncodeLeg, n)}
	pre := make([]wire.MultimodalDataItem, n)
	dec := make([]wire.MultimodalDataItem, n)
	for i, im := range images {
		w := ring.Pick(im.Hash)
		if w == "" {
			return Legs{}, fmt.Errorf("%w for image %d", ErrNoEncoder, i)
		}
		enc, ok := addr(w)
		if !ok {
			return Legs{}, fmt.Errorf("%w: encode worker %s has no bootstrap address", ErrNoEncoder, w)
		}
		item := ImageItem(im)
		q := wire.NewEncodeRequest(EncodeRID(rid, i), enc.Host, enc.Port, rooms[i], item)
		parent := rid
		q.RequestID = &parent // the client request's rid
		aux := MoveFeaturesOutOfBand(&q)
		payload, err := wire.EncodeEncodeRequest(q)
		if err != nil {
			return Legs{}, fmt.Errorf("image %d: encode the EncodeRequest: %w", i, err)
		}
		l.Encode[i] = EncodeLeg{Worker: w, Room: rooms[i], Request: q, Payload: payload, Aux: aux}
		pre[i] = item.ForPrefill(wire.EncodeHandshakeInfo{BootstrapHost: enc.Host, BootstrapPort: enc.Port, BootstrapRoom: rooms[i]})
		dec[i] = item.ForDecode()
	}
	pad := int(images[0].PadToken)
	l.Prefill, l.Decode = Inputs(pre, pad), Inputs(dec, pad)
	return l, nil
}

// EncodeRID is the rid of item i's encode request (unique on the encode
// engine).
func EncodeRID(rid string, i int) string { return rid + "-enc-" + strconv.Itoa(i) }

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

// ImageItem is the full wire item for one prepared image: pixels as a
// float32 tensor [patches, dim] (inline; MoveFeaturesOutOfBand moves big
// ones to aux frames), hash, pad_value, the pad span in the expanded
// prompt (offset, wire form [start, end] inclusive; gen's is half-open)
// and image_grid_thw in model_specific_data.
func ImageItem(im tokenapi.Image) wire.MultimodalDataItem {
	rows := im.GridTHW[0] * im.GridTHW[1] * im.GridTHW[2]
	data := make([]byte, 4*len(im.Pixels))
	for i, v := range im.Pixels {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	id := im.ID
	pad := PadValue(id)
	return wire.MultimodalDataItem{
		Modality:          wire.ModalityImage,
		Hash:              &id,
		PadValue:          &pad,
		Offsets:           [][2]int{{im.Offset[0], im.Offset[1] - 1}},
		Feature:           &wire.Tensor{Dtype: "float32", Shape: []int{rows, im.Dim}, Data: data},
		ModelSpecificData: GridTHWRaw(im.GridTHW),
	}
}

// GridTHWRaw is model_specific_data for one image: the msgpack map
// {"image_grid_thw": [[t, h, w]]} (tsd's design; the engine's key name).
func GridTHWRaw(g [3]int) wire.Raw {
	b := msgpack.AppendMapHeader(nil, 1)
	b = msgpack.AppendStr(b, "image_grid_thw")
	b = msgpack.AppendArrayHeader(b, 1)
	b = msgpack.AppendArrayHeader(b, len(g))
	for _, v := range g {
		b = msgpack.AppendInt(b, int64(v))
	}
	return b
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

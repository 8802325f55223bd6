package wire

import (
	"errors"
	"fmt"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// EPD over the lane is tsd's design (docs/protocol.md §9 [DESIGN]); the shapes
// below follow what the engine side can already decode, kept in small
// functions so they can change when upstream settles.

// Modalities of a MultimodalDataItem.
const (
	ModalityImage = 1
	ModalityVideo = 2
	ModalityAudio = 3
)

// TensorExtType is the msgpack ext type that carries inline tensor bytes.
const TensorExtType = 3

// Tensor is the 3-array [dtype, shape, data]. Data travels inline (ext
// type 3, raw little-endian bytes) or, when AuxIndex >= 1, as out-of-band
// frame AuxIndex after the payload.
type Tensor struct {
	Dtype    string // torch name ("float32", "bfloat16") or numpy typestring ("<f4")
	Shape    []int
	Data     []byte // inline bytes; ignored when AuxIndex >= 1
	AuxIndex int
}

// EncodeHandshakeInfo ties a prefill item to the encode server that computes
// its embedding: {"bootstrap_host", "bootstrap_port", "bootstrap_room"}.
type EncodeHandshakeInfo struct {
	BootstrapHost string
	BootstrapPort int
	BootstrapRoom uint64
}

// MultimodalDataItem is the untagged 10-element item array.
type MultimodalDataItem struct {
	Modality          int                  // 0: ModalityImage, ...
	Hash              *int64               // 1
	PadValue          *int64               // 2
	Offsets           [][2]int             // 3: [start, end] pairs
	Feature           *Tensor              // 4: pixels; nil on prefill/decode legs in EPD
	FeatureSHM        Raw                  // 5: shared-memory handle (same host only)
	ModelSpecificData Raw                  // 6: e.g. image_grid_thw
	Encoded           Raw                  // 7: nil on the wire
	EncodedDeepstack  Raw                  // 8: nil on the wire
	EncodeHandshake   *EncodeHandshakeInfo // 9: set on the prefill leg only
}

// MultimodalInputs is request field 22, the untagged 7-element array.
type MultimodalInputs struct {
	Items                           []MultimodalDataItem
	ImTokenID                       *int
	VideoTokenID                    *int
	MropePositions                  Raw
	MropePositionDelta              Raw
	MropePositionDeltaScalar        Raw
	MropePositionDeltaRepeatedCache Raw // always nil on the wire
}

// EncodeRequest is the encode server's work item: the tagged array
// ["EncodeRequest", rid, http_worker_ipc, request_id, bootstrap_host,
// bootstrap_port, bootstrap_room, items] (docs/protocol.md §9.4). BootstrapHost/Port name
// the encode server itself; Items holds exactly one item with pixels.
type EncodeRequest struct {
	RID           string
	HTTPWorkerIPC *string
	RequestID     *string
	BootstrapHost *string
	BootstrapPort *int
	BootstrapRoom *uint64
	Items         []MultimodalDataItem
}

var (
	itemFields     = [...]string{"modality", "hash", "pad_value", "offsets", "feature", "feature_shm", "model_specific_data", "encoded", "encoded_deepstack", "encode_handshake"}
	mmInputFields  = [...]string{"mm_items", "im_token_id", "video_token_id", "mrope_positions", "mrope_position_delta", "mrope_position_delta_scalar", "mrope_position_delta_repeated_cache"}
	encodeReqField = [...]string{"tag", "rid", "http_worker_ipc", "request_id", "bootstrap_host", "bootstrap_port", "bootstrap_room", "items"}
)

// NewEncodeRequest is the request the gateway sends an encode server for
// one item: the room it minted and the encode server's own bootstrap address.
func NewEncodeRequest(rid, encodeHost string, encodePort int, room uint64, item MultimodalDataItem) EncodeRequest {
	return EncodeRequest{RID: rid, RequestID: &rid, BootstrapHost: &encodeHost,
		BootstrapPort: &encodePort, BootstrapRoom: &room, Items: []MultimodalDataItem{item}}
}

// ForPrefill is the item as the prefill leg carries it: no pixels, plus
// the handshake naming the encode server and room.
func (it MultimodalDataItem) ForPrefill(h EncodeHandshakeInfo) MultimodalDataItem {
	it.Feature, it.FeatureSHM = nil, nil
	it.EncodeHandshake = &h
	return it
}

// ForDecode is the item as the decode leg carries it: metadata only.
func (it MultimodalDataItem) ForDecode() MultimodalDataItem {
	it.Feature, it.FeatureSHM, it.EncodeHandshake = nil, nil, nil
	return it
}

func (m *MultimodalInputs) checkRaws() error {
	for _, kv := range []struct {
		name string
		v    Raw
	}{
		{"mrope_positions", m.MropePositions},
		{"mrope_position_delta", m.MropePositionDelta},
		{"mrope_position_delta_scalar", m.MropePositionDeltaScalar},
		{"mrope_position_delta_repeated_cache", m.MropePositionDeltaRepeatedCache},
	} {
		if err := checkRaw("multimodal_inputs."+kv.name, kv.v); err != nil {
			return err
		}
	}
	return checkItemRaws(m.Items)
}

func checkItemRaws(items []MultimodalDataItem) error {
	for i, it := range items {
		for _, kv := range []struct {
			name string
			v    Raw
		}{
			{"feature_shm", it.FeatureSHM},
			{"model_specific_data", it.ModelSpecificData},
			{"encoded", it.Encoded},
			{"encoded_deepstack", it.EncodedDeepstack},
		} {
			if err := checkRaw(fmt.Sprintf("items[%d].%s", i, kv.name), kv.v); err != nil {
				return err
			}
		}
	}
	return nil
}

func appendTensor(b []byte, t Tensor) []byte {
	b = msgpack.AppendArrayHeader(b, 3)
	b = msgpack.AppendStr(b, t.Dtype)
	b = msgpack.AppendArrayHeader(b, len(t.Shape))
	for _, d := range t.Shape {
		b = msgpack.AppendInt(b, int64(d))
	}
	if t.AuxIndex >= 1 {
		return msgpack.AppendInt(b, int64(t.AuxIndex))
	}
	return msgpack.AppendExt(b, TensorExtType, t.Data)
}

func (r *reader) readTensor() (Tensor, error) {
	var t Tensor
	n, err := r.ReadArrayLen()
	if err != nil {
		return t, err
	}
	if n < 3 {
		return t, fmt.Errorf("tensor array of %d elements, want 3", n)
	}
	if t.Dtype, err = r.ReadStr(); err != nil {
		return t, msgpack.At("[0] dtype", err)
	}
	m, err := r.ReadArrayLen()
	if err != nil {
		return t, msgpack.At("[1] shape", err)
	}
	t.Shape = make([]int, m)
	for i := range t.Shape {
		if t.Shape[i], err = r.ReadIntN(); err != nil {
			return t, msgpack.At("[1] shape"+msgpack.Index(i), err)
		}
	}
	c, err := r.Peek()
	if err != nil {
		return t, msgpack.At("[2] data", err)
	}
	if msgpack.Family(c) == "int" {
		if t.AuxIndex, err = r.ReadIntN(); err == nil && t.AuxIndex < 1 {
			err = fmt.Errorf("out-of-band index %d, want >= 1", t.AuxIndex)
		}
	} else {
		var typ int8
		typ, t.Data, err = r.ReadExt()
		if err == nil && typ != TensorExtType {
			err = fmt.Errorf("ext type %d, want %d", typ, TensorExtType)
		}
	}
	if err != nil {
		return t, msgpack.At("[2] data", err)
	}
	for i := 3; i < n; i++ {
		if err := r.Skip(); err != nil {
			return t, msgpack.At(msgpack.Index(i), err)
		}
	}
	return t, nil
}

func appendEncodeHandshake(b []byte, h EncodeHandshakeInfo) []byte {
	b = msgpack.AppendMapHeader(b, 3)
	b = msgpack.AppendStr(msgpack.AppendStr(b, "bootstrap_host"), h.BootstrapHost)
	b = msgpack.AppendInt(msgpack.AppendStr(b, "bootstrap_port"), int64(h.BootstrapPort))
	return msgpack.AppendUint(msgpack.AppendStr(b, "bootstrap_room"), h.BootstrapRoom)
}

func (r *reader) readEncodeHandshake() (EncodeHandshakeInfo, error) {
	var h EncodeHandshakeInfo
	err := r.ReadMap(func(k string) (bool, error) {
		var err error
		switch k {
		case "bootstrap_host":
			h.BootstrapHost, err = r.ReadStr()
		case "bootstrap_port":
			h.BootstrapPort, err = r.ReadIntN()
		case "bootstrap_room":
			h.BootstrapRoom, err = r.ReadUint()
		default:
			return false, nil
		}
		return true, err
	})
	return h, err
}

func appendItem(b []byte, it MultimodalDataItem) []byte {
	b = msgpack.AppendArrayHeader(b, len(itemFields))
	b = msgpack.AppendInt(b, int64(it.Modality))
	b = msgpack.AppendOptInt64(b, it.Hash)
	b = msgpack.AppendOptInt64(b, it.PadValue)
	if it.Offsets == nil {
		b = msgpack.AppendNil(b)
	} else {
		b = msgpack.AppendArrayHeader(b, len(it.Offsets))
		for _, o := range it.Offsets {
			b = msgpack.AppendInt(msgpack.AppendInt(msgpack.AppendArrayHeader(b, 2), int64(o[0])), int64(o[1]))
		}
	}
	if it.Feature == nil {
		b = msgpack.AppendNil(b)
	} else {
		b = appendTensor(b, *it.Feature)
	}
	b = msgpack.AppendRaw(b, it.FeatureSHM)
	b = msgpack.AppendRaw(b, it.ModelSpecificData)
	b = msgpack.AppendRaw(b, it.Encoded)
	b = msgpack.AppendRaw(b, it.EncodedDeepstack)
	if it.EncodeHandshake == nil {
		return msgpack.AppendNil(b)
	}
	return appendEncodeHandshake(b, *it.EncodeHandshake)
}

func (r *reader) readItem() (MultimodalDataItem, error) {
	var it MultimodalDataItem
	n, err := r.ReadArrayLen()
	if err != nil {
		return it, err
	}
	if n < 1 {
		return it, errors.New("empty item array, want at least modality")
	}
	for i := 0; i < n; i++ {
		var err error
		switch i {
		case 0:
			it.Modality, err = r.ReadIntN()
		case 1:
			it.Hash, err = r.ReadOptInt64()
		case 2:
			it.PadValue, err = r.ReadOptInt64()
		case 3:
			it.Offsets, err = r.readOffsets()
		case 4:
			if !r.NextNil() {
				var t Tensor
				t, err = r.readTensor()
				it.Feature = &t
			}
		case 5:
			it.FeatureSHM, err = r.ReadRaw()
		case 6:
			it.ModelSpecificData, err = r.ReadRaw()
		case 7:
			it.Encoded, err = r.ReadRaw()
		case 8:
			it.EncodedDeepstack, err = r.ReadRaw()
		case 9:
			if !r.NextNil() {
				var h EncodeHandshakeInfo
				h, err = r.readEncodeHandshake()
				it.EncodeHandshake = &h
			}
		default:
			err = r.Skip()
		}
		if err != nil {
			return it, msgpack.At(msgpack.Field(i, fieldName(itemFields[:], i)), err)
		}
	}
	return it, nil
}

func (r *reader) readOffsets() ([][2]int, error) {
	if r.NextNil() {
		return nil, nil
	}
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	out := make([][2]int, n)
	for i := range out {
		m, err := r.ReadArrayLen()
		if err == nil && m != 2 {
			err = fmt.Errorf("pair of %d elements, want 2", m)
		}
		for j := 0; err == nil && j < 2; j++ {
			out[i][j], err = r.ReadIntN()
		}
		if err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
	}
	return out, nil
}

func appendItems(b []byte, items []MultimodalDataItem) []byte {
	b = msgpack.AppendArrayHeader(b, len(items))
	for _, it := range items {
		b = appendItem(b, it)
	}
	return b
}

func (r *reader) readItems() ([]MultimodalDataItem, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	items := make([]MultimodalDataItem, n)
	for i := range items {
		if items[i], err = r.readItem(); err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
	}
	return items, nil
}

func appendMultimodalInputs(b []byte, m MultimodalInputs) []byte {
	b = msgpack.AppendArrayHeader(b, len(mmInputFields))
	b = appendItems(b, m.Items)
	b = msgpack.AppendOptInt(b, m.ImTokenID)
	b = msgpack.AppendOptInt(b, m.VideoTokenID)
	b = msgpack.AppendRaw(b, m.MropePositions)
	b = msgpack.AppendRaw(b, m.MropePositionDelta)
	b = msgpack.AppendRaw(b, m.MropePositionDeltaScalar)
	return msgpack.AppendRaw(b, m.MropePositionDeltaRepeatedCache)
}

func (r *reader) readMultimodalInputs() (MultimodalInputs, error) {
	var m MultimodalInputs
	n, err := r.ReadArrayLen()
	if err != nil {
		return m, err
	}
	for i := 0; i < n; i++ {
		var err error
		switch i {
		case 0:
			m.Items, err = r.readItems()
		case 1:
			m.ImTokenID, err = r.ReadOptInt()
		case 2:
			m.VideoTokenID, err = r.ReadOptInt()
		case 3:
			m.MropePositions, err = r.ReadRaw()
		case 4:
			m.MropePositionDelta, err = r.ReadRaw()
		case 5:
			m.MropePositionDeltaScalar, err = r.ReadRaw()
		case 6:
			m.MropePositionDeltaRepeatedCache, err = r.ReadRaw()
		default:
			err = r.Skip()
		}
		if err != nil {
			return m, msgpack.At(msgpack.Field(i, fieldName(mmInputFields[:], i)), err)
		}
	}
	return m, nil
}

// EncodeEncodeRequest writes the tagged EncodeRequest payload.
func EncodeEncodeRequest(e EncodeRequest) ([]byte, error) {
	if err := checkItemRaws(e.Items); err != nil {
		return nil, fmt.Errorf("encode %s: %w", TagEncodeRequest, err)
	}
	b := make([]byte, 0, 128)
	b = msgpack.AppendArrayHeader(b, len(encodeReqField))
	b = msgpack.AppendStr(b, TagEncodeRequest)
	b = msgpack.AppendStr(b, e.RID)
	b = msgpack.AppendOptStr(b, e.HTTPWorkerIPC)
	b = msgpack.AppendOptStr(b, e.RequestID)
	b = msgpack.AppendOptStr(b, e.BootstrapHost)
	b = msgpack.AppendOptInt(b, e.BootstrapPort)
	if e.BootstrapRoom == nil {
		b = msgpack.AppendNil(b)
	} else {
		b = msgpack.AppendUint(b, *e.BootstrapRoom)
	}
	if e.Items == nil {
		return msgpack.AppendNil(b), nil
	}
	return appendItems(b, e.Items), nil
}

// DecodeEncodeRequest reads an EncodeRequest; shorter arrays keep nil
// defaults for missing trailing fields, extra elements are skipped.
func DecodeEncodeRequest(b []byte) (EncodeRequest, error) {
	var e EncodeRequest
	r := newReader(b)
	n, err := r.readTag(TagEncodeRequest)
	for i := 1; err == nil && i < n; i++ {
		switch i {
		case 1:
			if !r.NextNil() {
				e.RID, err = r.ReadStr()
			}
		case 2:
			e.HTTPWorkerIPC, err = r.ReadOptStr()
		case 3:
			e.RequestID, err = r.ReadOptStr()
		case 4:
			e.BootstrapHost, err = r.ReadOptStr()
		case 5:
			e.BootstrapPort, err = r.ReadOptInt()
		case 6:
			if !r.NextNil() {
				var v uint64
				v, err = r.ReadUint()
				e.BootstrapRoom = &v
			}
		case 7:
			if !r.NextNil() {
				e.Items, err = r.readItems()
			}
		default:
			err = r.Skip()
		}
		if err != nil {
			err = msgpack.At(msgpack.Field(i, fieldName(encodeReqField[:], i)), err)
		}
	}
	if err == nil {
		err = r.End()
	}
	if err != nil {
		return EncodeRequest{}, msgpack.At(TagEncodeRequest, err)
	}
	return e, nil
}

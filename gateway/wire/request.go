package wire

import (
	"errors"
	"fmt"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// Request-type frames on the input socket (§5.1).
const (
	TypeAdd   byte = 0x00
	TypeAbort byte = 0x01
)

// Tags of the tagged data-plane structs (§4).
const (
	TagGenerateRequest = "TokenizedGenerateReqInput"
	TagOutputSlim      = "BatchTokenIDOutSlim"
	TagOutputFull      = "BatchTokenIDOut"
	TagEncodeRequest   = "EncodeRequest"
)

// Request lengths (array elements including the tag) named by the spec (§5.2).
const (
	RequestLenMin  = 6  // tag .. sampling_params: the shortest valid request
	RequestLenSMG  = 11 // tag .. stream: what SMG sends
	RequestLenPD   = 19 // tag .. bootstrap_room: shortest carrying the PD triple
	RequestLenFull = 24 // every field: TokenSpeed's own encoder
)

// GenerateRequest is the tagged TokenizedGenerateReqInput (§5.2). Build it
// with NewGenerateRequest: the zero value has logprob_start_len 0, not -1.
type GenerateRequest struct {
	RID                  string            // 1 (a nil rid decodes as "")
	HTTPWorkerIPC        *string           // 2
	InputText            *string           // 3
	InputIDs             []int32           // 4; nil vs [] matters
	Sampling             SamplingParams    // 5
	ReturnLogprob        bool              // 6
	LogprobStartLen      int               // 7
	TopLogprobsNum       int               // 8
	TokenIDsLogprob      []int32           // 9
	Stream               bool              // 10
	InputEmbeds          Raw               // 11
	SessionParams        Raw               // 12; see SessionID
	CustomLogitProcessor *string           // 13
	ReturnHiddenStates   bool              // 14
	CreatedTime          float64           // 15
	BootstrapHost        *string           // 16
	BootstrapPort        *int              // 17
	BootstrapRoom        *uint64           // 18
	InputMultiIDs        [][]int32         // 19
	InputExtraInfos      Raw               // 20
	InputIDsUnpadded     []int32           // 21
	MultimodalInputs     *MultimodalInputs // 22
	ValidationError      *string           // 23

	// WireLen is the array length including the tag. Decoding records it;
	// encoding writes exactly that many elements (RequestLenMin..RequestLenFull),
	// or with 0 the shortest length >= RequestLenSMG that drops no field
	// holding a non-default value.
	WireLen int
}

var requestFields = [...]string{"tag", "rid", "http_worker_ipc", "input_text", "input_ids",
	"sampling_params", "return_logprob", "logprob_start_len", "top_logprobs_num",
	"token_ids_logprob", "stream", "input_embeds", "session_params", "custom_logit_processor",
	"return_hidden_states", "created_time", "bootstrap_host", "bootstrap_port", "bootstrap_room",
	"input_multi_ids", "input_extra_infos", "input_ids_unpadded", "multimodal_inputs",
	"validation_error"}

// NewGenerateRequest is a request with the engine's defaults for everything
// but rid, prompt and sampling.
func NewGenerateRequest(rid string, inputIDs []int32, sp SamplingParams) GenerateRequest {
	return GenerateRequest{RID: rid, InputIDs: inputIDs, Sampling: sp, LogprobStartLen: -1}
}

// SetBootstrap fills the PD triple (docs/protocol.md §8.2).
func (q *GenerateRequest) SetBootstrap(host string, port int, room uint64) {
	q.BootstrapHost, q.BootstrapPort, q.BootstrapRoom = &host, &port, &room
}

// SessionID returns session_params' id when it is a non-nil str; the engine
// aborts such requests (sessions do not exist on this lane).
func (q GenerateRequest) SessionID() (string, bool) {
	if q.SessionParams == nil {
		return "", false
	}
	r := newReader(q.SessionParams)
	if n, err := r.ReadArrayLen(); err != nil || n == 0 {
		return "", false
	}
	id, err := r.ReadOptStr()
	if err != nil || id == nil {
		return "", false
	}
	return *id, true
}

// minWireLen is the shortest array that keeps every non-default field.
func (q *GenerateRequest) minWireLen() int {
	set := [...]bool{
		6:  q.ReturnLogprob,
		7:  q.LogprobStartLen != -1,
		8:  q.TopLogprobsNum != 0,
		9:  q.TokenIDsLogprob != nil,
		10: q.Stream,
		11: q.InputEmbeds != nil,
		12: q.SessionParams != nil,
		13: q.CustomLogitProcessor != nil,
		14: q.ReturnHiddenStates,
		15: q.CreatedTime != 0,
		16: q.BootstrapHost != nil,
		17: q.BootstrapPort != nil,
		18: q.BootstrapRoom != nil,
		19: q.InputMultiIDs != nil,
		20: q.InputExtraInfos != nil,
		21: q.InputIDsUnpadded != nil,
		22: q.MultimodalInputs != nil,
		23: q.ValidationError != nil,
	}
	n := RequestLenMin
	for i := RequestLenMin; i < len(set); i++ {
		if set[i] {
			n = i + 1
		}
	}
	return n
}

// checkRaws rejects pass-through fields that are not one valid msgpack
// value: the engine would silently drop the whole request.
func (q *GenerateRequest) checkRaws() error {
	if err := checkRaw("input_embeds", q.InputEmbeds); err != nil {
		return err
	}
	if err := checkRaw("session_params", q.SessionParams); err != nil {
		return err
	}
	if err := checkRaw("input_extra_infos", q.InputExtraInfos); err != nil {
		return err
	}
	if err := checkRaw("sampling_params.custom_params", q.Sampling.CustomParams); err != nil {
		return err
	}
	if q.MultimodalInputs != nil {
		return q.MultimodalInputs.checkRaws()
	}
	return nil
}

// EncodeGenerateRequest writes the ADD payload (the frame after TypeAdd).
func EncodeGenerateRequest(q GenerateRequest) ([]byte, error) {
	return AppendGenerateRequest(make([]byte, 0, 256+5*len(q.InputIDs)), q)
}

// AppendGenerateRequest appends the ADD payload to b.
func AppendGenerateRequest(b []byte, q GenerateRequest) ([]byte, error) {
	n := q.WireLen
	need := q.minWireLen()
	if n == 0 {
		n = max(need, RequestLenSMG)
	}
	if n < RequestLenMin || n > RequestLenFull {
		return b, fmt.Errorf("encode %s: length %d outside %d..%d", TagGenerateRequest, n, RequestLenMin, RequestLenFull)
	}
	if n < need {
		return b, fmt.Errorf("encode %s: length %d would drop %s", TagGenerateRequest, n, requestFields[need-1])
	}
	if err := q.checkRaws(); err != nil {
		return b, fmt.Errorf("encode %s: %w", TagGenerateRequest, err)
	}
	b = msgpack.AppendArrayHeader(b, n)
	b = msgpack.AppendStr(b, TagGenerateRequest)
	b = msgpack.AppendStr(b, q.RID)
	b = msgpack.AppendOptStr(b, q.HTTPWorkerIPC)
	b = msgpack.AppendOptStr(b, q.InputText)
	b = msgpack.AppendOptInt32s(b, q.InputIDs)
	b = appendSampling(b, q.Sampling)
	for i := RequestLenMin; i < n; i++ {
		switch i {
		case 6:
			b = msgpack.AppendBool(b, q.ReturnLogprob)
		case 7:
			b = msgpack.AppendInt(b, int64(q.LogprobStartLen))
		case 8:
			b = msgpack.AppendInt(b, int64(q.TopLogprobsNum))
		case 9:
			b = msgpack.AppendOptInt32s(b, q.TokenIDsLogprob)
		case 10:
			b = msgpack.AppendBool(b, q.Stream)
		case 11:
			b = msgpack.AppendRaw(b, q.InputEmbeds)
		case 12:
			b = msgpack.AppendRaw(b, q.SessionParams)
		case 13:
			b = msgpack.AppendOptStr(b, q.CustomLogitProcessor)
		case 14:
			b = msgpack.AppendBool(b, q.ReturnHiddenStates)
		case 15:
			b = msgpack.AppendFloat(b, q.CreatedTime)
		case 16:
			b = msgpack.AppendOptStr(b, q.BootstrapHost)
		case 17:
			b = msgpack.AppendOptInt(b, q.BootstrapPort)
		case 18:
			if q.BootstrapRoom == nil {
				b = msgpack.AppendNil(b)
			} else {
				b = msgpack.AppendUint(b, *q.BootstrapRoom)
			}
		case 19:
			if q.InputMultiIDs == nil {
				b = msgpack.AppendNil(b)
			} else {
				b = msgpack.AppendArrayHeader(b, len(q.InputMultiIDs))
				for _, ids := range q.InputMultiIDs {
					b = msgpack.AppendOptInt32s(b, ids)
				}
			}
		case 20:
			b = msgpack.AppendRaw(b, q.InputExtraInfos)
		case 21:
			b = msgpack.AppendOptInt32s(b, q.InputIDsUnpadded)
		case 22:
			if q.MultimodalInputs == nil {
				b = msgpack.AppendNil(b)
			} else {
				b = appendMultimodalInputs(b, *q.MultimodalInputs)
			}
		case 23:
			b = msgpack.AppendOptStr(b, q.ValidationError)
		}
	}
	return b, nil
}

// DecodeGenerateRequest reads an ADD payload of any length >= RequestLenMin;
// elements past the known 24 are skipped.
func DecodeGenerateRequest(b []byte) (GenerateRequest, error) {
	q, err := decodeGenerateRequest(b)
	if err != nil {
		return GenerateRequest{}, msgpack.At(TagGenerateRequest, err)
	}
	return q, nil
}

func decodeGenerateRequest(b []byte) (GenerateRequest, error) {
	q := GenerateRequest{LogprobStartLen: -1, Sampling: DefaultSamplingParams()}
	r := newReader(b)
	n, err := r.readTag(TagGenerateRequest)
	if err != nil {
		return q, err
	}
	if n < RequestLenMin {
		return q, fmt.Errorf("array of %d elements, want at least %d (through sampling_params)", n, RequestLenMin)
	}
	q.WireLen = n
	for i := 1; i < n; i++ {
		if err := r.readRequestField(&q, i); err != nil {
			return q, msgpack.At(msgpack.Field(i, fieldName(requestFields[:], i)), err)
		}
	}
	return q, r.End()
}

func (r *reader) readRequestField(q *GenerateRequest, i int) (err error) {
	switch i {
	case 1:
		if !r.NextNil() {
			q.RID, err = r.ReadStr()
		}
	case 2:
		q.HTTPWorkerIPC, err = r.ReadOptStr()
	case 3:
		q.InputText, err = r.ReadOptStr()
	case 4:
		q.InputIDs, err = r.ReadOptInt32s()
	case 5:
		q.Sampling, err = r.readSampling()
	case 6:
		q.ReturnLogprob, err = r.ReadBool()
	case 7:
		q.LogprobStartLen, err = r.ReadIntN()
	case 8:
		q.TopLogprobsNum, err = r.ReadIntN()
	case 9:
		q.TokenIDsLogprob, err = r.ReadOptInt32s()
	case 10:
		q.Stream, err = r.ReadBool()
	case 11:
		q.InputEmbeds, err = r.ReadRaw()
	case 12:
		q.SessionParams, err = r.ReadRaw()
	case 13:
		q.CustomLogitProcessor, err = r.ReadOptStr()
	case 14:
		q.ReturnHiddenStates, err = r.ReadBool()
	case 15:
		q.CreatedTime, err = r.ReadFloat()
	case 16:
		q.BootstrapHost, err = r.ReadOptStr()
	case 17:
		q.BootstrapPort, err = r.ReadOptInt()
	case 18:
		if !r.NextNil() {
			var v uint64
			v, err = r.ReadUint()
			q.BootstrapRoom = &v
		}
	case 19:
		if !r.NextNil() {
			var n int
			if n, err = r.ReadArrayLen(); err != nil {
				return err
			}
			q.InputMultiIDs = make([][]int32, n)
			for j := range q.InputMultiIDs {
				if q.InputMultiIDs[j], err = r.ReadOptInt32s(); err != nil {
					return msgpack.At(msgpack.Index(j), err)
				}
			}
		}
	case 20:
		q.InputExtraInfos, err = r.ReadRaw()
	case 21:
		q.InputIDsUnpadded, err = r.ReadOptInt32s()
	case 22:
		if !r.NextNil() {
			var mm MultimodalInputs
			mm, err = r.readMultimodalInputs()
			q.MultimodalInputs = &mm
		}
	case 23:
		q.ValidationError, err = r.ReadOptStr()
	default:
		err = r.Skip()
	}
	return err
}

// readTag reads a tagged struct's array header and checks its tag; it
// returns the array length including the tag.
func (r *reader) readTag(want string) (int, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errors.New("empty array, want tagged struct")
	}
	// Compared in place: the tag string is only built for the error (one
	// allocation fewer per output message on the token path).
	tag, err := r.ReadStrBytes()
	if err != nil {
		return 0, msgpack.At(msgpack.Field(0, "tag"), err)
	}
	if string(tag) != want {
		return 0, fmt.Errorf("tag %q, want %q", tag, want)
	}
	return n, nil
}

// peekTagIs reports whether the tagged struct payload b has tag want,
// without decoding the rest or allocating.
func peekTagIs(b []byte, want string) (bool, error) {
	var r msgpack.Reader
	r.Reset(b)
	n, err := r.ReadArrayLen()
	if err != nil {
		return false, fmt.Errorf("peek tag: %w", err)
	}
	if n == 0 {
		return false, errors.New("peek tag: empty array")
	}
	tag, err := r.ReadStrBytes()
	if err != nil {
		return false, fmt.Errorf("peek tag: %w", err)
	}
	return string(tag) == want, nil
}

// PeekTag returns the tag of a tagged struct payload without decoding the rest.
func PeekTag(b []byte) (string, error) {
	r := newReader(b)
	n, err := r.ReadArrayLen()
	if err != nil {
		return "", fmt.Errorf("peek tag: %w", err)
	}
	if n == 0 {
		return "", errors.New("peek tag: empty array")
	}
	tag, err := r.ReadStr()
	if err != nil {
		return "", fmt.Errorf("peek tag: %w", err)
	}
	return tag, nil
}

// AbortRequest is the ABORT payload: a plain array of rids (docs/protocol.md §5.6).
type AbortRequest struct {
	RIDs []string
}

// EncodeAbort writes the ABORT payload (the frame after TypeAbort).
func EncodeAbort(a AbortRequest) ([]byte, error) {
	b := make([]byte, 0, 8+24*len(a.RIDs))
	return msgpack.AppendStrs(b, nonNil(a.RIDs)), nil
}

// DecodeAbort reads the ABORT payload.
func DecodeAbort(b []byte) (AbortRequest, error) {
	r := newReader(b)
	n, err := r.ReadArrayLen()
	if err == nil {
		rids := make([]string, n)
		for i := range rids {
			if rids[i], err = r.ReadStr(); err != nil {
				err = msgpack.At(msgpack.Index(i), err)
				break
			}
		}
		if err == nil {
			if err = r.End(); err == nil {
				return AbortRequest{RIDs: rids}, nil
			}
		}
	}
	return AbortRequest{}, msgpack.At("AbortReq", err)
}

// InputMessage is one decoded message of the engine's input DEALER.
type InputMessage struct {
	Type     byte             // TypeAdd or TypeAbort
	Generate *GenerateRequest // TypeAdd
	Abort    *AbortRequest    // TypeAbort
	Aux      [][]byte         // out-of-band tensor buffers after the payload (multimodal)
}

// DecodeInputFrames decodes [type, payload, aux...] as the engine's input
// DEALER receives it (no identity frame). The engine drops what fails here.
func DecodeInputFrames(frames [][]byte) (InputMessage, error) {
	if len(frames) < 2 {
		return InputMessage{}, fmt.Errorf("decode input: %d frames, want at least 2", len(frames))
	}
	if len(frames[0]) != 1 {
		return InputMessage{}, fmt.Errorf("decode input: type frame of %d bytes, want 1", len(frames[0]))
	}
	m := InputMessage{Type: frames[0][0], Aux: frames[2:]}
	switch m.Type {
	case TypeAdd:
		q, err := DecodeGenerateRequest(frames[1])
		if err != nil {
			return InputMessage{}, fmt.Errorf("decode input: %w", err)
		}
		m.Generate = &q
	case TypeAbort:
		a, err := DecodeAbort(frames[1])
		if err != nil {
			return InputMessage{}, fmt.Errorf("decode input: %w", err)
		}
		m.Abort = &a
	default:
		return InputMessage{}, fmt.Errorf("decode input: unknown request type 0x%02x", m.Type)
	}
	return m, nil
}

package wire

import (
	"fmt"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// FinishReason is a full-form finished_reasons entry (§6.3): a map whose
// type is "stop" (matched token id or stop string), "length" (length) or
// "abort" (message, err_type 521/522/523). Only Type survives on the slim wire.
type FinishReason struct {
	Type         string
	MatchedToken *int
	MatchedStr   *string
	Length       *int
	Message      *string
	ErrType      *int
}

// Abort err_type values.
const (
	ErrTypeTransferFailed = 521
	ErrTypeUnknown        = 522
	ErrTypeNumerical      = 523
)

// Slim is the finished_reasons string the slim wire carries; nil is running.
func (f *FinishReason) Slim() string {
	if f == nil {
		return FinishRunning
	}
	return f.Type
}

func appendFinishReason(b []byte, f *FinishReason) []byte {
	if f == nil {
		return msgpack.AppendNil(b)
	}
	n := 1
	for _, set := range []bool{f.MatchedToken != nil || f.MatchedStr != nil, f.Length != nil, f.Message != nil, f.ErrType != nil} {
		if set {
			n++
		}
	}
	b = msgpack.AppendMapHeader(b, n)
	b = msgpack.AppendStr(msgpack.AppendStr(b, "type"), f.Type)
	switch {
	case f.MatchedToken != nil:
		b = msgpack.AppendInt(msgpack.AppendStr(b, "matched"), int64(*f.MatchedToken))
	case f.MatchedStr != nil:
		b = msgpack.AppendStr(msgpack.AppendStr(b, "matched"), *f.MatchedStr)
	}
	if f.Length != nil {
		b = msgpack.AppendInt(msgpack.AppendStr(b, "length"), int64(*f.Length))
	}
	if f.Message != nil {
		b = msgpack.AppendStr(msgpack.AppendStr(b, "message"), *f.Message)
	}
	if f.ErrType != nil {
		b = msgpack.AppendInt(msgpack.AppendStr(b, "err_type"), int64(*f.ErrType))
	}
	return b
}

func (r *reader) readFinishReason() (*FinishReason, error) {
	if r.NextNil() {
		return nil, nil
	}
	f := &FinishReason{}
	err := r.ReadMap(func(k string) (bool, error) {
		var err error
		switch k {
		case "type":
			f.Type, err = r.ReadStr()
		case "matched":
			if r.NextNil() {
				return true, nil
			}
			c, _ := r.Peek()
			if msgpack.Family(c) == "str" {
				f.MatchedStr, err = r.ReadOptStr()
			} else {
				f.MatchedToken, err = r.ReadOptInt()
			}
		case "length":
			f.Length, err = r.ReadOptInt()
		case "message":
			f.Message, err = r.ReadOptStr()
		case "err_type":
			f.ErrType, err = r.ReadOptInt()
		default:
			return false, nil
		}
		return true, err
	})
	return f, err
}

// fullFields names BatchTokenIDOut's 30 fields in declaration order.
var fullFields = [...]string{"rids", "finished_reasons", "decoded_texts", "decode_ids",
	"read_offsets", "output_ids", "output_multi_ids", "skip_special_tokens",
	"spaces_between_special_tokens", "no_stop_trim", "prompt_tokens", "completion_tokens",
	"cached_tokens", "spec_verify_ct", "input_token_logprobs_val", "input_token_logprobs_idx",
	"output_token_logprobs_val", "output_token_logprobs_idx", "input_top_logprobs_val",
	"input_top_logprobs_idx", "output_top_logprobs_val", "output_top_logprobs_idx",
	"input_token_ids_logprobs_val", "input_token_ids_logprobs_idx",
	"output_token_ids_logprobs_val", "output_token_ids_logprobs_idx", "output_hidden_states",
	"batch_accept_draft_tokens", "output_extra_infos", "generated_time"}

// Positions (in fullFields) of the columns FullOutputBatch types.
const (
	fullRIDs             = 0
	fullFinished         = 1
	fullOutputIDs        = 5
	fullPromptTokens     = 10
	fullCompletionTokens = 11
	fullCachedTokens     = 12
	fullLogprobVal       = 16
	fullLogprobIdx       = 17
)

// FullOutputBatch is the in-process BatchTokenIDOut (§6.3, informational:
// it is not sent on the lane). The columns the slim form keeps are typed;
// every other field is kept as a pass-through value in Other, indexed by
// its position in the 30-field declaration (nil: msgpack nil).
type FullOutputBatch struct {
	RIDs                   []string
	FinishedReasons        []*FinishReason
	OutputIDs              [][]int32
	PromptTokens           []int
	CompletionTokens       []int
	CachedTokens           []int
	OutputTokenLogprobsVal [][]float64
	OutputTokenLogprobsIdx [][]int32
	Other                  [len(fullFields)]Raw
}

// Slim reduces the full batch to what the engine's PUSH sends.
func (f FullOutputBatch) Slim(engineIndex int) OutputBatch {
	reasons := make([]string, len(f.FinishedReasons))
	for i, fr := range f.FinishedReasons {
		reasons[i] = fr.Slim()
	}
	return OutputBatch{RIDs: f.RIDs, OutputIDs: f.OutputIDs, FinishedReasons: reasons,
		PromptTokens: f.PromptTokens, CompletionTokens: f.CompletionTokens, CachedTokens: f.CachedTokens,
		OutputTokenLogprobsVal: f.OutputTokenLogprobsVal, OutputTokenLogprobsIdx: f.OutputTokenLogprobsIdx,
		EngineIndex: engineIndex}
}

// EncodeFullOutput writes the tagged 31-element BatchTokenIDOut.
func EncodeFullOutput(f FullOutputBatch) ([]byte, error) {
	for i, raw := range f.Other {
		if err := checkRaw(fullFields[i], raw); err != nil {
			return nil, fmt.Errorf("encode %s: %w", TagOutputFull, err)
		}
	}
	b := make([]byte, 0, 256+64*len(f.RIDs))
	b = msgpack.AppendArrayHeader(b, 1+len(fullFields))
	b = msgpack.AppendStr(b, TagOutputFull)
	for i := range fullFields {
		switch i {
		case fullRIDs:
			b = msgpack.AppendStrs(b, nonNil(f.RIDs))
		case fullFinished:
			b = msgpack.AppendArrayHeader(b, len(f.FinishedReasons))
			for _, fr := range f.FinishedReasons {
				b = appendFinishReason(b, fr)
			}
		case fullOutputIDs:
			b = appendTokenColumn(b, f.OutputIDs)
		case fullPromptTokens:
			b = appendIntColumn(b, f.PromptTokens)
		case fullCompletionTokens:
			b = appendIntColumn(b, f.CompletionTokens)
		case fullCachedTokens:
			b = appendIntColumn(b, f.CachedTokens)
		case fullLogprobVal:
			b = appendFloatColumn(b, f.OutputTokenLogprobsVal)
		case fullLogprobIdx:
			b = appendTokenColumn(b, f.OutputTokenLogprobsIdx)
		default:
			b = msgpack.AppendRaw(b, f.Other[i])
		}
	}
	return b, nil
}

// DecodeFullOutput reads a BatchTokenIDOut; missing trailing fields stay
// empty, extra ones are skipped.
func DecodeFullOutput(b []byte) (FullOutputBatch, error) {
	var f FullOutputBatch
	r := newReader(b)
	n, err := r.readTag(TagOutputFull)
	for i := 1; err == nil && i < n; i++ {
		k := i - 1
		switch k {
		case fullRIDs:
			f.RIDs, err = r.readStrArray()
		case fullFinished:
			var m int
			if m, err = r.ReadArrayLen(); err == nil {
				f.FinishedReasons = make([]*FinishReason, m)
				for j := range f.FinishedReasons {
					if f.FinishedReasons[j], err = r.readFinishReason(); err != nil {
						err = msgpack.At(msgpack.Index(j), err)
						break
					}
				}
			}
		case fullOutputIDs:
			f.OutputIDs, err = r.readTokenColumn()
		case fullPromptTokens:
			f.PromptTokens, err = r.readIntColumn()
		case fullCompletionTokens:
			f.CompletionTokens, err = r.readIntColumn()
		case fullCachedTokens:
			f.CachedTokens, err = r.readIntColumn()
		case fullLogprobVal:
			f.OutputTokenLogprobsVal, err = r.readFloatColumn()
		case fullLogprobIdx:
			f.OutputTokenLogprobsIdx, err = r.readTokenColumn()
		default:
			if k < len(fullFields) {
				f.Other[k], err = r.ReadRaw()
			} else {
				err = r.Skip()
			}
		}
		if err != nil {
			err = msgpack.At(msgpack.Field(i, fieldName(fullFields[:], k)), err)
		}
	}
	if err == nil {
		err = r.End()
	}
	if err != nil {
		return FullOutputBatch{}, msgpack.At(TagOutputFull, err)
	}
	return f, nil
}

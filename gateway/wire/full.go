package wire

import (
	"fmt"
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
		return appendNil(b)
	}
	n := 1
	for _, set := range []bool{f.MatchedToken != nil || f.MatchedStr != nil, f.Length != nil, f.Message != nil, f.ErrType != nil} {
		if set {
			n++
		}
	}
	b = appendMapHeader(b, n)
	b = appendStr(appendStr(b, "type"), f.Type)
	switch {
	case f.MatchedToken != nil:
		b = appendInt(appendStr(b, "matched"), int64(*f.MatchedToken))
	case f.MatchedStr != nil:
		b = appendStr(appendStr(b, "matched"), *f.MatchedStr)
	}
	if f.Length != nil {
		b = appendInt(appendStr(b, "length"), int64(*f.Length))
	}
	if f.Message != nil {
		b = appendStr(appendStr(b, "message"), *f.Message)
	}
	if f.ErrType != nil {
		b = appendInt(appendStr(b, "err_type"), int64(*f.ErrType))
	}
	return b
}

func (r *reader) readFinishReason() (*FinishReason, error) {
	if r.nextNil() {
		return nil, nil
	}
	f := &FinishReason{}
	err := r.readMap(func(k string) (bool, error) {
		var err error
		switch k {
		case "type":
			f.Type, err = r.readStr()
		case "matched":
			if r.nextNil() {
				return true, nil
			}
			c, _ := r.peek()
			if family(c) == "str" {
				f.MatchedStr, err = r.readOptStr()
			} else {
				f.MatchedToken, err = r.readOptInt()
			}
		case "length":
			f.Length, err = r.readOptInt()
		case "message":
			f.Message, err = r.readOptStr()
		case "err_type":
			f.ErrType, err = r.readOptInt()
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
	b = appendArrayHeader(b, 1+len(fullFields))
	b = appendStr(b, TagOutputFull)
	for i := range fullFields {
		switch i {
		case fullRIDs:
			b = appendStrs(b, nonNil(f.RIDs))
		case fullFinished:
			b = appendArrayHeader(b, len(f.FinishedReasons))
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
			b = appendRaw(b, f.Other[i])
		}
	}
	return b, nil
}

// DecodeFullOutput reads a BatchTokenIDOut; missing trailing fields stay
// empty, extra ones are skipped.
func DecodeFullOutput(b []byte) (FullOutputBatch, error) {
	var f FullOutputBatch
	r := &reader{b: b}
	n, err := r.readTag(TagOutputFull)
	for i := 1; err == nil && i < n; i++ {
		k := i - 1
		switch k {
		case fullRIDs:
			f.RIDs, err = r.readStrArray()
		case fullFinished:
			var m int
			if m, err = r.readArrayLen(); err == nil {
				f.FinishedReasons = make([]*FinishReason, m)
				for j := range f.FinishedReasons {
					if f.FinishedReasons[j], err = r.readFinishReason(); err != nil {
						err = at(index(j), err)
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
				f.Other[k], err = r.readRaw()
			} else {
				err = r.skip()
			}
		}
		if err != nil {
			name := "extra"
			if k < len(fullFields) {
				name = fullFields[k]
			}
			err = at(field(i, name), err)
		}
	}
	if err == nil {
		err = r.end()
	}
	if err != nil {
		return FullOutputBatch{}, at(TagOutputFull, err)
	}
	return f, nil
}

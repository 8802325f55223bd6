package wire

import (
	"fmt"
	"math"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// Prompt (input) logprobs are tsd's design on this lane (docs/protocol.md §6.6
// says upstream has none): a prefill engine asked for them (return_logprob
// with logprob_start_len >= 0) answers with its terminal message in the
// full BatchTokenIDOut variant, whose input_token_logprobs_val/idx columns
// hold the prompt tokens' logprobs from logprob_start_len on. A value the
// engine has no logprob for (the first prompt token; Python None) is
// msgpack nil on the wire and NaN here.

// Positions of the input-logprob columns in the 30-field declaration.
const (
	fullInputLogprobVal = 14
	fullInputLogprobIdx = 15
)

// SetInputLogprobs stores the input-logprob columns (one list per rid;
// NaN encodes as nil) in f.Other.
func (f *FullOutputBatch) SetInputLogprobs(vals [][]float64, idx [][]int32) {
	b := msgpack.AppendArrayHeader(nil, len(vals))
	for _, vs := range vals {
		b = msgpack.AppendArrayHeader(b, len(vs))
		for _, v := range vs {
			if math.IsNaN(v) {
				b = msgpack.AppendNil(b)
			} else {
				b = msgpack.AppendFloat(b, v)
			}
		}
	}
	f.Other[fullInputLogprobVal] = b
	f.Other[fullInputLogprobIdx] = appendTokenColumn(nil, idx)
}

// InputLogprobs reads the input-logprob columns back. Absent or nil
// columns give nil slices; a column that is present must have one entry
// per rid. Entries may be nil (no logprobs for that rid) or hold nil
// values (NaN).
func (f *FullOutputBatch) InputLogprobs() (vals [][]float64, idx [][]int32, err error) {
	if vals, err = readNullableFloatColumn(f.Other[fullInputLogprobVal]); err != nil {
		return nil, nil, fmt.Errorf("input_token_logprobs_val: %w", err)
	}
	if idx, err = readNullableTokenColumn(f.Other[fullInputLogprobIdx]); err != nil {
		return nil, nil, fmt.Errorf("input_token_logprobs_idx: %w", err)
	}
	for name, n := range map[string]int{"input_token_logprobs_val": len(vals), "input_token_logprobs_idx": len(idx)} {
		if n != 0 && n != len(f.RIDs) {
			return nil, nil, fmt.Errorf("%s has %d entries for %d rids", name, n, len(f.RIDs))
		}
	}
	return vals, idx, nil
}

// readNullableColumn reads a column of per-rid lists where the column, or
// any rid's entry, may be nil; row reads one non-nil entry.
func readNullableColumn[T any](raw Raw, row func(*reader) (T, error)) ([]T, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	r := newReader(raw)
	if r.NextNil() {
		return nil, nil
	}
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	col := make([]T, n)
	for i := range col {
		if r.NextNil() {
			continue
		}
		if col[i], err = row(r); err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
	}
	return col, r.End()
}

// readNullableFloatColumn: nil values inside an entry become NaN.
func readNullableFloatColumn(raw Raw) ([][]float64, error) {
	return readNullableColumn(raw, func(r *reader) ([]float64, error) {
		m, err := r.ReadArrayLen()
		if err != nil {
			return nil, err
		}
		vs := make([]float64, m)
		for j := range vs {
			if r.NextNil() {
				vs[j] = math.NaN()
				continue
			}
			if vs[j], err = r.ReadFloat(); err != nil {
				return nil, msgpack.At(msgpack.Index(j), err)
			}
		}
		return vs, nil
	})
}

func readNullableTokenColumn(raw Raw) ([][]int32, error) {
	return readNullableColumn(raw, (*reader).ReadOptInt32s)
}

// AnyOutput is one decoded output message in either variant. Batch is the
// slim view (a full batch reduced with Slim); Full is set only for the
// full variant, which carries what the slim form drops (abort messages,
// input logprobs).
type AnyOutput struct {
	Batch OutputBatch
	Full  *FullOutputBatch

	// The top-logprob columns, decoded once by DecodeAnyOutput.
	topRead bool
	topVal  [][][]float64
	topIdx  [][][]int32
}

// PromptLogprobs returns rid i's input logprobs when the message carried
// them (ok=false: none, e.g. the slim variant).
func (a AnyOutput) PromptLogprobs(i int) (vals []float64, ids []int32, ok bool, err error) {
	if a.Full == nil {
		return nil, nil, false, nil
	}
	v, x, err := a.Full.InputLogprobs()
	if err != nil || i >= len(v) || i >= len(x) || v[i] == nil {
		return nil, nil, false, err
	}
	if len(v[i]) != len(x[i]) {
		return nil, nil, false, fmt.Errorf("input logprobs of %s: %d values for %d tokens", a.Full.RIDs[i], len(v[i]), len(x[i]))
	}
	return v[i], x[i], true, nil
}

// AbortMessage is rid i's abort message in the full variant ("" otherwise).
func (a AnyOutput) AbortMessage(i int) string {
	if a.Full == nil || i >= len(a.Full.FinishedReasons) {
		return ""
	}
	if f := a.Full.FinishedReasons[i]; f != nil && f.Message != nil {
		return *f.Message
	}
	return ""
}

// DecodeAnyOutput decodes one output batch frame (not the sentinel) in
// either variant, by its tag: the slim BatchTokenIDOutSlim every engine
// sends, or the full BatchTokenIDOut an engine sends for prompt or top-k
// logprobs (tsd's design).
func DecodeAnyOutput(frame []byte) (AnyOutput, error) {
	full, err := peekTagIs(frame, TagOutputFull)
	if err != nil {
		return AnyOutput{}, fmt.Errorf("decode output: %w", err)
	}
	if !full {
		o, err := DecodeOutput(frame)
		if err != nil {
			return AnyOutput{}, fmt.Errorf("decode output: %w", err)
		}
		return AnyOutput{Batch: o}, nil
	}
	f, err := DecodeFullOutput(frame)
	if err != nil {
		return AnyOutput{}, fmt.Errorf("decode output: %w", err)
	}
	// The full variant has no engine_index; it arrives from one rank's PUSH
	// and routing is by rid anyway (§6.2).
	o := f.Slim(0)
	if err := o.check(); err != nil {
		return AnyOutput{}, fmt.Errorf("decode output: %s: %w", TagOutputFull, err)
	}
	if _, _, err := f.InputLogprobs(); err != nil {
		return AnyOutput{}, fmt.Errorf("decode output: %s: %w", TagOutputFull, err)
	}
	a := AnyOutput{Batch: o, Full: &f, topRead: true}
	if a.topVal, a.topIdx, err = f.OutputTopLogprobs(); err != nil {
		return AnyOutput{}, fmt.Errorf("decode output: %s: %w", TagOutputFull, err)
	}
	for i := range f.RIDs {
		if _, _, _, err := a.TopLogprobs(i); err != nil {
			return AnyOutput{}, fmt.Errorf("decode output: %s: %w", TagOutputFull, err)
		}
	}
	return a, nil
}

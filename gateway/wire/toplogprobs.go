package wire

import (
	"fmt"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// Top-k output logprobs are tsd's design on this lane (docs/protocol.md
// §6.7): the request field exists upstream (top_logprobs_num, index 8 of
// TokenizedGenerateReqInput) but the slim output has no columns for the
// answer. The full BatchTokenIDOut has them, under upstream's own names and
// shapes, so an engine asked for them (return_logprob with
// top_logprobs_num = k > 0) sends every output message that carries such
// a rid in the full variant: output_top_logprobs_val / _idx (positions 20
// and 21 of the 30 fields) hold, per rid, one list per new token of that
// step (parallel to output_ids) of its k most likely alternatives, values
// and token ids, most likely first; [] for a rid that did not ask.

// Positions of the top-logprob columns in the 30-field declaration.
const (
	fullOutputTopVal = 20
	fullOutputTopIdx = 21
)

// SetOutputTopLogprobs stores the top-logprob columns (one entry per rid:
// a list per token of its alternatives) in f.Other.
func (f *FullOutputBatch) SetOutputTopLogprobs(vals [][][]float64, idx [][][]int32) {
	b := msgpack.AppendArrayHeader(nil, len(vals))
	for _, rid := range vals {
		b = appendFloatColumn(b, rid)
	}
	f.Other[fullOutputTopVal] = b
	b = msgpack.AppendArrayHeader(nil, len(idx))
	for _, rid := range idx {
		b = appendTokenColumn(b, rid)
	}
	f.Other[fullOutputTopIdx] = b
}

// OutputTopLogprobs reads the top-logprob columns back: absent or nil
// columns give nil; a column that is present has one entry per rid, and a
// rid's values and ids agree token by token.
func (f *FullOutputBatch) OutputTopLogprobs() (vals [][][]float64, idx [][][]int32, err error) {
	if vals, err = readNullableColumn(f.Other[fullOutputTopVal], (*reader).readFloatColumn); err != nil {
		return nil, nil, fmt.Errorf("output_top_logprobs_val: %w", err)
	}
	if idx, err = readNullableColumn(f.Other[fullOutputTopIdx], (*reader).readTokenColumn); err != nil {
		return nil, nil, fmt.Errorf("output_top_logprobs_idx: %w", err)
	}
	for _, c := range []struct {
		name string
		n    int
	}{{"output_top_logprobs_val", len(vals)}, {"output_top_logprobs_idx", len(idx)}} {
		if c.n != 0 && c.n != len(f.RIDs) {
			return nil, nil, fmt.Errorf("%s has %d entries for %d rids", c.name, c.n, len(f.RIDs))
		}
	}
	if (vals == nil) != (idx == nil) {
		return nil, nil, fmt.Errorf("output_top_logprobs_val and _idx: one is missing")
	}
	for i := range vals {
		if len(vals[i]) != len(idx[i]) {
			return nil, nil, fmt.Errorf("top logprobs of %s: %d tokens of values, %d of ids", f.RIDs[i], len(vals[i]), len(idx[i]))
		}
		for t := range vals[i] {
			if len(vals[i][t]) != len(idx[i][t]) {
				return nil, nil, fmt.Errorf("top logprobs of %s, token %d: %d values for %d ids", f.RIDs[i], t, len(vals[i][t]), len(idx[i][t]))
			}
		}
	}
	return vals, idx, nil
}

// TopLogprobs returns rid i's top logprobs when the message carried them
// (ok=false: none, e.g. the slim variant or a rid that did not ask): one
// list of alternatives per token of the rid's output_ids in this message.
func (a AnyOutput) TopLogprobs(i int) (vals [][]float64, ids [][]int32, ok bool, err error) {
	if a.Full == nil {
		return nil, nil, false, nil
	}
	v, x := a.topVal, a.topIdx
	if !a.topRead {
		if v, x, err = a.Full.OutputTopLogprobs(); err != nil {
			return nil, nil, false, err
		}
	}
	if i >= len(v) || len(v[i]) == 0 {
		return nil, nil, false, err
	}
	if i < len(a.Batch.OutputIDs) && len(v[i]) != len(a.Batch.OutputIDs[i]) {
		return nil, nil, false, fmt.Errorf("top logprobs of %s: %d tokens for %d output ids", a.Full.RIDs[i], len(v[i]), len(a.Batch.OutputIDs[i]))
	}
	return v[i], x[i], true, nil
}

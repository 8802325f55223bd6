package wire

import (
	"fmt"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// OutputView is a slim output batch decoded in place: RIDs point into
// the frame, the other columns into the decoder's reused buffers. It is
// valid until the decoder's next Decode, and only while the frame's bytes
// are unchanged; a caller that keeps anything copies it.
type OutputView struct {
	RIDs                   [][]byte
	OutputIDs              [][]int32
	FinishedReasons        []string // the Finish constants; other text is copied
	PromptTokens           []int
	CompletionTokens       []int
	CachedTokens           []int
	OutputTokenLogprobsVal [][]float64
	OutputTokenLogprobsIdx [][]int32
	EngineIndex            int
}

// OutputDecoder decodes slim output batches without allocating once its
// buffers have grown to the batches it sees: the lane's read loop owns
// one per connection, so the token path costs no allocation per message
// (DecodeOutput's few per message are one per token at one rid a step).
// The zero value is ready; it is not safe for concurrent use.
type OutputDecoder struct {
	v      OutputView
	ends   []int // per rid, where its tokens end in tokens
	tokens []int32
	iends  []int // the same for output_token_logprobs_idx
	idx    []int32
	fends  []int
	floats []float64
	ints   []int
}

// IsSlim reports whether frame is tagged as the slim variant (the full
// one goes to DecodeAnyOutput).
func IsSlim(frame []byte) bool {
	full, err := peekTagIs(frame, TagOutputFull)
	return err == nil && !full
}

// Decode reads a slim batch with DecodeOutput's rules (9 or more
// elements, a ragged batch rejected whole) into the decoder's view.
func (d *OutputDecoder) Decode(b []byte) (*OutputView, error) {
	if err := d.decode(b); err != nil {
		return nil, msgpack.At(TagOutputSlim, err)
	}
	return &d.v, nil
}

func (d *OutputDecoder) decode(b []byte) error {
	v := &d.v
	*v = OutputView{RIDs: v.RIDs[:0], OutputIDs: v.OutputIDs[:0], FinishedReasons: v.FinishedReasons[:0],
		OutputTokenLogprobsVal: v.OutputTokenLogprobsVal[:0], OutputTokenLogprobsIdx: v.OutputTokenLogprobsIdx[:0]}
	d.ints = d.ints[:0]
	r := newReader(b)
	n, err := r.readTag(TagOutputSlim)
	if err != nil {
		return err
	}
	if n < OutputLenLegacy {
		return fmt.Errorf("array of %d elements, want at least %d", n, OutputLenLegacy)
	}
	nRIDs, nIDs, nReasons, nLP, nLPIdx := 0, 0, 0, 0, 0
	var counts [3]int
	for i := 1; i < n; i++ {
		var err error
		switch i {
		case 1:
			nRIDs, err = d.readRIDs(r)
		case 2:
			nIDs, err = readTokenCol(r, &d.ends, &d.tokens, &d.v.OutputIDs)
		case 3:
			nReasons, err = d.readReasons(r)
		case 4, 5, 6:
			counts[i-4], err = d.readInts(r)
		case 7:
			nLP, err = d.readFloats(r)
		case 8:
			nLPIdx, err = readTokenCol(r, &d.iends, &d.idx, &d.v.OutputTokenLogprobsIdx)
		case 9:
			v.EngineIndex, err = r.ReadIntN()
		default:
			err = r.Skip()
		}
		if err != nil {
			return msgpack.At(msgpack.Field(i, fieldName(outputFields[:], i)), err)
		}
	}
	if err := r.End(); err != nil {
		return err
	}
	for i, l := range [...]int{2: nIDs, nReasons, counts[0], counts[1], counts[2]} {
		if i >= 2 && l != nRIDs {
			return fmt.Errorf("%s has %d entries for %d rids", outputFields[i], l, nRIDs)
		}
	}
	for i, l := range [...]int{7: nLP, nLPIdx} {
		if i >= 7 && l != 0 && l != nRIDs {
			return fmt.Errorf("%s has %d entries for %d rids", outputFields[i], l, nRIDs)
		}
	}
	// The count columns are carved only now: d.ints may have moved while
	// they were read.
	v.PromptTokens = d.ints[0:nRIDs:nRIDs]
	v.CompletionTokens = d.ints[nRIDs : 2*nRIDs : 2*nRIDs]
	v.CachedTokens = d.ints[2*nRIDs : 3*nRIDs : 3*nRIDs]
	return nil
}

func (d *OutputDecoder) readRIDs(r *reader) (int, error) {
	if r.NextNil() {
		return 0, msgpack.TypeError{Want: "array", Got: "nil"}
	}
	n, err := r.ReadArrayLen()
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		rid, err := r.ReadStrBytes()
		if err != nil {
			return 0, msgpack.At(msgpack.Index(i), err)
		}
		d.v.RIDs = append(d.v.RIDs, rid)
	}
	return n, nil
}

// readTokenCol reads an int array column into the reused *tokens; the
// per-rid slices are carved once the column is whole (appends may move
// it while it is read).
func readTokenCol(r *reader, ends *[]int, tokens *[]int32, col *[][]int32) (int, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return 0, err
	}
	e, toks := (*ends)[:0], (*tokens)[:0]
	defer func() { *ends, *tokens = e, toks }()
	for i := 0; i < n; i++ {
		if r.NextNil() {
			return 0, msgpack.At(msgpack.Index(i), msgpack.TypeError{Want: "array", Got: "nil"})
		}
		m, err := r.ReadArrayLen()
		if err != nil {
			return 0, msgpack.At(msgpack.Index(i), err)
		}
		for j := 0; j < m; j++ {
			t, err := r.ReadInt32()
			if err != nil {
				return 0, msgpack.At(msgpack.Index(i)+msgpack.Index(j), err)
			}
			toks = append(toks, t)
		}
		e = append(e, len(toks))
	}
	lo := 0
	for _, hi := range e {
		*col = append(*col, toks[lo:hi:hi])
		lo = hi
	}
	return n, nil
}

func (d *OutputDecoder) readReasons(r *reader) (int, error) {
	if r.NextNil() {
		return 0, msgpack.TypeError{Want: "array", Got: "nil"}
	}
	n, err := r.ReadArrayLen()
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		reason, err := r.ReadStrBytes()
		if err != nil {
			return 0, msgpack.At(msgpack.Index(i), err)
		}
		d.v.FinishedReasons = append(d.v.FinishedReasons, finishConst(reason))
	}
	return n, nil
}

// finishConst is a finish reason as its constant; only text no engine
// sends today is copied.
func finishConst(b []byte) string {
	switch string(b) {
	case FinishRunning:
		return FinishRunning
	case FinishStop:
		return FinishStop
	case FinishLength:
		return FinishLength
	case FinishAbort:
		return FinishAbort
	case FinishError:
		return FinishError
	}
	return string(b)
}

func (d *OutputDecoder) readInts(r *reader) (int, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		v, err := r.ReadIntN()
		if err != nil {
			return 0, msgpack.At(msgpack.Index(i), err)
		}
		d.ints = append(d.ints, v)
	}
	return n, nil
}

func (d *OutputDecoder) readFloats(r *reader) (int, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return 0, err
	}
	d.fends, d.floats = d.fends[:0], d.floats[:0]
	for i := 0; i < n; i++ {
		m, err := r.ReadArrayLen()
		if err != nil {
			return 0, msgpack.At(msgpack.Index(i), err)
		}
		for j := 0; j < m; j++ {
			f, err := r.ReadFloat()
			if err != nil {
				return 0, msgpack.At(msgpack.Index(i)+msgpack.Index(j), err)
			}
			d.floats = append(d.floats, f)
		}
		d.fends = append(d.fends, len(d.floats))
	}
	lo := 0
	for _, hi := range d.fends {
		d.v.OutputTokenLogprobsVal = append(d.v.OutputTokenLogprobsVal, d.floats[lo:hi:hi])
		lo = hi
	}
	return n, nil
}

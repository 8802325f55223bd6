package wire

import (
	"fmt"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// Slim finished_reasons strings (§6.2, §6.3).
const (
	FinishRunning = ""
	FinishStop    = "stop"
	FinishLength  = "length"
	FinishAbort   = "abort"
	FinishError   = "error" // not sent by TokenSpeed; SMG maps it to an internal error
)

// ClassifyFinish interprets a slim finished_reasons entry the way SMG
// does: "" is running; unknown strings count as "stop" with known=false so
// the caller can warn.
func ClassifyFinish(s string) (reason string, finished, known bool) {
	switch s {
	case FinishRunning:
		return s, false, true
	case FinishStop, FinishLength, FinishAbort, FinishError:
		return s, true, true
	}
	return FinishStop, true, false
}

// Output batch lengths including the tag.
const (
	OutputLen       = 10 // with engine_index (engines since 2026-08-12)
	OutputLenLegacy = 9  // without engine_index: treat as 0
)

// OutputBatch is the slim BatchTokenIDOutSlim (§6.2). All columns are
// parallel to RIDs; the logprob columns may also be empty when no request
// of the batch asked for logprobs.
type OutputBatch struct {
	RIDs                   []string
	OutputIDs              [][]int32 // new tokens since the rid's previous message
	FinishedReasons        []string  // FinishRunning until the terminal message
	PromptTokens           []int
	CompletionTokens       []int // cumulative
	CachedTokens           []int // cumulative
	OutputTokenLogprobsVal [][]float64
	OutputTokenLogprobsIdx [][]int32
	EngineIndex            int

	// WireLen is OutputLen or OutputLenLegacy as decoded; 0 encodes OutputLen.
	WireLen int
}

var outputFields = [...]string{"tag", "rids", "output_ids", "finished_reasons", "prompt_tokens",
	"completion_tokens", "cached_tokens", "output_token_logprobs_val", "output_token_logprobs_idx",
	"engine_index"}

// check enforces the column rule: a ragged batch is a protocol error.
func (o *OutputBatch) check() error {
	n := len(o.RIDs)
	for i, l := range [...]int{2: len(o.OutputIDs), len(o.FinishedReasons), len(o.PromptTokens),
		len(o.CompletionTokens), len(o.CachedTokens)} {
		if i >= 2 && l != n {
			return fmt.Errorf("%s has %d entries for %d rids", outputFields[i], l, n)
		}
	}
	for i, l := range [...]int{7: len(o.OutputTokenLogprobsVal), len(o.OutputTokenLogprobsIdx)} {
		if i >= 7 && l != n && l != 0 {
			return fmt.Errorf("%s has %d entries for %d rids", outputFields[i], l, n)
		}
	}
	return nil
}

// EncodeOutput writes a slim batch as the engine's PUSH sends it.
func EncodeOutput(o OutputBatch) ([]byte, error) {
	return AppendOutput(make([]byte, 0, 64+48*len(o.RIDs)), o)
}

// AppendOutput appends a slim batch to b.
func AppendOutput(b []byte, o OutputBatch) ([]byte, error) {
	n := o.WireLen
	if n == 0 {
		n = OutputLen
	}
	if n != OutputLen && n != OutputLenLegacy {
		return b, fmt.Errorf("encode %s: length %d, want %d or %d", TagOutputSlim, n, OutputLen, OutputLenLegacy)
	}
	if n == OutputLenLegacy && o.EngineIndex != 0 {
		return b, fmt.Errorf("encode %s: legacy form cannot carry engine_index %d", TagOutputSlim, o.EngineIndex)
	}
	if err := o.check(); err != nil {
		return b, fmt.Errorf("encode %s: %w", TagOutputSlim, err)
	}
	b = msgpack.AppendArrayHeader(b, n)
	b = msgpack.AppendStr(b, TagOutputSlim)
	b = msgpack.AppendStrs(b, nonNil(o.RIDs))
	b = appendTokenColumn(b, o.OutputIDs)
	b = msgpack.AppendStrs(b, nonNil(o.FinishedReasons))
	b = appendIntColumn(b, o.PromptTokens)
	b = appendIntColumn(b, o.CompletionTokens)
	b = appendIntColumn(b, o.CachedTokens)
	b = appendFloatColumn(b, o.OutputTokenLogprobsVal)
	b = appendTokenColumn(b, o.OutputTokenLogprobsIdx)
	if n == OutputLen {
		b = msgpack.AppendInt(b, int64(o.EngineIndex))
	}
	return b, nil
}

func appendTokenColumn(b []byte, col [][]int32) []byte {
	b = msgpack.AppendArrayHeader(b, len(col))
	for _, ids := range col {
		if ids == nil {
			ids = []int32{}
		}
		b = msgpack.AppendOptInt32s(b, ids)
	}
	return b
}

func appendIntColumn(b []byte, col []int) []byte {
	b = msgpack.AppendArrayHeader(b, len(col))
	for _, v := range col {
		b = msgpack.AppendInt(b, int64(v))
	}
	return b
}

func appendFloatColumn(b []byte, col [][]float64) []byte {
	b = msgpack.AppendArrayHeader(b, len(col))
	for _, vs := range col {
		b = msgpack.AppendArrayHeader(b, len(vs))
		for _, v := range vs {
			b = msgpack.AppendFloat(b, v)
		}
	}
	return b
}

// readTokenColumn reads an array of int arrays. Inner slices are carved
// from shared backing arrays (full slice expressions keep appends apart),
// so a batch costs a few allocations rather than one per rid.
func (r *reader) readTokenColumn() ([][]int32, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	col := make([][]int32, n)
	var backing []int32
	for i := range col {
		if r.NextNil() {
			return nil, msgpack.At(msgpack.Index(i), msgpack.TypeError{Want: "array", Got: "nil"})
		}
		m, err := r.ReadArrayLen()
		if err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
		if cap(backing)-len(backing) < m || backing == nil {
			// At least a token for each rid still to read (a decode
			// step's shape): one allocation for the whole column.
			backing = make([]int32, 0, max(m, 2*cap(backing), n-i, 64))
		}
		lo := len(backing)
		for j := 0; j < m; j++ {
			v, err := r.ReadInt32()
			if err != nil {
				return nil, msgpack.At(msgpack.Index(i)+msgpack.Index(j), err)
			}
			backing = append(backing, v)
		}
		col[i] = backing[lo:len(backing):len(backing)]
	}
	return col, nil
}

func (r *reader) readIntColumn() ([]int, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	col := make([]int, n)
	for i := range col {
		if col[i], err = r.ReadIntN(); err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
	}
	return col, nil
}

func (r *reader) readFloatColumn() ([][]float64, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	col := make([][]float64, n)
	var backing []float64
	for i := range col {
		m, err := r.ReadArrayLen()
		if err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
		if cap(backing)-len(backing) < m || backing == nil {
			backing = make([]float64, 0, max(m, 2*cap(backing), 64))
		}
		lo := len(backing)
		for j := 0; j < m; j++ {
			v, err := r.ReadFloat()
			if err != nil {
				return nil, msgpack.At(msgpack.Index(i)+msgpack.Index(j), err)
			}
			backing = append(backing, v)
		}
		col[i] = backing[lo:len(backing):len(backing)]
	}
	return col, nil
}

// DecodeOutput reads a slim batch of 9 (legacy, engine_index 0) or more
// elements; extra trailing elements are skipped.
func DecodeOutput(b []byte) (OutputBatch, error) {
	o, err := decodeOutput(b)
	if err != nil {
		return OutputBatch{}, msgpack.At(TagOutputSlim, err)
	}
	return o, nil
}

func decodeOutput(b []byte) (OutputBatch, error) {
	var o OutputBatch
	r := newReader(b)
	n, err := r.readTag(TagOutputSlim)
	if err != nil {
		return o, err
	}
	if n < OutputLenLegacy {
		return o, fmt.Errorf("array of %d elements, want at least %d", n, OutputLenLegacy)
	}
	o.WireLen = n
	var ints []int
	for i := 1; i < n; i++ {
		var err error
		switch i {
		case 1:
			o.RIDs, err = r.readStrArray()
		case 2:
			o.OutputIDs, err = r.readTokenColumn()
		case 3:
			o.FinishedReasons, err = r.readReasons()
		case 4, 5, 6:
			// The three count columns share one backing array (one
			// allocation per message, not three).
			var col []int
			if col, err = r.readIntColumnInto(&ints); err == nil {
				switch i {
				case 4:
					o.PromptTokens = col
				case 5:
					o.CompletionTokens = col
				default:
					o.CachedTokens = col
				}
			}
		case 7:
			o.OutputTokenLogprobsVal, err = r.readFloatColumn()
		case 8:
			o.OutputTokenLogprobsIdx, err = r.readTokenColumn()
		case 9:
			o.EngineIndex, err = r.ReadIntN()
		default:
			err = r.Skip()
		}
		if err != nil {
			return o, msgpack.At(msgpack.Field(i, fieldName(outputFields[:], i)), err)
		}
	}
	if err := r.End(); err != nil {
		return o, err
	}
	return o, o.check()
}

// readIntColumnInto reads an int column into the free tail of *backing,
// growing it for this and (by a guess of the same length) two more
// columns.
func (r *reader) readIntColumnInto(backing *[]int) ([]int, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	b := *backing
	if cap(b)-len(b) < n {
		b = make([]int, 0, 3*n)
	}
	lo := len(b)
	for i := 0; i < n; i++ {
		v, err := r.ReadIntN()
		if err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
		b = append(b, v)
	}
	*backing = b
	return b[lo:len(b):len(b)], nil
}

// readReasons reads finished_reasons. Nearly every entry is one of the
// known reasons (most "", running); those are the constants, not copies,
// so a message whose reasons are all known allocates only the slice.
func (r *reader) readReasons() ([]string, error) {
	if r.NextNil() {
		return nil, msgpack.TypeError{Want: "array", Got: "nil"}
	}
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	ss := make([]string, n)
	for i := range ss {
		b, err := r.ReadStrBytes()
		if err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
		switch string(b) {
		case FinishRunning:
		case FinishStop:
			ss[i] = FinishStop
		case FinishLength:
			ss[i] = FinishLength
		case FinishAbort:
			ss[i] = FinishAbort
		case FinishError:
			ss[i] = FinishError
		default:
			ss[i] = string(b)
		}
	}
	return ss, nil
}

// readStrArray reads a required array of str (nil is an error).
func (r *reader) readStrArray() ([]string, error) {
	if r.NextNil() {
		return nil, msgpack.TypeError{Want: "array", Got: "nil"}
	}
	return r.ReadOptStrs()
}

// EngineCoreDead is the shutdown sentinel frame (§7.2).
const EngineCoreDead = "ENGINE_CORE_DEAD"

// EncodeShutdownSentinel returns the raw sentinel frame (not msgpack).
func EncodeShutdownSentinel() []byte { return []byte(EngineCoreDead) }

// IsShutdownSentinel reports whether an output frame is the sentinel; check
// it before msgpack decoding.
func IsShutdownSentinel(frame []byte) bool { return string(frame) == EngineCoreDead }

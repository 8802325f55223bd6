package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// A hand-written msgpack subset. The lane is byte-exact against msgspec's
// output (most compact int widths, float64 always, str never bin, nil kept
// distinct from empty, struct-declared key order), which is easier to pin
// down with a few append functions than by configuring a reflective codec.

// Raw is one complete msgpack value kept as bytes, for fields the gateway
// passes through without interpreting. A nil Raw is written as msgpack nil.
type Raw []byte

// --- writer -----------------------------------------------------------------

func appendNil(b []byte) []byte { return append(b, 0xc0) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
	}
}

// appendInt writes non-negative values in the unsigned families, as msgspec
// and rmp-serde do.
func appendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return appendUint(b, uint64(v))
	}
	switch {
	case v >= -32:
		return append(b, byte(int8(v)))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(int8(v)))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(int16(v)))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(int32(v)))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
	}
}

func appendFloat(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(v))
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n <= 31:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

func appendMapHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
}

func appendExt(b []byte, typ int8, data []byte) []byte {
	n := len(data)
	switch n {
	case 1:
		b = append(b, 0xd4, byte(typ))
	case 2:
		b = append(b, 0xd5, byte(typ))
	case 4:
		b = append(b, 0xd6, byte(typ))
	case 8:
		b = append(b, 0xd7, byte(typ))
	case 16:
		b = append(b, 0xd8, byte(typ))
	default:
		switch {
		case n <= math.MaxUint8:
			b = append(b, 0xc7, byte(n), byte(typ))
		case n <= math.MaxUint16:
			b = append(binary.BigEndian.AppendUint16(append(b, 0xc8), uint16(n)), byte(typ))
		default:
			b = append(binary.BigEndian.AppendUint32(append(b, 0xc9), uint32(n)), byte(typ))
		}
	}
	return append(b, data...)
}

func appendOptStr(b []byte, s *string) []byte {
	if s == nil {
		return appendNil(b)
	}
	return appendStr(b, *s)
}

func appendOptInt(b []byte, v *int) []byte {
	if v == nil {
		return appendNil(b)
	}
	return appendInt(b, int64(*v))
}

func appendOptFloat(b []byte, v *float64) []byte {
	if v == nil {
		return appendNil(b)
	}
	return appendFloat(b, *v)
}

// appendRaw writes a pass-through value; nil means msgpack nil.
func appendRaw(b []byte, r Raw) []byte {
	if r == nil {
		return appendNil(b)
	}
	return append(b, r...)
}

// checkRaw verifies that a pass-through field holds exactly one msgpack value.
func checkRaw(name string, v Raw) error {
	if v == nil {
		return nil
	}
	r := &reader{b: v}
	if err := r.skip(); err != nil {
		return fmt.Errorf("%s: invalid msgpack: %w", name, err)
	}
	if err := r.end(); err != nil {
		return fmt.Errorf("%s: invalid msgpack: %w", name, err)
	}
	return nil
}

// appendTokens writes an int array, or nil for a nil slice (empty non-nil
// slices stay empty arrays: the engine treats the two differently).
func appendTokens(b []byte, ids []int32) []byte {
	if ids == nil {
		return appendNil(b)
	}
	b = appendArrayHeader(b, len(ids))
	for _, id := range ids {
		b = appendInt(b, int64(id))
	}
	return b
}

func appendStrs(b []byte, ss []string) []byte {
	if ss == nil {
		return appendNil(b)
	}
	b = appendArrayHeader(b, len(ss))
	for _, s := range ss {
		b = appendStr(b, s)
	}
	return b
}

// --- reader -----------------------------------------------------------------

// errShort is reported when the input ends inside a value.
var errShort = errors.New("unexpected end of input")

// PathError names the field a decoder failed on, e.g.
// "TokenizedGenerateReqInput[5] sampling_params[3] temperature: want float, got str".
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// at prefixes err's path with one more component ("[3] temperature", ".key").
func at(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var pe *PathError
	if errors.As(err, &pe) && pe == err {
		return &PathError{Path: prefix + pe.Path, Err: pe.Err}
	}
	return &PathError{Path: prefix, Err: err}
}

func field(i int, name string) string { return "[" + strconv.Itoa(i) + "] " + name }
func index(i int) string              { return "[" + strconv.Itoa(i) + "]" }

// typeError is a value of the wrong msgpack family.
type typeError struct{ want, got string }

func (e typeError) Error() string { return "want " + e.want + ", got " + e.got }

type reader struct {
	b   []byte
	off int
}

func (r *reader) remaining() int { return len(r.b) - r.off }

// family names the msgpack type of the next value for error messages.
func family(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0:
		return "int"
	case c <= 0x8f:
		return "map"
	case c <= 0x9f:
		return "array"
	case c <= 0xbf:
		return "str"
	}
	switch c {
	case 0xc0:
		return "nil"
	case 0xc2, 0xc3:
		return "bool"
	case 0xc4, 0xc5, 0xc6:
		return "bin"
	case 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return "ext"
	case 0xca, 0xcb:
		return "float"
	case 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3:
		return "int"
	case 0xd9, 0xda, 0xdb:
		return "str"
	case 0xdc, 0xdd:
		return "array"
	case 0xde, 0xdf:
		return "map"
	}
	return "invalid byte 0x" + strconv.FormatUint(uint64(c), 16)
}

func (r *reader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	return r.b[r.off], nil
}

// take returns the next n bytes.
func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, errShort
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *reader) be(n int) (uint64, error) {
	s, err := r.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// nextNil consumes a nil and reports whether there was one.
func (r *reader) nextNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

func (r *reader) readBool() (bool, error) {
	c, err := r.peek()
	if err != nil {
		return false, err
	}
	switch c {
	case 0xc2:
		r.off++
		return false, nil
	case 0xc3:
		r.off++
		return true, nil
	}
	return false, typeError{"bool", family(c)}
}

// readInt reads any int width into an int64.
func (r *reader) readInt() (int64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		r.off++
		return int64(c), nil
	case c >= 0xe0:
		r.off++
		return int64(int8(c)), nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		r.off++
		v, err := r.be(1 << (c - 0xcc))
		if err != nil {
			return 0, err
		}
		if v > math.MaxInt64 {
			return 0, errors.New("int out of range")
		}
		return int64(v), nil
	case 0xd0:
		r.off++
		v, err := r.be(1)
		return int64(int8(v)), err
	case 0xd1:
		r.off++
		v, err := r.be(2)
		return int64(int16(v)), err
	case 0xd2:
		r.off++
		v, err := r.be(4)
		return int64(int32(v)), err
	case 0xd3:
		r.off++
		v, err := r.be(8)
		return int64(v), err
	}
	return 0, typeError{"int", family(c)}
}

// readUint reads a non-negative int of any width into a uint64.
func (r *reader) readUint() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c >= 0xcc && c <= 0xcf {
		r.off++
		return r.be(1 << (c - 0xcc))
	}
	v, err := r.readInt()
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, errors.New("negative int where unsigned expected")
	}
	return uint64(v), nil
}

func (r *reader) readIntN() (int, error) {
	v, err := r.readInt()
	return int(v), err
}

func (r *reader) readInt32() (int32, error) {
	v, err := r.readInt()
	if err != nil {
		return 0, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("int %d out of int32 range", v)
	}
	return int32(v), nil
}

// readFloat accepts float32/float64 and, leniently, ints.
func (r *reader) readFloat() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xcb:
		r.off++
		v, err := r.be(8)
		return math.Float64frombits(v), err
	case 0xca:
		r.off++
		v, err := r.be(4)
		return float64(math.Float32frombits(uint32(v))), err
	}
	if family(c) == "int" {
		v, err := r.readInt()
		return float64(v), err
	}
	return 0, typeError{"float", family(c)}
}

func (r *reader) readStr() (string, error) {
	s, err := r.strSpan()
	if err != nil {
		return "", err
	}
	return string(r.b[s:r.off]), nil
}

// readLen reads an array or map header; n is bounded by the bytes left so
// a hostile length cannot make a caller allocate more than the input size.
func (r *reader) readLen(fixBase, fixMask, b16, b32 byte, want string, perElem int) (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c&^fixMask == fixBase:
		r.off++
		n = uint64(c & fixMask)
	case c == b16:
		r.off++
		if n, err = r.be(2); err != nil {
			return 0, err
		}
	case c == b32:
		r.off++
		if n, err = r.be(4); err != nil {
			return 0, err
		}
	default:
		return 0, typeError{want, family(c)}
	}
	if n*uint64(perElem) > uint64(r.remaining()) {
		return 0, fmt.Errorf("%s of %d elements exceeds the %d bytes left", want, n, r.remaining())
	}
	return int(n), nil
}

func (r *reader) readArrayLen() (int, error) { return r.readLen(0x90, 0x0f, 0xdc, 0xdd, "array", 1) }
func (r *reader) readMapLen() (int, error)   { return r.readLen(0x80, 0x0f, 0xde, 0xdf, "map", 2) }

// readExt reads an ext value and returns its type and a copy of its data.
func (r *reader) readExt() (int8, []byte, error) {
	c, err := r.peek()
	if err != nil {
		return 0, nil, err
	}
	var n uint64
	switch c {
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		r.off++
		n = 1 << (c - 0xd4)
	case 0xc7, 0xc8, 0xc9:
		r.off++
		if n, err = r.be(1 << (c - 0xc7)); err != nil {
			return 0, nil, err
		}
	default:
		return 0, nil, typeError{"ext", family(c)}
	}
	t, err := r.take(1)
	if err != nil {
		return 0, nil, err
	}
	if n > uint64(r.remaining()) {
		return 0, nil, errShort
	}
	d, _ := r.take(int(n))
	return int8(t[0]), append([]byte(nil), d...), nil
}

// skip steps over one complete value without recursion, so deeply nested
// hostile input cannot exhaust the stack.
func (r *reader) skip() error {
	pending := uint64(1)
	for pending > 0 {
		pending--
		c, err := r.peek()
		if err != nil {
			return err
		}
		r.off++
		var skipBytes uint64
		switch {
		case c <= 0x7f || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c <= 0x8f:
			pending += 2 * uint64(c&0x0f)
		case c <= 0x9f:
			pending += uint64(c & 0x0f)
		case c <= 0xbf:
			skipBytes = uint64(c & 0x1f)
		default:
			switch c {
			case 0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb:
				w := 1 << ((c - 0xc4) % 3)
				if c >= 0xd9 {
					w = 1 << (c - 0xd9)
				}
				if skipBytes, err = r.be(w); err != nil {
					return err
				}
			case 0xc7, 0xc8, 0xc9:
				if skipBytes, err = r.be(1 << (c - 0xc7)); err != nil {
					return err
				}
				skipBytes++ // type byte
			case 0xca:
				skipBytes = 4
			case 0xcb:
				skipBytes = 8
			case 0xcc, 0xcd, 0xce, 0xcf:
				skipBytes = 1 << (c - 0xcc)
			case 0xd0, 0xd1, 0xd2, 0xd3:
				skipBytes = 1 << (c - 0xd0)
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
				skipBytes = 1 + 1<<(c-0xd4)
			case 0xdc, 0xdd:
				n, err := r.be(2 << (c - 0xdc))
				if err != nil {
					return err
				}
				pending += n
			case 0xde, 0xdf:
				n, err := r.be(2 << (c - 0xde))
				if err != nil {
					return err
				}
				pending += 2 * n
			default:
				return fmt.Errorf("invalid msgpack byte 0x%02x", c)
			}
		}
		if skipBytes > uint64(r.remaining()) {
			return errShort
		}
		r.off += int(skipBytes)
		if pending > uint64(r.remaining()) {
			return errShort
		}
	}
	return nil
}

// readRaw captures one value as a copy; msgpack nil becomes a nil Raw.
func (r *reader) readRaw() (Raw, error) {
	if r.nextNil() {
		return nil, nil
	}
	start := r.off
	if err := r.skip(); err != nil {
		return nil, err
	}
	return append(Raw(nil), r.b[start:r.off]...), nil
}

func (r *reader) readOptStr() (*string, error) {
	if r.nextNil() {
		return nil, nil
	}
	s, err := r.readStr()
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func (r *reader) readOptInt() (*int, error) {
	if r.nextNil() {
		return nil, nil
	}
	v, err := r.readIntN()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func (r *reader) readOptFloat() (*float64, error) {
	if r.nextNil() {
		return nil, nil
	}
	v, err := r.readFloat()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// readTokens reads an int32 array; nil stays a nil slice, [] a non-nil empty one.
func (r *reader) readTokens() ([]int32, error) {
	if r.nextNil() {
		return nil, nil
	}
	n, err := r.readArrayLen()
	if err != nil {
		return nil, err
	}
	ids := make([]int32, n)
	for i := range ids {
		if ids[i], err = r.readInt32(); err != nil {
			return nil, at(index(i), err)
		}
	}
	return ids, nil
}

// readStrs reads an array of str (nil → nil slice). The strings share one
// allocation: a batch of rids costs two allocations, not one per rid.
func (r *reader) readStrs() ([]string, error) {
	if r.nextNil() {
		return nil, nil
	}
	n, err := r.readArrayLen()
	if err != nil {
		return nil, err
	}
	start := r.off
	for i := 0; i < n; i++ {
		if _, err := r.strSpan(); err != nil {
			return nil, at(index(i), err)
		}
	}
	all := string(r.b[start:r.off])
	end := r.off
	r.off = start
	ss := make([]string, n)
	for i := range ss {
		h, _ := r.strSpan()
		ss[i] = all[h-start : r.off-start]
	}
	r.off = end
	return ss, nil
}

// strSpan steps over one str and returns where its bytes start.
func (r *reader) strSpan() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.off++
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xda || c == 0xdb:
		r.off++
		if n, err = r.be(1 << (c - 0xd9)); err != nil {
			return 0, err
		}
	default:
		return 0, typeError{"str", family(c)}
	}
	if n > uint64(r.remaining()) {
		return 0, errShort
	}
	s := r.off
	r.off += int(n)
	return s, nil
}

// end rejects trailing garbage after the top-level value.
func (r *reader) end() error {
	if r.off != len(r.b) {
		return fmt.Errorf("%d trailing bytes after the message", len(r.b)-r.off)
	}
	return nil
}

// readMapKeys iterates a str-keyed map, calling fn for each key with the
// reader positioned at its value; fn must consume the value (or return
// handled=false to have it skipped, which is how unknown keys are ignored).
func (r *reader) readMap(fn func(key string) (handled bool, err error)) error {
	n, err := r.readMapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.readStr()
		if err != nil {
			return at(fmt.Sprintf(" key %d", i), err)
		}
		handled, err := fn(k)
		if err != nil {
			return at("."+k, err)
		}
		if !handled {
			if err := r.skip(); err != nil {
				return at("."+k, err)
			}
		}
	}
	return nil
}

package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The msgpack subset KV events use, written the way msgspec writes it:
// the most compact int width (non-negative ints in the unsigned family,
// so a block hash ≥ 2^63 is a uint64), float64 always, str never bin,
// arrays as fixarray/array16/array32. The lane's codec (gateway/wire)
// keeps its own copy of these few functions unexported; this package
// stays independent of it so either can follow its own upstream.

func appendNil(b []byte) []byte { return append(b, 0xc0) }

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

// --- reader -----------------------------------------------------------------

var errShort = errors.New("unexpected end of input")

// PathError names where a decoder failed, e.g.
// "KVEventBatch[1] events[0] BlockStored[3] token_ids[7]: want int, got str".
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// at prefixes err's path with one more component.
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

type typeError struct{ want, got string }

func (e typeError) Error() string { return "want " + e.want + ", got " + e.got }

type reader struct {
	b   []byte
	off int
}

func (r *reader) remaining() int { return len(r.b) - r.off }

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

func (r *reader) be(n int) (uint64, error) {
	if n > r.remaining() {
		return 0, errShort
	}
	var v uint64
	for _, c := range r.b[r.off : r.off+n] {
		v = v<<8 | uint64(c)
	}
	r.off += n
	return v, nil
}

func (r *reader) nextNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// readInt reads any int width into an int64 (a uint64 above MaxInt64 is
// out of range).
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

// readUint reads a non-negative int of any width (block hashes use the
// whole uint64 range).
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
		return 0, fmt.Errorf("negative int %d where a block hash (uint64) belongs", v)
	}
	return uint64(v), nil
}

// readFloat accepts float64, float32 and, leniently, ints.
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

// readStrBytes returns the bytes of the next str, aliasing the input (no
// copy: callers compare tags, they keep no strings).
func (r *reader) readStrBytes() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.off++
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xda || c == 0xdb:
		r.off++
		if n, err = r.be(1 << (c - 0xd9)); err != nil {
			return nil, err
		}
	default:
		return nil, typeError{"str", family(c)}
	}
	if n > uint64(r.remaining()) {
		return nil, errShort
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// readArrayLen reads an array header; the count is bounded by the bytes
// left (each element takes at least one), so a hostile length cannot make
// a caller allocate more than the input's size.
func (r *reader) readArrayLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0x90 && c <= 0x9f:
		r.off++
		n = uint64(c & 0x0f)
	case c == 0xdc:
		r.off++
		if n, err = r.be(2); err != nil {
			return 0, err
		}
	case c == 0xdd:
		r.off++
		if n, err = r.be(4); err != nil {
			return 0, err
		}
	default:
		return 0, typeError{"array", family(c)}
	}
	if n > uint64(r.remaining()) {
		return 0, fmt.Errorf("array of %d elements exceeds the %d bytes left", n, r.remaining())
	}
	return int(n), nil
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
			case 0xc4, 0xc5, 0xc6:
				if skipBytes, err = r.be(1 << (c - 0xc4)); err != nil {
					return err
				}
			case 0xd9, 0xda, 0xdb:
				if skipBytes, err = r.be(1 << (c - 0xd9)); err != nil {
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

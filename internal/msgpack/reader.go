package msgpack

import (
	"errors"
	"fmt"
	"math"
)

// Reader reads values from one message in order. The zero Reader reads an
// empty input; Reset points it at a message. Methods that return bytes or
// strings say whether they copy or alias the input.
type Reader struct {
	b   []byte
	off int
}

// NewReader is a Reader over b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Reset makes r read b from its start.
func (r *Reader) Reset(b []byte) { r.b, r.off = b, 0 }

// Remaining is how many bytes are left unread.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

// End rejects trailing bytes after the top-level value.
func (r *Reader) End() error {
	if r.off != len(r.b) {
		return fmt.Errorf("%d trailing bytes after the message", len(r.b)-r.off)
	}
	return nil
}

// Peek is the next byte, unread.
func (r *Reader) Peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, ErrShort
	}
	return r.b[r.off], nil
}

// take returns the next n bytes, aliasing the input.
func (r *Reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.Remaining() {
		return nil, ErrShort
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

// be reads an n-byte (n > 0) big-endian unsigned number: inlined into
// every int read, so it takes no detour through take.
func (r *Reader) be(n int) (uint64, error) {
	if n > r.Remaining() {
		return 0, ErrShort
	}
	var v uint64
	for _, c := range r.b[r.off : r.off+n] {
		v = v<<8 | uint64(c)
	}
	r.off += n
	return v, nil
}

// NextNil consumes a nil and reports whether there was one.
func (r *Reader) NextNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// ReadBool reads a bool.
func (r *Reader) ReadBool() (bool, error) {
	c, err := r.Peek()
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
	return false, TypeError{"bool", Family(c)}
}

// ReadInt reads an int of any width; a uint64 above MaxInt64 is out of
// range.
func (r *Reader) ReadInt() (int64, error) {
	c, err := r.Peek()
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
	return 0, TypeError{"int", Family(c)}
}

// ReadUint reads a non-negative int of any width, the whole uint64 range
// (the engine's block hashes use it).
func (r *Reader) ReadUint() (uint64, error) {
	c, err := r.Peek()
	if err != nil {
		return 0, err
	}
	if c >= 0xcc && c <= 0xcf {
		r.off++
		return r.be(1 << (c - 0xcc))
	}
	v, err := r.ReadInt()
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, fmt.Errorf("negative int %d where an unsigned one belongs", v)
	}
	return uint64(v), nil
}

// ReadIntN reads an int into an int.
func (r *Reader) ReadIntN() (int, error) {
	v, err := r.ReadInt()
	return int(v), err
}

// ReadInt32 reads an int that must fit an int32.
func (r *Reader) ReadInt32() (int32, error) {
	v, err := r.ReadInt()
	if err != nil {
		return 0, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("int %d out of int32 range", v)
	}
	return int32(v), nil
}

// ReadFloat reads a float64 or float32 and, leniently, an int.
func (r *Reader) ReadFloat() (float64, error) {
	c, err := r.Peek()
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
	if Family(c) == "int" {
		v, err := r.ReadInt()
		return float64(v), err
	}
	return 0, TypeError{"float", Family(c)}
}

// ReadStrBytes reads a str and returns its bytes, aliasing the input
// (capacity capped at the str, so appending to it never writes over the
// input): what a caller compares against constants or slices into views
// without copying.
func (r *Reader) ReadStrBytes() ([]byte, error) {
	h, err := r.strSpan() // on an error h is r.off: no bytes
	return r.b[h:r.off:r.off], err
}

// ReadStr reads a str as a new string.
func (r *Reader) ReadStr() (string, error) {
	h, err := r.strSpan()
	return string(r.b[h:r.off]), err
}

// strSpan steps over one str and returns where its bytes start (they end
// at r.off; on an error, r.off: no bytes). The token path reads two str columns a message through it:
// an offset costs fewer instructions to return than a slice.
func (r *Reader) strSpan() (int, error) {
	c, err := r.Peek()
	if err != nil {
		return r.off, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.off++
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xda || c == 0xdb:
		r.off++
		if n, err = r.be(1 << (c - 0xd9)); err != nil {
			return r.off, err
		}
	default:
		return r.off, TypeError{"str", Family(c)}
	}
	if n > uint64(r.Remaining()) {
		return r.off, ErrShort
	}
	h := r.off
	r.off += int(n)
	return h, nil
}

// readLen reads an array or map header. The count is bounded by the bytes
// left (perElem is the least an element takes), so a hostile length cannot
// make a caller allocate more than the input's size.
func (r *Reader) readLen(fixBase, fixMask, b16, b32 byte, want string, perElem int) (int, error) {
	c, err := r.Peek()
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
		return 0, TypeError{want, Family(c)}
	}
	if n*uint64(perElem) > uint64(r.Remaining()) {
		return 0, fmt.Errorf("%s of %d elements exceeds the %d bytes left", want, n, r.Remaining())
	}
	return int(n), nil
}

// ReadArrayLen reads an array header: how many values follow.
func (r *Reader) ReadArrayLen() (int, error) { return r.readLen(0x90, 0x0f, 0xdc, 0xdd, "array", 1) }

// ReadMapLen reads a map header: how many key-value pairs follow.
func (r *Reader) ReadMapLen() (int, error) { return r.readLen(0x80, 0x0f, 0xde, 0xdf, "map", 2) }

// ReadExt reads an ext value: its type and a copy of its data.
func (r *Reader) ReadExt() (int8, []byte, error) {
	c, err := r.Peek()
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
		return 0, nil, TypeError{"ext", Family(c)}
	}
	t, err := r.take(1)
	if err != nil {
		return 0, nil, err
	}
	if n > uint64(r.Remaining()) {
		return 0, nil, ErrShort
	}
	d, _ := r.take(int(n))
	return int8(t[0]), append([]byte(nil), d...), nil
}

// Skip steps over one complete value without recursion, so deeply nested
// hostile input cannot exhaust the stack.
func (r *Reader) Skip() error {
	pending := uint64(1)
	for pending > 0 {
		pending--
		c, err := r.Peek()
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
		if skipBytes > uint64(r.Remaining()) {
			return ErrShort
		}
		r.off += int(skipBytes)
		if pending > uint64(r.Remaining()) {
			return ErrShort
		}
	}
	return nil
}

// ReadRaw reads one complete value as a copy of its bytes; nil reads as a
// nil slice.
func (r *Reader) ReadRaw() ([]byte, error) {
	if r.NextNil() {
		return nil, nil
	}
	start := r.off
	if err := r.Skip(); err != nil {
		return nil, err
	}
	return append([]byte(nil), r.b[start:r.off]...), nil
}

// CheckRaw reports whether v holds exactly one value (nil v: none, fine):
// what a pass-through field is checked with before it is written.
func CheckRaw(v []byte) error {
	if v == nil {
		return nil
	}
	r := Reader{b: v}
	if err := r.Skip(); err != nil {
		return err
	}
	return r.End()
}

// ReadOptStr reads a str, or nil as a nil pointer.
func (r *Reader) ReadOptStr() (*string, error) {
	if r.NextNil() {
		return nil, nil
	}
	s, err := r.ReadStr()
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// ReadOptInt reads an int, or nil as a nil pointer.
func (r *Reader) ReadOptInt() (*int, error) {
	if r.NextNil() {
		return nil, nil
	}
	v, err := r.ReadIntN()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// ReadOptInt64 reads an int, or nil as a nil pointer.
func (r *Reader) ReadOptInt64() (*int64, error) {
	if r.NextNil() {
		return nil, nil
	}
	v, err := r.ReadInt()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// ReadOptFloat reads a float, or nil as a nil pointer.
func (r *Reader) ReadOptFloat() (*float64, error) {
	if r.NextNil() {
		return nil, nil
	}
	v, err := r.ReadFloat()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// ReadOptInt32s reads an int32 array; nil reads as a nil slice and [] as
// a non-nil empty one (AppendOptInt32s's two cases).
func (r *Reader) ReadOptInt32s() ([]int32, error) {
	if r.NextNil() {
		return nil, nil
	}
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	ids := make([]int32, n)
	for i := range ids {
		if ids[i], err = r.ReadInt32(); err != nil {
			return nil, At(Index(i), err)
		}
	}
	return ids, nil
}

// ReadOptStrs reads a str array, nil as a nil slice. The strings share one
// allocation: a batch of rids costs two allocations, not one per rid.
func (r *Reader) ReadOptStrs() ([]string, error) {
	if r.NextNil() {
		return nil, nil
	}
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	start := r.off
	for i := 0; i < n; i++ {
		if _, err := r.strSpan(); err != nil {
			return nil, At(Index(i), err)
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

// ReadMap iterates a str-keyed map, calling fn for each key with the
// reader at its value; fn consumes the value, or answers handled=false to
// have it skipped (how a decoder ignores keys it does not know).
func (r *Reader) ReadMap(fn func(key string) (handled bool, err error)) error {
	n, err := r.ReadMapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		k, err := r.ReadStr()
		if err != nil {
			return At(fmt.Sprintf(" key %d", i), err)
		}
		handled, err := fn(k)
		if err != nil {
			return At("."+k, err)
		}
		if !handled {
			if err := r.Skip(); err != nil {
				return At("."+k, err)
			}
		}
	}
	return nil
}

package msgpack

import (
	"errors"
	"strconv"
)

// ErrShort is reported when the input ends inside a value.
var ErrShort = errors.New("unexpected end of input")

// PathError names where a decoder failed: the protocol's field path, e.g.
// "KVEventBatch[1] events[0] BlockStored[3] token_ids[7]", then what went
// wrong there.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// At prefixes err's path with one more component ("[3] temperature",
// ".key"), building the path from the inside out as the error returns
// through the decoder; nil stays nil.
func At(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var pe *PathError
	if errors.As(err, &pe) && pe == err {
		return &PathError{Path: prefix + pe.Path, Err: pe.Err}
	}
	return &PathError{Path: prefix, Err: err}
}

// Field is the path component of element i of a struct array, named:
// "[3] temperature".
func Field(i int, name string) string { return "[" + strconv.Itoa(i) + "] " + name }

// Index is the path component of element i of an array: "[3]".
func Index(i int) string { return "[" + strconv.Itoa(i) + "]" }

// TypeError is a value of the wrong msgpack family ("want float, got str").
type TypeError struct{ Want, Got string }

func (e TypeError) Error() string { return "want " + e.Want + ", got " + e.Got }

// Family names the msgpack type a value's first byte announces, for error
// messages.
func Family(c byte) string {
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

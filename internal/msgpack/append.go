// Package msgpack is the msgpack subset tsd's two msgpack protocols speak
// (the lane, gateway/wire; the engines' KV events, gateway/kvevents), in
// the one form both must match byte for byte: msgspec's. Each protocol
// keeps its own message types and field paths; this package owns the
// values they are made of.
//
// Writers pick the most compact width (non-negative ints in the unsigned
// family, as msgspec and rmp-serde write them), float64 always, str never
// bin. A few append functions pin that down more plainly than configuring
// a reflective codec would.
//
// The Reader decodes hostile input: it never panics, bounds every count
// by the bytes left so a hostile length cannot make a caller allocate more
// than the input's size, skips nested values without recursion, and its
// errors say what it wanted and what it found; callers add where
// (PathError, At), so an error reads
// "TokenizedGenerateReqInput[5] sampling_params[3] temperature: want float, got str".
package msgpack

import (
	"encoding/binary"
	"math"
)

// AppendNil appends msgpack nil.
func AppendNil(b []byte) []byte { return append(b, 0xc0) }

// AppendBool appends true or false.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

// AppendUint appends v in the narrowest unsigned width.
func AppendUint(b []byte, v uint64) []byte {
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

// AppendInt appends v in the narrowest width; non-negative values take the
// unsigned family, as msgspec and rmp-serde write them.
func AppendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return AppendUint(b, uint64(v))
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

// AppendFloat appends v as a float64: msgspec never narrows a float.
func AppendFloat(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(v))
}

// AppendStr appends s as str (never bin).
func AppendStr(b []byte, s string) []byte {
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

// AppendArrayHeader appends the header of an array of n values.
func AppendArrayHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

// AppendMapHeader appends the header of a map of n pairs.
func AppendMapHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
}

// AppendExt appends an ext value of type typ, in the fixext form when
// data's length has one.
func AppendExt(b []byte, typ int8, data []byte) []byte {
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

// AppendOptStr appends *s, or nil for a nil s.
func AppendOptStr(b []byte, s *string) []byte {
	if s == nil {
		return AppendNil(b)
	}
	return AppendStr(b, *s)
}

// AppendOptInt appends *v, or nil for a nil v.
func AppendOptInt(b []byte, v *int) []byte {
	if v == nil {
		return AppendNil(b)
	}
	return AppendInt(b, int64(*v))
}

// AppendOptInt64 appends *v, or nil for a nil v.
func AppendOptInt64(b []byte, v *int64) []byte {
	if v == nil {
		return AppendNil(b)
	}
	return AppendInt(b, *v)
}

// AppendOptFloat appends *v, or nil for a nil v.
func AppendOptFloat(b []byte, v *float64) []byte {
	if v == nil {
		return AppendNil(b)
	}
	return AppendFloat(b, *v)
}

// AppendRaw appends raw, one complete value kept as bytes, or nil for a
// nil raw (a pass-through field the writer does not interpret).
func AppendRaw(b []byte, raw []byte) []byte {
	if raw == nil {
		return AppendNil(b)
	}
	return append(b, raw...)
}

// AppendInt32s appends vs as an int array (a nil vs as an empty one).
func AppendInt32s(b []byte, vs []int32) []byte {
	b = AppendArrayHeader(b, len(vs))
	for _, v := range vs {
		b = AppendInt(b, int64(v))
	}
	return b
}

// AppendOptInt32s appends vs as an int array, or nil for a nil vs: an
// empty non-nil slice stays an empty array, since the engine tells the two
// apart.
func AppendOptInt32s(b []byte, vs []int32) []byte {
	if vs == nil {
		return AppendNil(b)
	}
	return AppendInt32s(b, vs)
}

// AppendStrs appends a str array, or nil for a nil slice.
func AppendStrs(b []byte, ss []string) []byte {
	if ss == nil {
		return AppendNil(b)
	}
	b = AppendArrayHeader(b, len(ss))
	for _, s := range ss {
		b = AppendStr(b, s)
	}
	return b
}

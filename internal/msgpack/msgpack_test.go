package msgpack

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every writer picks msgspec's width: the narrowest, non-negative ints in
// the unsigned family, floats always 64-bit, fixext where the length has
// one. One row per width boundary.
func TestAppendWidths(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"nil", AppendNil(nil), "c0"},
		{"false", AppendBool(nil, false), "c2"},
		{"true", AppendBool(nil, true), "c3"},
		{"uint 0", AppendUint(nil, 0), "00"},
		{"uint 127 fixint", AppendUint(nil, 127), "7f"},
		{"uint 128 uint8", AppendUint(nil, 128), "cc80"},
		{"uint 255 uint8", AppendUint(nil, 255), "ccff"},
		{"uint 256 uint16", AppendUint(nil, 256), "cd0100"},
		{"uint 65536 uint32", AppendUint(nil, 65536), "ce00010000"},
		{"uint 2^32 uint64", AppendUint(nil, 1<<32), "cf0000000100000000"},
		{"uint max", AppendUint(nil, math.MaxUint64), "cfffffffffffffffff"},
		{"int 5 unsigned family", AppendInt(nil, 5), "05"},
		{"int 200 unsigned family", AppendInt(nil, 200), "ccc8"},
		{"int -1 negative fixint", AppendInt(nil, -1), "ff"},
		{"int -32 negative fixint", AppendInt(nil, -32), "e0"},
		{"int -33 int8", AppendInt(nil, -33), "d0df"},
		{"int -129 int16", AppendInt(nil, -129), "d1ff7f"},
		{"int -32769 int32", AppendInt(nil, -32769), "d2ffff7fff"},
		{"int min int64", AppendInt(nil, math.MinInt64), "d38000000000000000"},
		{"float 1.5 float64", AppendFloat(nil, 1.5), "cb3ff8000000000000"},
		{"str empty", AppendStr(nil, ""), "a0"},
		{"str 31 fixstr", AppendStr(nil, strings.Repeat("a", 31))[:1], "bf"},
		{"str 32 str8", AppendStr(nil, strings.Repeat("a", 32))[:2], "d920"},
		{"str 256 str16", AppendStr(nil, strings.Repeat("a", 256))[:3], "da0100"},
		{"str 65536 str32", AppendStr(nil, strings.Repeat("a", 65536))[:5], "db00010000"},
		{"array 15 fixarray", AppendArrayHeader(nil, 15), "9f"},
		{"array 16 array16", AppendArrayHeader(nil, 16), "dc0010"},
		{"array 65536 array32", AppendArrayHeader(nil, 65536), "dd00010000"},
		{"map 15 fixmap", AppendMapHeader(nil, 15), "8f"},
		{"map 16 map16", AppendMapHeader(nil, 16), "de0010"},
		{"map 65536 map32", AppendMapHeader(nil, 65536), "df00010000"},
		{"ext 1 fixext1", AppendExt(nil, 3, []byte{9}), "d40309"},
		{"ext 16 fixext16", AppendExt(nil, 3, make([]byte, 16))[:2], "d803"},
		{"ext 3 ext8", AppendExt(nil, 3, []byte{1, 2, 3}), "c70303010203"},
		{"ext 256 ext16", AppendExt(nil, 3, make([]byte, 256))[:4], "c8010003"},
		{"ext 65536 ext32", AppendExt(nil, -1, make([]byte, 65536))[:6], "c900010000ff"},
		{"opt str nil", AppendOptStr(nil, nil), "c0"},
		{"opt int nil", AppendOptInt(nil, nil), "c0"},
		{"opt int64 nil", AppendOptInt64(nil, nil), "c0"},
		{"opt float nil", AppendOptFloat(nil, nil), "c0"},
		{"raw nil", AppendRaw(nil, nil), "c0"},
		{"raw value", AppendRaw(nil, []byte{0x91, 0x01}), "9101"},
		{"int32s nil is an empty array", AppendInt32s(nil, nil), "90"},
		{"opt int32s nil", AppendOptInt32s(nil, nil), "c0"},
		{"opt int32s empty", AppendOptInt32s(nil, []int32{}), "90"},
		{"opt int32s", AppendOptInt32s(nil, []int32{1, -1, 300}), "9301ffcd012c"},
		{"strs nil", AppendStrs(nil, nil), "c0"},
		{"strs", AppendStrs(nil, []string{"a", ""}), "92a161a0"},
	} {
		if got := hex.EncodeToString(c.got); got != c.want {
			t.Errorf("%s: % x, want %s", c.name, c.got, c.want)
		}
	}
}

// What each writer wrote, the Reader reads back, whatever the width.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ints := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	for _, v := range ints {
		r := NewReader(AppendInt(nil, v))
		if got, err := r.ReadInt(); err != nil || got != v || r.End() != nil {
			t.Errorf("int %d read back as %d, %v", v, got, err)
		}
	}
	for _, v := range []uint64{0, 200, 1 << 40, math.MaxUint64} {
		r := NewReader(AppendUint(nil, v))
		if got, err := r.ReadUint(); err != nil || got != v {
			t.Errorf("uint %d read back as %d, %v", v, got, err)
		}
	}
	for _, s := range []string{"", "x", strings.Repeat("y", 31), strings.Repeat("z", 300), strings.Repeat("w", 70000)} {
		r := NewReader(AppendStr(nil, s))
		if got, err := r.ReadStr(); err != nil || got != s {
			t.Errorf("str of %d bytes read back as %d bytes, %v", len(s), len(got), err)
		}
	}
	for _, n := range []int{0, 1, 16, 255, 256, 70000} {
		data := bytes.Repeat([]byte{7}, n)
		typ, got, err := NewReader(AppendExt(nil, -3, data)).ReadExt()
		if err != nil || typ != -3 || !bytes.Equal(got, data) {
			t.Errorf("ext of %d bytes: type %d, %d bytes, %v", n, typ, len(got), err)
		}
	}
	b := AppendFloat(nil, 2.25)
	b = AppendBool(b, true)
	b = AppendOptInt32s(b, []int32{})
	b = AppendOptInt32s(b, nil)
	b = AppendStrs(b, []string{"rid-1", "rid-2"})
	big, one := int64(-1<<40), 1
	b = AppendOptInt64(b, &big)
	b = AppendOptInt(b, &one)
	word, half := "w", 0.5
	b = AppendOptStr(b, &word)
	b = AppendOptFloat(b, &half)
	b = AppendOptInt64(b, nil)
	r := NewReader(b)
	f, err1 := r.ReadFloat()
	ok, err2 := r.ReadBool()
	empty, err3 := r.ReadOptInt32s()
	none, err4 := r.ReadOptInt32s()
	ss, err5 := r.ReadOptStrs()
	gotBig, err6 := r.ReadOptInt64()
	gotOne, err7 := r.ReadOptInt()
	gotWord, err8 := r.ReadOptStr()
	gotHalf, err9 := r.ReadOptFloat()
	gotNone, err10 := r.ReadOptInt64()
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8, err9, err10, r.End()); err != nil {
		t.Fatal(err)
	}
	if *gotBig != big || *gotOne != one || *gotWord != word || *gotHalf != half || gotNone != nil {
		t.Fatalf("optional values read back as %v %v %q %v %v", *gotBig, *gotOne, *gotWord, *gotHalf, gotNone)
	}
	if f != 2.25 || !ok || empty == nil || len(empty) != 0 || none != nil || len(ss) != 2 || ss[0] != "rid-1" || ss[1] != "rid-2" {
		t.Fatalf("read back %v %v %#v %#v %q", f, ok, empty, none, ss)
	}
}

// The Reader's refusals: each says what it wanted and what it found, or
// that the input ended, and none allocates by a length the input cannot
// hold.
func TestReaderErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   string
		read func(r *Reader) error
		want string
	}{
		{"empty", "", func(r *Reader) error { _, err := r.ReadInt(); return err }, "unexpected end of input"},
		{"int from str", "a178", func(r *Reader) error { _, err := r.ReadInt(); return err }, "want int, got str"},
		{"uint64 over int64", "cfffffffffffffffff", func(r *Reader) error { _, err := r.ReadInt(); return err }, "int out of range"},
		{"negative where unsigned", "ff", func(r *Reader) error { _, err := r.ReadUint(); return err }, "negative int -1 where an unsigned one belongs"},
		{"int32 overflow", "ce80000000", func(r *Reader) error { _, err := r.ReadInt32(); return err }, "int 2147483648 out of int32 range"},
		{"bool from nil", "c0", func(r *Reader) error { _, err := r.ReadBool(); return err }, "want bool, got nil"},
		{"float from bin", "c400", func(r *Reader) error { _, err := r.ReadFloat(); return err }, "want float, got bin"},
		{"str short", "a3 6162", func(r *Reader) error { _, err := r.ReadStr(); return err }, "unexpected end of input"},
		{"str8 header short", "d9", func(r *Reader) error { _, err := r.ReadStr(); return err }, "unexpected end of input"},
		{"array over the input", "dd ffffffff 00", func(r *Reader) error { _, err := r.ReadArrayLen(); return err }, "array of 4294967295 elements exceeds the 1 bytes left"},
		{"map counts two per pair", "82 0000", func(r *Reader) error { _, err := r.ReadMapLen(); return err }, "map of 2 elements exceeds the 2 bytes left"},
		{"ext over the input", "c7 05 01 00", func(r *Reader) error { _, _, err := r.ReadExt(); return err }, "unexpected end of input"},
		{"ext from int", "01", func(r *Reader) error { _, _, err := r.ReadExt(); return err }, "want ext, got int"},
		{"invalid byte", "c1", func(r *Reader) error { return r.Skip() }, "invalid msgpack byte 0xc1"},
		{"invalid byte named", "c1", func(r *Reader) error { _, err := r.ReadStr(); return err }, "want str, got invalid byte 0xc1"},
		{"skip deep nesting", strings.Repeat("91", 100000), func(r *Reader) error { return r.Skip() }, "unexpected end of input"},
		{"skip huge map", "df ffffffff", func(r *Reader) error { return r.Skip() }, "unexpected end of input"},
		{"trailing bytes", "01 02", func(r *Reader) error { _, _ = r.ReadInt(); return r.End() }, "1 trailing bytes after the message"},
		{"opt strs element", "92 a161 01", func(r *Reader) error { _, err := r.ReadOptStrs(); return err }, "[1]: want str, got int"},
		{"opt int32s element", "92 01 a0", func(r *Reader) error { _, err := r.ReadOptInt32s(); return err }, "[1]: want int, got str"},
		{"map key", "81 01 01", func(r *Reader) error { return r.ReadMap(func(string) (bool, error) { return false, nil }) }, " key 0: want str, got int"},
		{"map value", "81 a161 a0", func(r *Reader) error {
			return r.ReadMap(func(string) (bool, error) { _, err := r.ReadInt(); return true, err })
		}, ".a: want int, got str"},
	} {
		err := c.read(NewReader(unhex(t, c.in)))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// Skip steps over exactly one value of every family, nested or not, and
// ReadRaw copies the same span.
func TestSkipAndRaw(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"00", "ff", "c0", "c2", "cc01", "cd0102", "ce01020304", "cf0102030405060708",
		"d001", "d10102", "d201020304", "d30102030405060708", "ca00000000", "cb0000000000000000",
		"a3616263", "d903616263", "da0003616263", "db00000003616263",
		"c403010203", "c50003010203", "c600000003010203",
		"d40101", "d5010102", "d601" + "01020304", "d701" + "0102030405060708", "d801" + strings.Repeat("00", 16),
		"c7020101 02", "c800020101 02", "c90000000201 0102",
		"93 01 a161 c0", "dc0002 01 02", "dd00000002 01 02",
		"82 a161 01 a162 92 01 02", "de0001 a161 01", "df00000001 a161 01",
		"91 91 91 81 a161 93 01 02 03",
	} {
		v := unhex(t, in)
		r := NewReader(append(v, 0x7f))
		if err := r.Skip(); err != nil || r.off != len(v) || r.Remaining() != 1 {
			t.Errorf("skip %s: %v at %d, want %d", in, err, r.off, len(v))
		}
		raw, err := NewReader(append(v, 0x7f)).ReadRaw()
		if in == "c0" {
			v = nil // nil reads as no value at all
		}
		if err != nil || !bytes.Equal(raw, v) {
			t.Errorf("raw %s: % x, %v", in, raw, err)
		}
		if err := CheckRaw(v); err != nil {
			t.Errorf("check %s: %v", in, err)
		}
	}
	if raw, err := NewReader([]byte{0xc0}).ReadRaw(); raw != nil || err != nil {
		t.Errorf("nil raw: % x %v", raw, err)
	}
	if CheckRaw(nil) != nil || CheckRaw([]byte{1, 2}) == nil || CheckRaw([]byte{0x92, 1}) == nil {
		t.Error("CheckRaw takes exactly one value, or none")
	}
}

// ReadStrBytes aliases the input without letting an append write over it.
func TestReadStrBytesAliases(t *testing.T) {
	t.Parallel()
	in := unhex(t, "a2 6869 a1 21")
	r := NewReader(in)
	b, err := r.ReadStrBytes()
	if err != nil || string(b) != "hi" || cap(b) != 2 {
		t.Fatalf("%q cap %d, %v", b, cap(b), err)
	}
	_ = append(b, 'X')
	if in[3] != 0xa1 {
		t.Fatal("an append to the aliased str wrote over the input")
	}
	if s, _ := r.ReadStr(); s != "!" {
		t.Fatalf("next str %q", s)
	}
}

// ReadMap hands known keys to fn and skips the rest.
func TestReadMap(t *testing.T) {
	t.Parallel()
	b := AppendMapHeader(nil, 3)
	b = AppendStr(b, "keep")
	b = AppendInt(b, 7)
	b = AppendStr(b, "unknown")
	b = AppendStrs(b, []string{"x", "y"})
	b = AppendStr(b, "also")
	b = AppendBool(b, true)
	r := NewReader(b)
	got := map[string]any{}
	err := r.ReadMap(func(k string) (bool, error) {
		switch k {
		case "keep":
			v, err := r.ReadInt()
			got[k] = v
			return true, err
		case "also":
			v, err := r.ReadBool()
			got[k] = v
			return true, err
		}
		return false, nil
	})
	if err != nil || r.End() != nil || got["keep"] != int64(7) || got["also"] != true || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
}

// At builds the path from the inside out, one PathError however deep, and
// errors.Is still reaches the cause.
func TestAtPath(t *testing.T) {
	t.Parallel()
	err := At("Batch", At(Field(1, "events")+Index(0), At(Index(7), ErrShort)))
	if err.Error() != "Batch[1] events[0][7]: unexpected end of input" {
		t.Fatalf("%q", err)
	}
	var pe *PathError
	if !errors.As(err, &pe) || errors.As(pe.Err, &pe) {
		t.Fatal("nested paths were not folded into one PathError")
	}
	if !errors.Is(err, ErrShort) {
		t.Fatal("errors.Is does not reach the cause")
	}
	if At("x", nil) != nil {
		t.Fatal("At(nil) is not nil")
	}
	// A PathError wrapped by other text starts a new path rather than
	// splicing into one it does not own.
	wrapped := At("outer", errors.Join(errors.New("ctx"), At("inner", ErrShort)))
	if !strings.HasPrefix(wrapped.Error(), "outer: ctx") {
		t.Fatalf("%q", wrapped)
	}
}

// FuzzSkip: on any input Skip returns (never panics, never loops), and
// where it succeeds ReadRaw copies the same span and CheckRaw of that span
// agrees. The lane's and the KV events' decoders reach it on every
// message a peer sends.
func FuzzSkip(f *testing.F) {
	f.Add([]byte{0x93, 0x01, 0xa1, 'a', 0xc0})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0x92, 0x01, 0x02})
	f.Add([]byte{0xc9, 0, 0, 0, 2, 1, 1, 2})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(in)
		if err := r.Skip(); err != nil {
			return
		}
		n := r.off
		if n < 1 || n > len(in) {
			t.Fatalf("skip ended at %d of %d", n, len(in))
		}
		raw, err := NewReader(in).ReadRaw()
		if err != nil || (in[0] != 0xc0 && !bytes.Equal(raw, in[:n])) {
			t.Fatalf("raw % x, %v; skip took % x", raw, err, in[:n])
		}
		if err := CheckRaw(in[:n]); err != nil {
			t.Fatalf("check of what skip took: %v", err)
		}
	})
}

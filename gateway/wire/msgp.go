package wire

import (
	"fmt"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// The lane is byte-exact against msgspec's output (most compact int
// widths, float64 always, str never bin, nil kept distinct from empty,
// struct-declared key order); internal/msgpack writes and reads those
// values, and this package the lane's messages made of them.

// Raw is one complete msgpack value kept as bytes, for fields the gateway
// passes through without interpreting. A nil Raw is written as msgpack nil.
type Raw []byte

// reader is msgpack's Reader plus the lane's own message readers.
type reader struct{ msgpack.Reader }

func newReader(b []byte) *reader {
	r := &reader{}
	r.Reset(b)
	return r
}

// checkRaw verifies that a pass-through field holds exactly one msgpack value.
func checkRaw(name string, v Raw) error {
	if v == nil {
		return nil
	}
	if err := msgpack.CheckRaw(v); err != nil {
		return fmt.Errorf("%s: invalid msgpack: %w", name, err)
	}
	return nil
}

// fieldName is element k of a struct array as fields names it, or "extra"
// past them: a newer engine's field this side does not know.
func fieldName(fields []string, k int) string {
	if k < len(fields) {
		return fields[k]
	}
	return "extra"
}

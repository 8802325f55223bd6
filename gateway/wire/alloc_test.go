package wire

import (
	"runtime"
	"testing"
)

func TestDefaultSeed(t *testing.T) {
	t.Parallel()
	for rid, want := range map[string]int64{"r1": 219023793, "pd-1": 1951483561} {
		if got := DefaultSeed(rid); got != want {
			t.Errorf("DefaultSeed(%q) = %d, want %d", rid, got, want)
		}
	}
}

// Hostile length prefixes (2^32 elements or bytes) must be rejected before
// anything of that size is allocated. Not parallel: it reads global memstats.
func TestHostileLengthsDoNotAllocate(t *testing.T) {
	hostile := [][]byte{
		{0xdd, 0xff, 0xff, 0xff, 0xff},
		{0xdf, 0xff, 0xff, 0xff, 0xff},
		{0xdb, 0xff, 0xff, 0xff, 0xff, 'A'},
		{0xc9, 0xff, 0xff, 0xff, 0xff, 0x03},
		append([]byte{0x96, 0xb9}, append([]byte(TagGenerateRequest), 0xa1, 'r', 0xc0, 0xc0, 0xdd, 0x7f, 0xff, 0xff, 0xff)...),
		append([]byte{0x9a, 0xb3}, append([]byte(TagOutputSlim), 0xdd, 0x7f, 0xff, 0xff, 0xff)...),
		append([]byte{0x9a, 0xb3}, append([]byte(TagOutputSlim), 0x91, 0xa0, 0x91, 0xdd, 0x7f, 0xff, 0xff, 0xff)...),
	}
	decoders := []func([]byte) error{
		func(b []byte) error { _, err := DecodeHandshake(b); return err },
		func(b []byte) error { _, err := DecodeInit(b); return err },
		func(b []byte) error { _, err := DecodeRegistration(b); return err },
		func(b []byte) error { _, err := DecodeGenerateRequest(b); return err },
		func(b []byte) error { _, err := DecodeAbort(b); return err },
		func(b []byte) error { _, err := DecodeOutput(b); return err },
		func(b []byte) error { _, err := DecodeFullOutput(b); return err },
		func(b []byte) error { _, err := DecodeEncodeRequest(b); return err },
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, b := range hostile {
		for i, dec := range decoders {
			if dec(b) == nil {
				t.Errorf("decoder %d accepted %x", i, b)
			}
		}
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Fatalf("hostile lengths allocated %d bytes", d)
	}
}

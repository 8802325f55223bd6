package wire

import (
	"hash/crc32"
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

// Decoding an output batch costs a fixed handful of allocations per
// message, however many rids it carries (a decode step's 512): the token
// path's cost per token must not grow with per-rid allocations. Not
// parallel: AllocsPerRun reads global memstats.
func TestDecodeOutputAllocsPerMessage(t *testing.T) {
	batch := func(n int) []byte {
		o := OutputBatch{}
		for i := range n {
			fin := FinishRunning
			if i%7 == 0 {
				fin = FinishLength
			}
			o.RIDs = append(o.RIDs, "rid-"+string(rune('a'+i%26))+"-0123456789")
			o.OutputIDs = append(o.OutputIDs, []int32{int32(i)})
			o.FinishedReasons = append(o.FinishedReasons, fin)
			o.PromptTokens = append(o.PromptTokens, 32)
			o.CompletionTokens = append(o.CompletionTokens, i)
			o.CachedTokens = append(o.CachedTokens, 0)
		}
		b, err := EncodeOutput(o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, n := range []int{1, 64, 512} {
		b := batch(n)
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := DecodeAnyOutput(b); err != nil {
				t.Fatal(err)
			}
		})
		// rids (2: bytes and headers), token column (2: headers and one
		// backing), reasons, counts: 6.
		if allocs > 6 {
			t.Errorf("rids=%d: %v allocations per message, want at most 6", n, allocs)
		}
	}
}

// DefaultSeed is the seed the engine derives for a request sent with a nil
// seed: zlib CRC-32 of the rid's UTF-8 bytes (§5.4).
func DefaultSeed(rid string) int64 {
	return int64(crc32.ChecksumIEEE([]byte(rid)))
}

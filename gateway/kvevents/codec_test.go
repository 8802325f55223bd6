package kvevents

import (
	"strings"
	"testing"
)

func TestDecodeBatchErrors(t *testing.T) {
	// Hostile or malformed payloads fail with an error naming the field;
	// none panics or allocates beyond the input.
	bs := "ab426c6f636b53746f726564" // "BlockStored"
	br := "ac426c6f636b52656d6f766564"
	rows := []struct {
		name, hex, want string
	}{
		{"empty", "", "KVEventBatch: unexpected end of input"},
		{"not an array", "a3616263", "KVEventBatch: want array, got str"},
		{"too short", "91cb3ff8000000000000", "KVEventBatch: array of 1 elements; ts and events are required"},
		{"ts a string", "92a131 90", "KVEventBatch[0] ts: want float, got str"},
		{"events not array", "92cb3ff8000000000000 c0", "KVEventBatch[1] events: want array, got nil"},
		{"huge events count", "92cb3ff8000000000000 ddffffffff", "KVEventBatch[1] events: array of 4294967295 elements exceeds"},
		{"event empty array", "92cb3ff8000000000000 91 90", "KVEventBatch[1] events[0]: empty array"},
		{"event tag not str", "92cb3ff8000000000000 91 9101", "KVEventBatch[1] events[0][0] tag: want str, got int"},
		{"stored too short", "92cb3ff8000000000000 91 93" + bs + "9101c0", "BlockStored has 3 elements, needs 5"},
		{"stored hash negative", "92cb3ff8000000000000 91 95" + bs + "91ff c0 90 04", "events[0]BlockStored[1] block_hashes[0]: negative int"},
		{"stored parent str", "92cb3ff8000000000000 91 95" + bs + "9101 a178 90 04", "BlockStored[2] parent_block_hash: want int, got str"},
		{"stored token float", "92cb3ff8000000000000 91 95" + bs + "9101 c0 91cb3ff8000000000000 04", "BlockStored[3] token_ids[0]: want int, got float"},
		{"stored token over int32", "92cb3ff8000000000000 91 95" + bs + "9101 c0 91ce80000000 04", "token_ids[0]: token id 2147483648 out of int32 range"},
		{"stored block size zero", "92cb3ff8000000000000 91 95" + bs + "9101 c0 90 00", "BlockStored[4] block_size: block size 0 out of range"},
		{"removed hashes nil", "92cb3ff8000000000000 91 92" + br + "c0", "BlockRemoved[1] block_hashes: want array, got nil"},
		{"dp rank str", "93cb3ff8000000000000 90 a130", "KVEventBatch[2] attn_dp_rank: want int, got str"},
		{"dp rank negative", "93cb3ff8000000000000 90 ff", "KVEventBatch[2] attn_dp_rank: rank -1 out of range"},
		{"trailing bytes", "92cb3ff8000000000000 90 00", "1 trailing bytes"},
		{"truncated extra field", "94cb3ff8000000000000 90 00 dc00", "KVEventBatch[3]: unexpected end of input"},
		{"deep nesting in extra", "94cb3ff8000000000000 90 00 " + strings.Repeat("91", 4000), "KVEventBatch[3]: unexpected end of input"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			_, err := DecodeBatch(unhex(t, r.hex))
			if err == nil || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("err = %v, want it to contain %q", err, r.want)
			}
		})
	}
}

func TestDecodeBatchTolerance(t *testing.T) {
	// What msgspec (and a newer engine) may send decodes: ints where the
	// float ts goes, extra trailing fields on the batch and on events, an
	// unknown event tag (kept as KindUnknown, so the batch is not lost).
	bs := "ab426c6f636b53746f726564"
	rows := []struct {
		name, hex string
		check     func(t *testing.T, b Batch)
	}{
		{"int ts", "92 05 90", func(t *testing.T, b Batch) {
			if b.TS != 5 || b.HasDPRank {
				t.Fatalf("%+v", b)
			}
		}},
		{"nil dp rank", "93cb3ff8000000000000 90 c0", func(t *testing.T, b Batch) {
			if b.HasDPRank {
				t.Fatalf("%+v", b)
			}
		}},
		{"extra batch field", "94cb3ff8000000000000 90 01 a3616263", func(t *testing.T, b Batch) {
			if b.DPRank != 1 || !b.HasDPRank {
				t.Fatalf("%+v", b)
			}
		}},
		{"vllm style stored with lora and medium", "92cb3ff8000000000000 91 97" + bs + "9101 c0 920102 02 c0 a3677075", func(t *testing.T, b Batch) {
			e := b.Events[0]
			if e.Kind != KindBlockStored || len(e.TokenIDs) != 2 || e.BlockSize != 2 || e.HasParent {
				t.Fatalf("%+v", e)
			}
		}},
		{"unknown tag", "92cb3ff8000000000000 91 92 ac426c6f636b55706461746564 90", func(t *testing.T, b Batch) {
			if e := b.Events[0]; e.Kind != KindUnknown || e.Tag != "BlockUpdated" {
				t.Fatalf("%+v", e)
			}
		}},
		{"uint64 parent", "92cb3ff8000000000000 91 95" + bs + "9101 cfffffffffffffffff 90 01", func(t *testing.T, b Batch) {
			if e := b.Events[0]; !e.HasParent || e.ParentHash != ^uint64(0) {
				t.Fatalf("%+v", e)
			}
		}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			b, err := DecodeBatch(unhex(t, r.hex))
			if err != nil {
				t.Fatal(err)
			}
			r.check(t, b)
		})
	}
}

func TestFramesRefused(t *testing.T) {
	// Messages of the wrong shape are refused, not misread.
	if _, err := DecodeMessage([][]byte{{}, {0, 0, 0, 1}, {0x90}}); err == nil {
		t.Error("short seq frame accepted")
	}
	if _, err := DecodeMessage([][]byte{{}, SeqBytes(1)}); err == nil {
		t.Error("two-frame message accepted")
	}
	if _, _, ok := ParseReplayRequest([][]byte{{1}, {0}, SeqBytes(1)}); ok {
		t.Error("non-empty delimiter accepted")
	}
	if _, _, ok := ParseReplayRequest([][]byte{{1}, {}, {1, 2}}); ok {
		t.Error("short start accepted")
	}
	if _, err := DecodeReplay([][]byte{SeqBytes(1), {0x90}}); err == nil {
		t.Error("answer without delimiter accepted")
	}
	it, err := DecodeReplay([][]byte{{}, EndSeq[:], {}})
	if err != nil || !it.End {
		t.Errorf("end marker: %+v %v", it, err)
	}
}

func FuzzDecodeKVEvents(f *testing.F) {
	for _, p := range vectorPayloads(f) {
		f.Add(p)
	}
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodeBatch(p)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same batch.
		known := b
		known.Events = nil
		for _, e := range b.Events {
			if e.Kind != KindUnknown {
				known.Events = append(known.Events, e)
			}
		}
		enc, err := EncodeBatch(known)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeBatch(enc)
		if err != nil {
			t.Fatalf("decode of re-encoded batch: %v", err)
		}
		if len(again.Events) != len(known.Events) {
			t.Fatalf("events %d → %d", len(known.Events), len(again.Events))
		}
		// The message framing around a payload never panics either.
		_, _ = DecodeMessage([][]byte{{}, p, p})
		_, _ = DecodeReplay([][]byte{{}, p, p})
	})
}

package kvevents

import (
	"errors"
	"fmt"
	"math"

	"github.com/tsd-project/tsd/internal/msgpack"
)

// Kind is an event's type: the tag msgspec writes first in its array.
type Kind uint8

// The event kinds of TokenSpeed's KVEventBatch (docs/protocol.md §16.3).
// KindUnknown is any other tag, kept so a newer engine's new event is
// seen and ignored rather than failing its whole batch.
const (
	KindUnknown Kind = iota
	KindBlockStored
	KindBlockRemoved
	KindAllBlocksCleared
)

// Tags as the engine's msgspec writes them: the Python class names.
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"
)

func (k Kind) String() string {
	switch k {
	case KindBlockStored:
		return TagBlockStored
	case KindBlockRemoved:
		return TagBlockRemoved
	case KindAllBlocksCleared:
		return TagAllBlocksCleared
	}
	return "unknown"
}

// Event is one cache mutation.
//
// BlockStored: BlockHashes (TokenSpeed sends one per event), the hash of
// the block before the first of them (HasParent false for a prompt's
// first page), the tokens of all of them (len(BlockHashes) × BlockSize)
// and BlockSize (the engine's prefix granularity). BlockRemoved:
// BlockHashes. AllBlocksCleared: nothing.
type Event struct {
	Kind        Kind
	BlockHashes []uint64
	ParentHash  uint64
	HasParent   bool
	TokenIDs    []int32
	BlockSize   int
	// Tag is the tag of a KindUnknown event (aliasing nothing: a copy).
	Tag string
}

// Batch is one KVEventBatch: what one scheduler step changed on one
// attention-DP rank.
type Batch struct {
	TS     float64 // time.time() when the batch was made, seconds
	Events []Event
	// DPRank is attn_dp_rank. The engine always fills it (its publisher
	// sets its own rank when the batch has none); a batch without it
	// (msgspec omits a trailing None) decodes with HasDPRank false.
	DPRank    int
	HasDPRank bool
}

// AppendBatch appends b's msgpack encoding, byte-exact with msgspec's:
// [ts, [events…], attn_dp_rank], each event a tagged array
// ["BlockStored", [hashes], parent|nil, [tokens], block_size],
// ["BlockRemoved", [hashes]] or ["AllBlocksCleared"].
func AppendBatch(dst []byte, b Batch) ([]byte, error) {
	n := 2
	if b.HasDPRank {
		n = 3
	}
	dst = msgpack.AppendArrayHeader(dst, n)
	dst = msgpack.AppendFloat(dst, b.TS)
	dst = msgpack.AppendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		var err error
		if dst, err = appendEvent(dst, &b.Events[i]); err != nil {
			return nil, fmt.Errorf("encode KVEventBatch events[%d]: %w", i, err)
		}
	}
	if b.HasDPRank {
		dst = msgpack.AppendInt(dst, int64(b.DPRank))
	}
	return dst, nil
}

// EncodeBatch is AppendBatch into a new slice.
func EncodeBatch(b Batch) ([]byte, error) { return AppendBatch(nil, b) }

func appendEvent(dst []byte, e *Event) ([]byte, error) {
	switch e.Kind {
	case KindBlockStored:
		dst = msgpack.AppendArrayHeader(dst, 5)
		dst = msgpack.AppendStr(dst, TagBlockStored)
		dst = appendHashes(dst, e.BlockHashes)
		if e.HasParent {
			dst = msgpack.AppendUint(dst, e.ParentHash)
		} else {
			dst = msgpack.AppendNil(dst)
		}
		dst = msgpack.AppendInt32s(dst, e.TokenIDs)
		return msgpack.AppendInt(dst, int64(e.BlockSize)), nil
	case KindBlockRemoved:
		dst = msgpack.AppendArrayHeader(dst, 2)
		dst = msgpack.AppendStr(dst, TagBlockRemoved)
		return appendHashes(dst, e.BlockHashes), nil
	case KindAllBlocksCleared:
		dst = msgpack.AppendArrayHeader(dst, 1)
		return msgpack.AppendStr(dst, TagAllBlocksCleared), nil
	}
	return nil, fmt.Errorf("event kind %d has no encoding", e.Kind)
}

func appendHashes(dst []byte, hs []uint64) []byte {
	dst = msgpack.AppendArrayHeader(dst, len(hs))
	for _, h := range hs {
		dst = msgpack.AppendUint(dst, h)
	}
	return dst
}

// DecodeBatch decodes one KVEventBatch payload from an untrusted
// publisher. Every allocation is bounded by the payload's size; errors name
// the failing field. Like msgspec it takes a shorter batch whose missing
// trailing fields have defaults (attn_dp_rank) and, as upstream only
// appends fields, ignores extra trailing elements of the batch and of each
// event.
func DecodeBatch(p []byte) (Batch, error) {
	r := msgpack.NewReader(p)
	b, err := decodeBatch(r)
	if err != nil {
		return Batch{}, msgpack.At("KVEventBatch", err)
	}
	if n := r.Remaining(); n != 0 {
		return Batch{}, fmt.Errorf("KVEventBatch: %d trailing bytes after the batch", n)
	}
	return b, nil
}

func decodeBatch(r *msgpack.Reader) (Batch, error) {
	var b Batch
	n, err := r.ReadArrayLen()
	if err != nil {
		return b, err
	}
	if n < 2 {
		return b, fmt.Errorf("array of %d elements; ts and events are required", n)
	}
	if b.TS, err = r.ReadFloat(); err != nil {
		return b, msgpack.At(msgpack.Field(0, "ts"), err)
	}
	ne, err := r.ReadArrayLen()
	if err != nil {
		return b, msgpack.At(msgpack.Field(1, "events"), err)
	}
	b.Events = make([]Event, ne)
	for i := range b.Events {
		if err := decodeEvent(r, &b.Events[i]); err != nil {
			return b, msgpack.At(msgpack.Field(1, "events")+msgpack.Index(i), err)
		}
	}
	if n >= 3 {
		if !r.NextNil() {
			v, err := r.ReadInt()
			if err != nil {
				return b, msgpack.At(msgpack.Field(2, "attn_dp_rank"), err)
			}
			if v < 0 || v > math.MaxInt32 {
				return b, msgpack.At(msgpack.Field(2, "attn_dp_rank"), fmt.Errorf("rank %d out of range", v))
			}
			b.DPRank, b.HasDPRank = int(v), true
		}
	}
	for i := 3; i < n; i++ {
		if err := r.Skip(); err != nil {
			return b, msgpack.At(msgpack.Index(i), err)
		}
	}
	return b, nil
}

func decodeEvent(r *msgpack.Reader, e *Event) error {
	n, err := r.ReadArrayLen()
	if err != nil {
		return err
	}
	if n < 1 {
		return errors.New("empty array: an event starts with its tag")
	}
	tag, err := r.ReadStrBytes()
	if err != nil {
		return msgpack.At(msgpack.Field(0, "tag"), err)
	}
	need, used := 1, 1
	switch string(tag) {
	case TagBlockStored:
		e.Kind, need = KindBlockStored, 5
	case TagBlockRemoved:
		e.Kind, need = KindBlockRemoved, 2
	case TagAllBlocksCleared:
		e.Kind = KindAllBlocksCleared
	default:
		e.Kind, e.Tag = KindUnknown, string(tag)
	}
	if n < need {
		return fmt.Errorf("%s has %d elements, needs %d", tag, n, need)
	}
	name := string(tag)
	switch e.Kind {
	case KindBlockStored:
		if e.BlockHashes, err = readHashes(r); err != nil {
			return msgpack.At(name+msgpack.Field(1, "block_hashes"), err)
		}
		if !r.NextNil() {
			if e.ParentHash, err = r.ReadUint(); err != nil {
				return msgpack.At(name+msgpack.Field(2, "parent_block_hash"), err)
			}
			e.HasParent = true
		}
		if e.TokenIDs, err = readTokens(r); err != nil {
			return msgpack.At(name+msgpack.Field(3, "token_ids"), err)
		}
		bs, err := r.ReadInt()
		if err != nil {
			return msgpack.At(name+msgpack.Field(4, "block_size"), err)
		}
		if bs <= 0 || bs > math.MaxInt32 {
			return msgpack.At(name+msgpack.Field(4, "block_size"), fmt.Errorf("block size %d out of range", bs))
		}
		e.BlockSize = int(bs)
		used = 5
	case KindBlockRemoved:
		if e.BlockHashes, err = readHashes(r); err != nil {
			return msgpack.At(name+msgpack.Field(1, "block_hashes"), err)
		}
		used = 2
	}
	for i := used; i < n; i++ {
		if err := r.Skip(); err != nil {
			return msgpack.At(name+msgpack.Index(i), err)
		}
	}
	return nil
}

func readHashes(r *msgpack.Reader) ([]uint64, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	hs := make([]uint64, n)
	for i := range hs {
		if hs[i], err = r.ReadUint(); err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
	}
	return hs, nil
}

// readTokens reads token_ids: an array the engine never sends as nil (so
// not msgpack's ReadOptInt32s), each a token id that must fit an int32.
func readTokens(r *msgpack.Reader) ([]int32, error) {
	n, err := r.ReadArrayLen()
	if err != nil {
		return nil, err
	}
	ids := make([]int32, n)
	for i := range ids {
		v, err := r.ReadInt()
		if err != nil {
			return nil, msgpack.At(msgpack.Index(i), err)
		}
		if v < math.MinInt32 || v > math.MaxInt32 {
			return nil, msgpack.At(msgpack.Index(i), fmt.Errorf("token id %d out of int32 range", v))
		}
		ids[i] = int32(v)
	}
	return ids, nil
}

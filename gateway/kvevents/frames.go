package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The ZMQ framing of the publisher (docs/protocol.md §16.2, §16.4).
//
// PUB: every batch is one 3-frame message [topic, seq, payload]: the
// configured topic's UTF-8 bytes ("" by default), the batch's sequence
// number as 8 bytes big-endian (0, 1, 2, … per publisher, so per DP rank
// and per engine start), the msgpack KVEventBatch.
//
// Replay (ROUTER on the publisher, DEALER here): a request is
// ["", start_seq(8 bytes BE)] as the DEALER sends it (the ROUTER sees
// [identity, "", start_seq] and refuses anything else); the answer is one
// ["", seq, payload] per buffered batch with seq ≥ start, oldest first,
// then the end marker ["", ff ff ff ff ff ff ff ff, ""] (seq -1 as a
// signed 64-bit int, an empty payload).

// SeqLen is the size of a sequence frame.
const SeqLen = 8

// EndSeq is the replay end marker's sequence frame (-1 as int64).
var EndSeq = [SeqLen]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// SeqBytes is seq as a sequence frame.
func SeqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Message is one published batch as it arrives on a SUB socket.
type Message struct {
	Topic   []byte
	Seq     uint64
	Payload []byte
}

// PubFrames is the message a publisher sends for one batch.
func PubFrames(topic string, seq uint64, payload []byte) [][]byte {
	return [][]byte{[]byte(topic), SeqBytes(seq), payload}
}

// DecodeMessage splits a SUB message into its frames.
func DecodeMessage(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("KV event message has %d frames, want 3 (topic, seq, payload)", len(frames))
	}
	if len(frames[1]) != SeqLen {
		return Message{}, fmt.Errorf("KV event message: sequence frame of %d bytes, want %d", len(frames[1]), SeqLen)
	}
	return Message{Topic: frames[0], Seq: binary.BigEndian.Uint64(frames[1]), Payload: frames[2]}, nil
}

// ReplayRequest is what a DEALER sends to ask for every buffered batch
// from start on.
func ReplayRequest(start uint64) [][]byte { return [][]byte{{}, SeqBytes(start)} }

// ParseReplayRequest reads a request as the publisher's ROUTER receives
// it, [identity, "", start]. ok is false for anything else (upstream logs
// and ignores it).
func ParseReplayRequest(frames [][]byte) (identity []byte, start uint64, ok bool) {
	if len(frames) != 3 || len(frames[1]) != 0 || len(frames[2]) != SeqLen {
		return nil, 0, false
	}
	return frames[0], binary.BigEndian.Uint64(frames[2]), true
}

// ReplayAnswer is one buffered batch as the publisher's ROUTER sends it.
func ReplayAnswer(identity []byte, seq uint64, payload []byte) [][]byte {
	return [][]byte{identity, {}, SeqBytes(seq), payload}
}

// ReplayEnd is the end marker as the publisher's ROUTER sends it.
func ReplayEnd(identity []byte) [][]byte {
	return [][]byte{identity, {}, EndSeq[:], {}}
}

// ReplayItem is one answer frame set as the DEALER receives it.
type ReplayItem struct {
	End     bool // the end marker: no more batches for this request
	Seq     uint64
	Payload []byte
}

var errReplayFrames = errors.New("replay answer is not [\"\", seq, payload]")

// DecodeReplay reads one replay answer as a DEALER receives it.
func DecodeReplay(frames [][]byte) (ReplayItem, error) {
	if len(frames) != 3 || len(frames[0]) != 0 || len(frames[1]) != SeqLen {
		return ReplayItem{}, fmt.Errorf("%w (%d frames)", errReplayFrames, len(frames))
	}
	if [SeqLen]byte(frames[1]) == EndSeq {
		return ReplayItem{End: true}, nil
	}
	return ReplayItem{Seq: binary.BigEndian.Uint64(frames[1]), Payload: frames[2]}, nil
}

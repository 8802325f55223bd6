package kvevents

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The vectors were written by hand from the upstream publisher's source
// (testdata/kv-events-vectors.json says which files); these tests hold the
// codec, the frames and the hash to them.

type vectorFile struct {
	Payloads []struct {
		Name    string `json:"name"`
		Hex     string `json:"hex"`
		Decoded struct {
			TS     float64 `json:"ts"`
			DPRank *int    `json:"dp_rank"`
			Events []struct {
				Kind        string   `json:"kind"`
				BlockHashes []string `json:"block_hashes"`
				Parent      *string  `json:"parent"`
				TokenIDs    []int32  `json:"token_ids"`
				BlockSize   int      `json:"block_size"`
			} `json:"events"`
		} `json:"decoded"`
	} `json:"payloads"`
	Messages []struct {
		Name       string   `json:"name"`
		Socket     string   `json:"socket"`
		Publisher  []string `json:"frames_publisher_side"`
		Subscriber []string `json:"frames_subscriber_side"`
	} `json:"messages"`
	BlockHashes []struct {
		Tokens []int32 `json:"tokens"`
		Parent *string `json:"parent"`
		Hash   string  `json:"hash"`
	} `json:"block_hashes"`
}

func loadVectors(t testing.TB) vectorFile {
	t.Helper()
	b, err := os.ReadFile("testdata/kv-events-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("parse vectors: %v", err)
	}
	return v
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func hash64(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("bad hash %q: %v", s, err)
	}
	return v
}

// vectorPayloads maps each payload vector's name to its bytes.
func vectorPayloads(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	for _, p := range loadVectors(t).Payloads {
		out[p.Name] = unhex(t, p.Hex)
	}
	return out
}

// vectorBatches is the decoded form of a payload vector as a Batch.
func vectorBatches(t testing.TB) map[string]Batch {
	out := map[string]Batch{}
	for _, p := range loadVectors(t).Payloads {
		b := Batch{TS: p.Decoded.TS, Events: []Event{}}
		if p.Decoded.DPRank != nil {
			b.DPRank, b.HasDPRank = *p.Decoded.DPRank, true
		}
		for _, e := range p.Decoded.Events {
			ev := Event{TokenIDs: e.TokenIDs, BlockSize: e.BlockSize}
			switch e.Kind {
			case TagBlockStored:
				ev.Kind = KindBlockStored
			case TagBlockRemoved:
				ev.Kind = KindBlockRemoved
			case TagAllBlocksCleared:
				ev.Kind = KindAllBlocksCleared
			default:
				t.Fatalf("%s: unknown kind %q", p.Name, e.Kind)
			}
			for _, h := range e.BlockHashes {
				ev.BlockHashes = append(ev.BlockHashes, hash64(t, h))
			}
			if e.Parent != nil {
				ev.ParentHash, ev.HasParent = hash64(t, *e.Parent), true
			}
			b.Events = append(b.Events, ev)
		}
		out[p.Name] = b
	}
	return out
}

func TestVectorsDecodeAndReencode(t *testing.T) {
	// Every payload vector decodes to its documented form and re-encodes
	// to the same bytes (the encoder is what ts-fake publishes).
	payloads := vectorPayloads(t)
	want := vectorBatches(t)
	if len(want) < 6 {
		t.Fatalf("only %d payload vectors", len(want))
	}
	for name, raw := range payloads {
		got, err := DecodeBatch(raw)
		if err != nil {
			t.Errorf("%s: decode: %v", name, err)
			continue
		}
		w := want[name]
		if !reflect.DeepEqual(normalize(got), normalize(w)) {
			t.Errorf("%s: decoded\n  %+v\nwant\n  %+v", name, got, w)
		}
		enc, err := EncodeBatch(w)
		if err != nil {
			t.Errorf("%s: encode: %v", name, err)
			continue
		}
		if !bytes.Equal(enc, raw) {
			t.Errorf("%s: encoded\n  %x\nwant\n  %x", name, enc, raw)
		}
	}
}

// normalize makes empty and nil slices compare equal.
func normalize(b Batch) Batch {
	if len(b.Events) == 0 {
		b.Events = nil
	}
	for i := range b.Events {
		e := &b.Events[i]
		if len(e.TokenIDs) == 0 {
			e.TokenIDs = nil
		}
		if len(e.BlockHashes) == 0 {
			e.BlockHashes = nil
		}
	}
	return b
}

func TestVectorsMessages(t *testing.T) {
	// PUB and replay frames, both sides, as the vectors spell them.
	payloads := vectorPayloads(t)
	frames := func(spec []string) [][]byte {
		out := make([][]byte, len(spec))
		for i, s := range spec {
			if strings.HasPrefix(s, "@") {
				p, ok := payloads[s[1:]]
				if !ok {
					t.Fatalf("unknown payload %s", s)
				}
				out[i] = p
				continue
			}
			out[i] = unhex(t, s)
		}
		return out
	}
	seen := map[string]bool{}
	for _, m := range loadVectors(t).Messages {
		seen[m.Name] = true
		pub, sub := frames(m.Publisher), frames(m.Subscriber)
		switch m.Socket {
		case "PUB":
			msg, err := DecodeMessage(sub)
			if err != nil {
				t.Fatalf("%s: %v", m.Name, err)
			}
			if got := PubFrames(string(msg.Topic), msg.Seq, msg.Payload); !reflect.DeepEqual(got, pub) {
				t.Errorf("%s: PubFrames = %x, want %x", m.Name, got, pub)
			}
			if _, err := DecodeBatch(msg.Payload); err != nil {
				t.Errorf("%s: payload: %v", m.Name, err)
			}
		case "ROUTER":
			switch {
			case len(sub) == 2: // a request: DEALER sends sub, ROUTER sees pub
				id, start, ok := ParseReplayRequest(pub)
				if !ok {
					t.Fatalf("%s: ParseReplayRequest refused %x", m.Name, pub)
				}
				if got := ReplayRequest(start); !reflect.DeepEqual(got, sub) {
					t.Errorf("%s: ReplayRequest = %x, want %x", m.Name, got, sub)
				}
				if !bytes.Equal(id, pub[0]) {
					t.Errorf("%s: identity %x", m.Name, id)
				}
			default: // an answer: ROUTER sends pub, DEALER receives sub
				it, err := DecodeReplay(sub)
				if err != nil {
					t.Fatalf("%s: %v", m.Name, err)
				}
				var got [][]byte
				if it.End {
					got = ReplayEnd(pub[0])
				} else {
					got = ReplayAnswer(pub[0], it.Seq, it.Payload)
				}
				if !reflect.DeepEqual(got, pub) {
					t.Errorf("%s: answer frames = %x, want %x", m.Name, got, pub)
				}
			}
		default:
			t.Errorf("%s: unknown socket %s", m.Name, m.Socket)
		}
	}
	for _, n := range []string{"pub_first_batch", "replay_request", "replay_answer", "replay_end"} {
		if !seen[n] {
			t.Errorf("vector %s missing", n)
		}
	}
}

func TestVectorsBlockHash(t *testing.T) {
	// BlockHash is the scheduler's HashKvBlock: the vectors' hashes.
	for _, b := range loadVectors(t).BlockHashes {
		var parent uint64
		if b.Parent != nil {
			parent = hash64(t, *b.Parent)
		}
		if got, want := BlockHash(b.Tokens, parent, b.Parent != nil), hash64(t, b.Hash); got != want {
			t.Errorf("BlockHash(%v, %v) = %#x, want %#x", b.Tokens, b.Parent, got, want)
		}
	}
}

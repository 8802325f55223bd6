package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

type vector struct {
	Name      string   `json:"name"`
	Direction string   `json:"direction"`
	Socket    string   `json:"socket"`
	Gateway   []string `json:"frames_gateway_side"`
	Engine    []string `json:"frames_engine_side"`
}

// loadVectors reads testdata/zmq-lane-vectors.json (its origin:
// docs/protocol.md §12).
func loadVectors(tb testing.TB) []vector {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "zmq-lane-vectors.json"))
	if err != nil {
		tb.Fatalf("read vectors: %v", err)
	}
	var file struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		tb.Fatalf("parse vectors: %v", err)
	}
	if len(file.Vectors) != 19 {
		tb.Fatalf("want 19 vectors, got %d", len(file.Vectors))
	}
	return file.Vectors
}

func frames(tb testing.TB, hexes []string) [][]byte {
	tb.Helper()
	out := make([][]byte, len(hexes))
	for i, h := range hexes {
		b, err := hex.DecodeString(h)
		if err != nil {
			tb.Fatalf("frame %d: %v", i, err)
		}
		out[i] = b
	}
	return out
}

func vectorByName(tb testing.TB, name string) vector {
	tb.Helper()
	for _, v := range loadVectors(tb) {
		if v.Name == name {
			return v
		}
	}
	tb.Fatalf("no vector %q", name)
	return vector{}
}

// payloadOf returns the msgpack payload frame of a vector as the gateway sees it.
func payloadOf(tb testing.TB, v vector) []byte {
	f := frames(tb, v.Gateway)
	return f[len(f)-1]
}

// TestVectorsRoundTrip pins every vector: it decodes and re-encodes to the same bytes.
func TestVectorsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			gw := frames(t, v.Gateway)
			eng := frames(t, v.Engine)
			if v.Socket != "output" {
				// ROUTER side: identity first, then exactly the engine-side frames.
				if _, err := DecodeIdentity(gw[0]); err != nil {
					t.Fatal(err)
				}
				if len(gw) != len(eng)+1 {
					t.Fatalf("gateway frames %d, engine frames %d", len(gw), len(eng))
				}
			}
			for i := range eng {
				if !bytes.Equal(eng[i], gw[len(gw)-len(eng)+i]) {
					t.Fatalf("engine frame %d differs from gateway frame", i)
				}
			}
			got, err := roundTrip(v.Direction, v.Socket, eng)
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			want := eng[len(eng)-1]
			if !bytes.Equal(got, want) {
				t.Fatalf("re-encoded bytes differ\n got %x\nwant %x", got, want)
			}
		})
	}
}

// roundTrip decodes the engine-side frames with the decoder the gateway (or
// fake engine) would use and re-encodes the payload.
func roundTrip(direction, socket string, f [][]byte) ([]byte, error) {
	p := f[len(f)-1]
	switch {
	case socket == "handshake" && direction == "gateway->engine":
		m, err := DecodeInit(p)
		if err != nil {
			return nil, err
		}
		return EncodeInit(m)
	case socket == "handshake":
		m, err := DecodeHandshake(p)
		if err != nil {
			return nil, err
		}
		return EncodeHandshake(m)
	case socket == "input" && direction == "engine->gateway":
		g, err := DecodeRegistration(p)
		if err != nil {
			return nil, err
		}
		return EncodeRegistration(g)
	}
	return roundTripData(socket, f)
}

func roundTripData(socket string, f [][]byte) ([]byte, error) {
	if socket == "output" {
		if IsShutdownSentinel(f[0]) {
			return EncodeShutdownSentinel(), nil
		}
		a, err := DecodeAnyOutputFrames(f)
		if err != nil {
			return nil, err
		}
		if a.Full != nil {
			return EncodeFullOutput(*a.Full)
		}
		return EncodeOutput(a.Batch)
	}
	m, err := DecodeInputFrames(f)
	if err != nil {
		return nil, err
	}
	switch m.Type {
	case TypeAdd:
		return EncodeGenerateRequest(*m.Generate)
	case TypeAbort:
		return EncodeAbort(*m.Abort)
	}
	return nil, fmt.Errorf("type %d", m.Type)
}

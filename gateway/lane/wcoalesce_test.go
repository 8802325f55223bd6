package lane

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

func zmtpFrame(body []byte, more, cmd bool) []byte {
	var flag byte
	if more {
		flag |= flagMore
	}
	if cmd {
		flag |= flagCommand
	}
	if len(body) > 255 {
		h := make([]byte, 9)
		h[0] = flag | flagLong
		binary.BigEndian.PutUint64(h[1:], uint64(len(body)))
		return append(h, body...)
	}
	return append([]byte{flag, byte(len(body))}, body...)
}

// frameEnds finds every message end of a stream of commands and messages
// (short, long, empty and multi-frame), however the stream is cut into
// writes.
func TestFrameEndsFindsMessageEnds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var stream []byte
	var ends []int // offsets just past each message
	for range 200 {
		nf := 1 + rng.IntN(3)
		cmd := rng.IntN(5) == 0
		if cmd {
			nf = 1
		}
		for i := range nf {
			n := []int{0, 1, 17, 255, 256, 3000, 70000}[rng.IntN(7)]
			stream = append(stream, zmtpFrame(make([]byte, n), i < nf-1, cmd)...)
		}
		ends = append(ends, len(stream))
	}
	for _, cut := range []int{1, 2, 3, 9, 100, 4096, 1 << 20} {
		var f frameEnds
		next := 0 // index into ends
		for off := 0; off < len(stream); {
			k := min(cut, len(stream)-off)
			if cut > 9 {
				k = min(1+rng.IntN(cut), len(stream)-off)
			}
			got := f.feed(stream[off : off+k])
			want := false
			for next < len(ends) && ends[next] <= off+k {
				want = true
				next++
			}
			if got != want {
				t.Fatalf("cut %d, bytes [%d,%d): ended %v, want %v", cut, off, off+k, got, want)
			}
			off += k
		}
		if f.need != 0 || f.nhdr != 0 {
			t.Fatalf("cut %d: stream ends mid-frame (need %d, header %d)", cut, f.need, f.nhdr)
		}
	}
}

package zmtp

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

var testLimits = Limits{MaxFrame: 1 << 16, MaxMessage: 1 << 17, MaxFrames: 8}

// Messages come back whole however the bytes are split, commands between
// them are skipped, and a grown buffer does not move a frame already
// returned of the same message.
func TestReaderMessages(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte{7}, 3000)  // longer than the 512-byte buffer: it grows
	huge := bytes.Repeat([]byte{8}, 5000) // past maxGrow buffers: a body of its own
	var stream []byte
	stream = append(stream, Ready("PUSH")...)
	stream = AppendMessage(stream, []byte("one"))
	stream = AppendMessage(stream, []byte("a"), nil, big)
	stream = append(stream, AppendFrameHeader(nil, 5, false, true)...)
	stream = append(stream, 4, 'P', 'I', 'N', 'G')
	stream = AppendMessage(stream, []byte("last"))
	stream = AppendMessage(stream, []byte("b"), huge, []byte("c"))
	want := [][][]byte{{[]byte("one")}, {[]byte("a"), {}, big}, {[]byte("last")}, {[]byte("b"), huge, []byte("c")}}
	for name, src := range map[string]io.Reader{
		"whole":     bytes.NewReader(stream),
		"bytewise":  iotest.OneByteReader(bytes.NewReader(stream)),
		"half-read": iotest.HalfReader(bytes.NewReader(stream)),
	} {
		z := NewReader(src, testLimits, 0)
		for i, w := range want {
			got, err := z.ReadMessage()
			if err != nil {
				t.Fatalf("%s: message %d: %v", name, i, err)
			}
			if len(got) != len(w) {
				t.Fatalf("%s: message %d has %d frames, want %d", name, i, len(got), len(w))
			}
			for j := range w {
				if !bytes.Equal(got[j], w[j]) {
					t.Fatalf("%s: message %d frame %d = %q", name, i, j, got[j])
				}
			}
		}
		if _, err := z.ReadMessage(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the last message: %v, want EOF", name, err)
		}
	}
}

// What a hostile peer sends is refused as a protocol error before its
// body is buffered.
func TestReaderRefusals(t *testing.T) {
	t.Parallel()
	long := func(flags byte, n uint64) []byte {
		b := []byte{flags | FlagLong, 0, 0, 0, 0, 0, 0, 0, 0}
		for i := 0; i < 8; i++ {
			b[8-i] = byte(n >> (8 * i))
		}
		return b
	}
	var manyFrames []byte
	for range 9 {
		manyFrames = append(manyFrames, FlagMore, 0)
	}
	var overMessage []byte
	for range 3 {
		overMessage = append(overMessage, long(FlagMore, 1<<16)...)
		overMessage = append(overMessage, make([]byte, 1<<16)...)
	}
	for name, in := range map[string][]byte{
		"reserved flags":    {0x08, 0},
		"frame over cap":    long(0, 1<<16+1),
		"huge frame":        long(0, 1<<62),
		"too many frames":   manyFrames,
		"message over cap":  overMessage,
		"command inside":    {FlagMore, 1, 'x', FlagCommand, 0},
		"oversized command": long(FlagCommand, MaxCommand+1),
	} {
		z := NewReader(bytes.NewReader(in), testLimits, 0)
		_, err := z.ReadMessage()
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want a protocol error", name, err)
		}
	}
	z := NewReader(bytes.NewReader([]byte{0, 5, 'a'}), testLimits, 0)
	if _, err := z.ReadMessage(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v, want unexpected EOF", err)
	}
}

// Bytes a gate already read are read first.
func TestReaderPrime(t *testing.T) {
	t.Parallel()
	msg := AppendMessage(nil, []byte("hello"))
	z := NewReader(bytes.NewReader(msg[3:]), testLimits, 0)
	z.Prime(msg[:3])
	got, err := z.ReadMessage()
	if err != nil || len(got) != 1 || string(got[0]) != "hello" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestGreetingAndReady(t *testing.T) {
	t.Parallel()
	if err := CheckGreeting(Greeting()); err != nil {
		t.Fatal(err)
	}
	bad := Greeting()
	bad[12] = 'P'
	if err := CheckGreeting(bad); err == nil {
		t.Fatal("PLAIN-ish mechanism accepted")
	}
	old := Greeting()
	old[10] = 2
	if err := CheckGreeting(old); err == nil {
		t.Fatal("ZMTP 2 accepted")
	}
	z := NewReader(bytes.NewReader(Ready("PUSH", Property{"Identity", "\x01\x00"})), testLimits, 0)
	body, flags, err := z.ReadFrame()
	if err != nil || flags&FlagCommand == 0 {
		t.Fatalf("READY frame: %v %#x", err, flags)
	}
	c, err := ParseCommand(body)
	if err != nil || c.Name != "READY" || c.Prop("socket-type") != "PUSH" || c.Prop("Identity") != "\x01\x00" {
		t.Fatalf("READY %+v %v", c, err)
	}
	for _, b := range [][]byte{{}, {9, 'R'}, append([]byte{5}, "READY\x00"...), append([]byte{5}, "READY\x01kxxxx"...)} {
		if _, err := ParseCommand(b); err == nil {
			t.Errorf("accepted %q", b)
		}
	}
}

// The steady-state read of a connection allocates nothing. Not parallel:
// AllocsPerRun reads global memstats.
func TestReaderAllocatesNothing(t *testing.T) {
	msg := AppendMessage(nil, bytes.Repeat([]byte{1}, 300))
	stream := bytes.Repeat(msg, 200)
	src := bytes.NewReader(stream)
	z := NewReader(src, testLimits, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := z.ReadMessage(); err != nil {
			src.Reset(stream)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per message", allocs)
	}
}

// FuzzReader: no input makes the reader panic or return a frame over its
// caps, and what AppendMessage writes reads back the same.
func FuzzReader(f *testing.F) {
	f.Add([]byte("abc"), []byte{}, []byte{0xff, 0x02})
	f.Add(AppendMessage(nil, []byte("x")), []byte{0x06, 0, 0, 0, 0, 0, 0, 1, 0}, bytes.Repeat([]byte{9}, 600))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		raw := append(append(append([]byte{}, a...), b...), c...)
		z := NewReader(iotest.HalfReader(bytes.NewReader(raw)), testLimits, 0)
		for {
			frames, err := z.ReadMessage()
			if err != nil {
				break
			}
			var total int
			for _, fr := range frames {
				if int64(len(fr)) > testLimits.MaxFrame {
					t.Fatalf("frame of %d bytes", len(fr))
				}
				total += len(fr)
			}
			if int64(total) > testLimits.MaxMessage || len(frames) > testLimits.MaxFrames {
				t.Fatalf("message of %d bytes, %d frames", total, len(frames))
			}
		}
		in := [][]byte{a, b, c}
		z = NewReader(bytes.NewReader(AppendMessage(nil, in...)), testLimits, 0)
		got, err := z.ReadMessage()
		if err != nil || len(got) != 3 {
			t.Fatalf("round trip: %d frames, %v", len(got), err)
		}
		for i := range in {
			if !bytes.Equal(got[i], in[i]) {
				t.Fatalf("round trip frame %d differs", i)
			}
		}
	})
}

// Grow raises the resting size without losing bytes already read: a
// connection that starts small and grows between messages reads on.
func TestReaderGrow(t *testing.T) {
	t.Parallel()
	var stream []byte
	for i := range 4 {
		stream = AppendMessage(stream, bytes.Repeat([]byte{byte(i)}, 300))
	}
	z := NewReader(bytes.NewReader(stream), testLimits, 512)
	if _, err := z.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	left := z.Buffered()
	z.Grow(4096)
	if len(z.buf) < 4096 || z.size != 4096 || z.Buffered() != left {
		t.Fatalf("after Grow: buffer %d, size %d, buffered %d (was %d)", len(z.buf), z.size, z.Buffered(), left)
	}
	z.Grow(100) // smaller: nothing changes
	for i := 1; i < 4; i++ {
		m, err := z.ReadMessage()
		if err != nil || len(m) != 1 || !bytes.Equal(m[0], bytes.Repeat([]byte{byte(i)}, 300)) {
			t.Fatalf("message %d after Grow: %v %v", i, len(m), err)
		}
	}
	if z.size != 4096 {
		t.Fatalf("size %d after a smaller Grow", z.size)
	}
}

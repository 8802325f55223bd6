package zmtp

import (
	"encoding/binary"
	"errors"
	"io"
)

// Limits bound what one peer can make a Reader buffer.
type Limits struct {
	MaxFrame   int64 // largest frame body
	MaxMessage int64 // largest message, all frame bodies together
	MaxFrames  int   // most frames in one message; 0: 1024
}

// Reader reads frames from one connection into one reused buffer. What
// it returns points into that buffer and is valid until its next call:
// the read loop of a connection decodes a message in place and moves on,
// allocating nothing per message once the buffer fits its messages. Not
// safe for concurrent use.
type Reader struct {
	src  io.Reader
	lim  Limits
	size int // the buffer's resting size

	buf    []byte
	r, w   int   // unread bytes are buf[r:w]
	spans  []int // start, end of each frame of the message being read; start < 0: big[-1-start]
	big    [][]byte
	frames [][]byte
}

// maxGrow bounds the reused buffer, in resting sizes: a frame that would
// grow it past this gets an allocation of its own, exactly its size, so
// a message near MaxMessage costs about its size once, not the doubled
// copies of a growing buffer.
const maxGrow = 8

// NewReader reads src with a buffer of size bytes (grown, up to the
// limits, for a message that does not fit).
func NewReader(src io.Reader, lim Limits, size int) *Reader {
	if lim.MaxFrames <= 0 {
		lim.MaxFrames = 1024
	}
	if lim.MaxFrame > lim.MaxMessage && lim.MaxMessage > 0 {
		lim.MaxFrame = lim.MaxMessage
	}
	size = max(size, 512)
	return &Reader{src: src, lim: lim, size: size, buf: make([]byte, size)}
}

// Grow raises the buffer's resting size to size (a connection that
// proved to carry large messages), reallocating it now and keeping the
// unread bytes. What the last call returned is invalid after it.
func (z *Reader) Grow(size int) {
	if size <= z.size {
		return
	}
	z.size = size
	if len(z.buf) < size {
		nb := make([]byte, size)
		z.w = copy(nb, z.buf[z.r:z.w])
		z.buf, z.r = nb, 0
	}
}

// Prime queues bytes already read from the connection (by a gate that
// read the greeting) ahead of what src delivers.
func (z *Reader) Prime(b []byte) {
	if len(b) > len(z.buf)-z.w {
		nb := make([]byte, z.w-z.r+len(b)+z.size)
		z.w = copy(nb, z.buf[z.r:z.w])
		z.buf, z.r = nb, 0
	}
	z.w += copy(z.buf[z.w:], b)
}

// Buffered is how many bytes have been read from src but not returned.
func (z *Reader) Buffered() int { return z.w - z.r }

// ensure makes n bytes from z.r on available. Bytes from keep (≤ z.r)
// on are preserved; the buffer may move them, so positions are returned
// shifted: the caller subtracts the shift from every index it holds.
func (z *Reader) ensure(keep, n int) (shift int, err error) {
	for z.w-z.r < n {
		if z.r+n > len(z.buf) {
			need := z.r - keep + n
			if need > len(z.buf) {
				nb := make([]byte, max(need, 2*len(z.buf)))
				copy(nb, z.buf[keep:z.w])
				z.buf = nb
			} else {
				copy(z.buf, z.buf[keep:z.w])
			}
			shift += keep
			z.r -= keep
			z.w -= keep
			keep = 0
		}
		m, rerr := z.src.Read(z.buf[z.w:])
		z.w += m
		if rerr != nil {
			if z.w-z.r >= n {
				return shift, nil
			}
			if errors.Is(rerr, io.EOF) && z.w > z.r {
				rerr = io.ErrUnexpectedEOF
			}
			return shift, rerr
		}
	}
	return shift, nil
}

// ReadGreeting returns the peer's 64-byte greeting.
func (z *Reader) ReadGreeting() ([]byte, error) {
	if _, err := z.ensure(z.r, GreetingLen); err != nil {
		return nil, err
	}
	g := z.buf[z.r : z.r+GreetingLen]
	z.r += GreetingLen
	return g, nil
}

// header parses the frame header at z.r (ensuring its bytes), without
// consuming it. keep is passed to ensure; the shift is returned.
func (z *Reader) header(keep int) (flags byte, size uint64, hlen, shift int, err error) {
	if shift, err = z.ensure(keep, 2); err != nil {
		return 0, 0, 0, shift, err
	}
	flags = z.buf[z.r]
	if flags&^(FlagMore|FlagLong|FlagCommand) != 0 {
		return 0, 0, 0, shift, protoErr("invalid frame flags 0x%02x", flags)
	}
	if flags&FlagLong == 0 {
		return flags, uint64(z.buf[z.r+1]), 2, shift, nil
	}
	s, err := z.ensure(keep-shift, 9)
	shift += s
	if err != nil {
		return 0, 0, 0, shift, err
	}
	return flags, binary.BigEndian.Uint64(z.buf[z.r+1 : z.r+9]), 9, shift, nil
}

// ReadFrame returns the next frame, whatever it is (the handshake's
// READY, say); its body is capped by MaxFrame, a command's by MaxCommand.
func (z *Reader) ReadFrame() (body []byte, flags byte, err error) {
	flags, size, hlen, _, err := z.header(z.r)
	if err != nil {
		return nil, 0, err
	}
	limit := uint64(z.lim.MaxFrame)
	if flags&FlagCommand != 0 {
		limit = min(limit, MaxCommand)
	}
	if size > limit {
		return nil, 0, protoErr("frame of %d bytes exceeds the %d-byte limit", size, limit)
	}
	if _, err := z.ensure(z.r, hlen+int(size)); err != nil {
		return nil, 0, err
	}
	body = z.buf[z.r+hlen : z.r+hlen+int(size)]
	z.r += hlen + int(size)
	return body, flags, nil
}

// ReadMessage returns the next message's frames. Commands between
// messages (a 3.1 peer's PING) are skipped; one inside a message, a
// frame over MaxFrame, a message over MaxMessage or MaxFrames is a
// ProtocolError, found before the frame's body is read.
func (z *Reader) ReadMessage() ([][]byte, error) {
	if len(z.buf) > 4*z.size && z.w-z.r <= z.size {
		// A large message grew the buffer; the next ones are small.
		nb := make([]byte, z.size)
		z.w = copy(nb, z.buf[z.r:z.w])
		z.buf, z.r = nb, 0
	}
	start := z.r // the message's first byte, kept in the buffer
	z.spans = z.spans[:0]
	clear(z.big) // the last message's big frames are the caller's no more
	z.big = z.big[:0]
	var total uint64
	for {
		flags, size, hlen, shift, err := z.header(start)
		start -= shift
		if err != nil {
			return nil, err
		}
		if flags&FlagCommand != 0 {
			if len(z.spans) > 0 {
				return nil, protoErr("command frame inside a message")
			}
			if size > MaxCommand {
				return nil, protoErr("command of %d bytes", size)
			}
			if _, err := z.ensure(z.r, hlen+int(size)); err != nil {
				return nil, err
			}
			z.r += hlen + int(size)
			start = z.r
			continue
		}
		if size > uint64(z.lim.MaxFrame) {
			return nil, protoErr("frame of %d bytes exceeds the %d-byte limit", size, z.lim.MaxFrame)
		}
		total += size
		if total > uint64(z.lim.MaxMessage) {
			return nil, protoErr("message of more than %d bytes exceeds the %d-byte limit", total, z.lim.MaxMessage)
		}
		if len(z.spans)/2 >= z.lim.MaxFrames {
			return nil, protoErr("message of more than %d frames", z.lim.MaxFrames)
		}
		if z.r-start+hlen+int(size) > maxGrow*z.size {
			// The frames before it leave the buffer too, so that it need
			// not keep the message's bytes from start on.
			for i := 0; i < len(z.spans); i += 2 {
				if lo := z.spans[i]; lo >= 0 {
					z.spans[i] = -1 - len(z.big)
					z.big = append(z.big, append([]byte(nil), z.buf[start+lo:start+z.spans[i+1]]...))
				}
			}
			body, err := z.readBig(hlen, int(size))
			if err != nil {
				return nil, err
			}
			z.spans = append(z.spans, -1-len(z.big), 0)
			z.big = append(z.big, body)
			start = z.r
		} else {
			shift, err = z.ensure(start, hlen+int(size))
			start -= shift
			if err != nil {
				return nil, err
			}
			lo := z.r + hlen - start
			z.spans = append(z.spans, lo, lo+int(size))
			z.r += hlen + int(size)
		}
		if flags&FlagMore == 0 {
			break
		}
	}
	z.frames = z.frames[:0]
	for i := 0; i < len(z.spans); i += 2 {
		if z.spans[i] < 0 {
			z.frames = append(z.frames, z.big[-1-z.spans[i]])
			continue
		}
		lo, hi := start+z.spans[i], start+z.spans[i+1]
		z.frames = append(z.frames, z.buf[lo:hi:hi])
	}
	return z.frames, nil
}

// readBig reads a frame body (its header of hlen bytes at z.r) into an
// allocation of its own; the buffer keeps whatever follows it.
func (z *Reader) readBig(hlen, size int) ([]byte, error) {
	z.r += hlen
	body := make([]byte, size)
	n := copy(body, z.buf[z.r:z.w])
	z.r += n
	if n < size {
		if _, err := io.ReadFull(z.src, body[n:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return body, nil
}

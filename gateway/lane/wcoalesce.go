package lane

import "encoding/binary"

// zmq4 writes every frame as two writes, its header and then its body
// (a two-frame ADD is four write syscalls), and its writev path does not
// reach the socket through trackedConn. frameEnds follows the outgoing
// ZMTP frames so trackedConn can hold a message's bytes and write them
// once its last frame (no MORE flag) is complete.

// wbufMax bounds what is held; a message larger than this goes out in
// pieces, as before.
const wbufMax = 64 << 10

// frameEnds tracks the frame structure of an outgoing byte stream that
// starts at a frame boundary (after the greeting).
type frameEnds struct {
	hdr  [9]byte
	nhdr int    // header bytes seen of the current frame
	need uint64 // body bytes still to come
	more bool   // the current frame has MORE set
}

// feed steps over b and reports whether a whole message ended in it.
func (f *frameEnds) feed(b []byte) (ended bool) {
	for len(b) > 0 {
		if f.need > 0 {
			k := uint64(len(b))
			if k > f.need {
				k = f.need
			}
			f.need -= k
			b = b[k:]
			if f.need == 0 && !f.more {
				ended = true
			}
			continue
		}
		// In a header.
		f.hdr[f.nhdr] = b[0]
		f.nhdr++
		b = b[1:]
		want := 2
		if f.hdr[0]&flagLong != 0 {
			want = 9
		}
		if f.nhdr < want {
			continue
		}
		f.more = f.hdr[0]&flagMore != 0
		if want == 2 {
			f.need = uint64(f.hdr[1])
		} else {
			f.need = binary.BigEndian.Uint64(f.hdr[1:9])
		}
		f.nhdr = 0
		if f.need == 0 && !f.more {
			ended = true
		}
	}
	return ended
}

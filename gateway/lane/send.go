package lane

// The ROUTER's send side. zmq4's ROUTER send ran a goroutine and a
// context with a timeout per message and wrote each frame's header and
// body separately; here a message goes to its identity's admitted
// connection as one write of ZMTP frames, under that connection's write
// lock and the transport's write deadline. The socket's one sender (the
// worker's sender for the input socket, sendq.go) hands over everything queued
// at once, and consecutive messages for one identity share one write. A
// send waits until the connection's owner has written our READY
// (trackedConn.zready).

import (
	"errors"
	"fmt"

	"github.com/tsd-project/tsd/gateway/zmtp"
)

// batchSender is a Socket that sends queued messages together; errs[i]
// is message i's outcome.
type batchSender interface {
	sendBatch(msgs [][][]byte, errs []error)
}

// sendBatch sends ROUTER messages ([identity, frames...] each), one write
// per run of messages for the same identity.
func (s *zsock) sendBatch(msgs [][][]byte, errs []error) {
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && len(msgs[j]) > 0 && len(msgs[i]) > 0 && string(msgs[j][0]) == string(msgs[i][0]) {
			j++
		}
		err := s.sendRun(msgs[i:j])
		for k := i; k < j; k++ {
			errs[k] = err
		}
		i = j
	}
}

// sendRun writes messages for one identity to each of its connections
// (one, unless a vetted peer is taking it over).
func (s *zsock) sendRun(msgs [][][]byte) error {
	if s.closed.Load() {
		return ErrClosed
	}
	for _, m := range msgs {
		if len(m) < 2 {
			return fmt.Errorf("send on %s %s: need identity and at least one frame", s.kind, s.endpoint)
		}
	}
	id := msgs[0][0]
	var few [2]*trackedConn
	cs := few[:0]
	s.mu.Lock()
	for c := range s.conns[string(id)] {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	if len(cs) == 0 {
		return ErrNoPeer
	}
	var errs []error
	for _, c := range cs {
		if err := c.writeMessages(msgs); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(cs) {
		return fmt.Errorf("send on %s %s: %w", s.kind, s.endpoint, errors.Join(errs...))
	}
	return nil // a connection being taken over failed; the live one has it
}

// writeMessages frames msgs (their identity frames dropped: a ROUTER
// routes by them, the peer does not see them) into the connection's
// buffer and writes it once.
func (c *trackedConn) writeMessages(msgs [][][]byte) error {
	if err := c.waitReady(); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := c.obuf[:0]
	for _, m := range msgs {
		b = zmtp.AppendMessage(b, m[1:]...)
	}
	_, err := c.write(b)
	if cap(b) <= connReadBuf {
		c.obuf = b[:0] // a huge message's buffer is not kept
	} else {
		c.obuf = nil
	}
	return err
}

package kvevents

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// A minimal ZMTP 3.0 client (NULL security) for the two sockets the
// gateway opens towards an engine's publisher: a SUB on its PUB and a
// DEALER on its replay ROUTER (docs/protocol.md §16.2). Written here, not
// taken from zmq4, because a publisher is a peer the gateway does not
// control: zmq4 allocates whatever frame size the peer announces, while
// this client checks every frame and message against its caps before it
// allocates. It speaks 3.0, so libzmq and zmq4 both take subscriptions as
// the legacy message (0x01 + topic) and send no heartbeats.

// Socket types the client announces, and the peer types they pair with.
const (
	typeSUB    = "SUB"
	typeDEALER = "DEALER"
)

var peerTypes = map[string][]string{typeSUB: {"PUB", "XPUB"}, typeDEALER: {"ROUTER", "DEALER"}}

// Limits bound what one peer can make the client buffer.
type Limits struct {
	MaxFrame   int64 // largest frame accepted; 0: 4 MiB
	MaxMessage int64 // largest whole message; 0: 4 MiB
}

// One scheduler step's batch is tens of KB (a chunked prefill of 8192
// tokens stores 128 pages of about 200 bytes each); 4 MiB leaves a wide
// margin while keeping what a peer can make the gateway hold small.
func (l Limits) withDefaults() Limits {
	if l.MaxFrame <= 0 {
		l.MaxFrame = 4 << 20
	}
	if l.MaxMessage <= 0 {
		l.MaxMessage = 4 << 20
	}
	if l.MaxFrame > l.MaxMessage {
		l.MaxFrame = l.MaxMessage
	}
	return l
}

// protocolError is a peer breaking the protocol (a frame over the cap,
// bad framing), as opposed to a connection that ends: the subscriber
// stops trusting that publisher until it sends valid data again.
type protocolError struct{ err error }

func (e protocolError) Error() string { return e.err.Error() }
func (e protocolError) Unwrap() error { return e.err }

// zconn is one connection. Recv is for one goroutine, Send for one.
type zconn struct {
	c   net.Conn
	br  *bufio.Reader
	lim Limits
}

// dialZMTP connects to a tcp:// endpoint, runs the greeting and the NULL
// handshake as sockType, all before ctx ends (or timeout passes).
func dialZMTP(ctx context.Context, endpoint, sockType string, lim Limits, timeout time.Duration) (*zconn, error) {
	addr, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return nil, fmt.Errorf("endpoint %q: want tcp://HOST:PORT", endpoint)
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	z := &zconn{c: c, br: bufio.NewReaderSize(c, 32<<10), lim: lim.withDefaults()}
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	if err := z.handshake(sockType); err != nil {
		c.Close()
		return nil, fmt.Errorf("ZMTP handshake with %s: %w", endpoint, err)
	}
	_ = c.SetDeadline(time.Time{})
	return z, nil
}

func greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:], "NULL")
	return g
}

func (z *zconn) handshake(sockType string) error {
	var ready []byte
	ready = append(ready, 5)
	ready = append(ready, "READY"...)
	ready = appendProp(ready, "Socket-Type", sockType)
	if sockType == typeDEALER {
		ready = appendProp(ready, "Identity", "")
	}
	out := append(greeting(), frameHeader(nil, len(ready), false, true)...)
	if _, err := z.c.Write(append(out, ready...)); err != nil {
		return err
	}
	var g [64]byte
	if _, err := io.ReadFull(z.br, g[:]); err != nil {
		return fmt.Errorf("read greeting: %w", err)
	}
	if g[0] != 0xff || g[9]&1 != 1 {
		return errors.New("peer is not a ZMTP 3 peer (bad signature)")
	}
	if g[10] < 3 {
		return fmt.Errorf("peer speaks ZMTP %d.%d, want 3.x", g[10], g[11])
	}
	if mech := strings.TrimRight(string(g[12:32]), "\x00"); mech != "NULL" {
		return fmt.Errorf("peer wants security mechanism %q, only NULL is supported", mech)
	}
	body, cmd, _, err := z.readFrame(z.lim.MaxFrame)
	if err != nil {
		return fmt.Errorf("read READY: %w", err)
	}
	if !cmd {
		return errors.New("peer sent a message before READY")
	}
	name, props, err := parseCommand(body)
	if err != nil {
		return err
	}
	if name == "ERROR" {
		return fmt.Errorf("peer refused: %s", props["_reason"])
	}
	if name != "READY" {
		return fmt.Errorf("peer sent %s instead of READY", name)
	}
	pt := props["Socket-Type"]
	for _, ok := range peerTypes[sockType] {
		if pt == ok {
			return nil
		}
	}
	return fmt.Errorf("peer socket type %q does not pair with %s", pt, sockType)
}

func appendProp(b []byte, name, value string) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// parseCommand reads a command body: name, then (for READY) properties.
func parseCommand(body []byte) (string, map[string]string, error) {
	if len(body) < 1 || int(body[0]) > len(body)-1 {
		return "", nil, errors.New("malformed command frame")
	}
	name := string(body[1 : 1+body[0]])
	rest := body[1+body[0]:]
	props := map[string]string{}
	if name == "ERROR" {
		if len(rest) > 0 && int(rest[0]) <= len(rest)-1 {
			props["_reason"] = string(rest[1 : 1+rest[0]])
		}
		return name, props, nil
	}
	for len(rest) > 0 {
		n := int(rest[0])
		if len(rest) < 1+n+4 {
			return "", nil, errors.New("malformed property in " + name)
		}
		k := string(rest[1 : 1+n])
		vl := binary.BigEndian.Uint32(rest[1+n:])
		rest = rest[1+n+4:]
		if uint64(vl) > uint64(len(rest)) {
			return "", nil, errors.New("malformed property value in " + name)
		}
		props[k] = string(rest[:vl])
		rest = rest[vl:]
	}
	return name, props, nil
}

func frameHeader(b []byte, n int, more, cmd bool) []byte {
	var flags byte
	if more {
		flags |= 0x01
	}
	if cmd {
		flags |= 0x04
	}
	if n > 255 {
		return binary.BigEndian.AppendUint64(append(b, flags|0x02), uint64(n))
	}
	return append(b, flags, byte(n))
}

// send writes one message (all frames in one write).
func (z *zconn) send(frames [][]byte) error {
	var b []byte
	for i, f := range frames {
		b = frameHeader(b, len(f), i < len(frames)-1, false)
		b = append(b, f...)
	}
	_, err := z.c.Write(b)
	return err
}

// readFrame reads one frame whose size must not exceed limit.
func (z *zconn) readFrame(limit int64) (body []byte, cmd, more bool, err error) {
	flags, err := z.br.ReadByte()
	if err != nil {
		return nil, false, false, err
	}
	if flags&^0x07 != 0 {
		return nil, false, false, protocolError{fmt.Errorf("invalid frame flags 0x%02x", flags)}
	}
	var n uint64
	if flags&0x02 != 0 {
		var s [8]byte
		if _, err := io.ReadFull(z.br, s[:]); err != nil {
			return nil, false, false, err
		}
		n = binary.BigEndian.Uint64(s[:])
	} else {
		c, err := z.br.ReadByte()
		if err != nil {
			return nil, false, false, err
		}
		n = uint64(c)
	}
	if n > uint64(limit) {
		return nil, false, false, protocolError{fmt.Errorf("frame of %d bytes exceeds the %d-byte limit", n, limit)}
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(z.br, body); err != nil {
		return nil, false, false, err
	}
	return body, flags&0x04 != 0, flags&0x01 != 0, nil
}

// recv returns the next message; commands between messages (a 3.1
// peer's PING, say) are skipped.
func (z *zconn) recv() ([][]byte, error) {
	var frames [][]byte
	var total int64
	for {
		left := min(z.lim.MaxFrame, z.lim.MaxMessage-total)
		body, cmd, more, err := z.readFrame(left)
		if err != nil {
			return nil, err
		}
		if cmd {
			if len(frames) > 0 {
				return nil, protocolError{errors.New("command frame inside a message")}
			}
			continue
		}
		total += int64(len(body))
		frames = append(frames, body)
		if len(frames) > 64 {
			return nil, protocolError{errors.New("message of more than 64 frames")}
		}
		if !more {
			return frames, nil
		}
	}
}

func (z *zconn) setReadDeadline(t time.Time) { _ = z.c.SetReadDeadline(t) }

func (z *zconn) close() { _ = z.c.Close() }

// subscribe sends a SUB's subscription to topic ("" = everything), in
// ZMTP 3.0's message form.
func (z *zconn) subscribe(topic string) error {
	return z.send([][]byte{append([]byte{1}, topic...)})
}

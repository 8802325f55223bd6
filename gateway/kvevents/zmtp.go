package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/tsd-project/tsd/gateway/zmtp"
)

// A minimal ZMTP 3.0 client (NULL security) for the two sockets the
// gateway opens towards an engine's publisher: a SUB on its PUB and a
// DEALER on its replay ROUTER (docs/protocol.md §16.2). Written here, not
// taken from zmq4, because a publisher is a peer the gateway does not
// control: zmq4 allocates whatever frame size the peer announces, while
// this client checks every frame and message against its caps before it
// allocates (the framing is gateway/zmtp's, shared with the lane). It
// speaks 3.0, so libzmq and zmq4 both take subscriptions as the legacy
// message (0x01 + topic) and send no heartbeats.

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

// maxFrames bounds the frames of one message (a KV event message has 3,
// a replay answer 3).
const maxFrames = 64

// protocolError is a peer breaking the protocol (a frame over the cap,
// bad framing), as opposed to a connection that ends: the subscriber
// stops trusting that publisher until it sends valid data again.
type protocolError struct{ err error }

func (e protocolError) Error() string { return e.err.Error() }
func (e protocolError) Unwrap() error { return e.err }

// asProtocol marks a framing violation from the reader as protocolError.
func asProtocol(err error) error {
	if errors.Is(err, zmtp.ErrProtocol) {
		return protocolError{err}
	}
	return err
}

// zconn is one connection. Recv is for one goroutine, Send for one.
type zconn struct {
	c  net.Conn
	rd *zmtp.Reader
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
	lim = lim.withDefaults()
	z := &zconn{c: c, rd: zmtp.NewReader(c, zmtp.Limits{MaxFrame: lim.MaxFrame, MaxMessage: lim.MaxMessage, MaxFrames: maxFrames}, 32<<10)}
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

func (z *zconn) handshake(sockType string) error {
	var props []zmtp.Property
	if sockType == typeDEALER {
		props = append(props, zmtp.Property{Name: "Identity"})
	}
	if _, err := z.c.Write(append(zmtp.Greeting(), zmtp.Ready(sockType, props...)...)); err != nil {
		return err
	}
	g, err := z.rd.ReadGreeting()
	if err != nil {
		return fmt.Errorf("read greeting: %w", err)
	}
	if err := zmtp.CheckGreeting(g); err != nil {
		return errors.New(err.Error())
	}
	body, flags, err := z.rd.ReadFrame()
	if err != nil {
		return fmt.Errorf("read READY: %w", asProtocol(err))
	}
	if flags&zmtp.FlagCommand == 0 {
		return errors.New("peer sent a message before READY")
	}
	cmd, err := zmtp.ParseCommand(body)
	if err != nil {
		return errors.New(err.Error())
	}
	if cmd.Name == "ERROR" {
		return fmt.Errorf("peer refused: %s", cmd.Reason)
	}
	if cmd.Name != "READY" {
		return fmt.Errorf("peer sent %s instead of READY", cmd.Name)
	}
	pt := cmd.Prop("Socket-Type")
	for _, ok := range peerTypes[sockType] {
		if pt == ok {
			return nil
		}
	}
	return fmt.Errorf("peer socket type %q does not pair with %s", pt, sockType)
}

// send writes one message (all frames in one write).
func (z *zconn) send(frames [][]byte) error {
	_, err := z.c.Write(zmtp.AppendMessage(nil, frames...))
	return err
}

// recv returns the next message, its frames copied (the decoded events
// may keep them); commands between messages (a 3.1 peer's PING, say) are
// skipped.
func (z *zconn) recv() ([][]byte, error) {
	frames, err := z.rd.ReadMessage()
	if err != nil {
		return nil, asProtocol(err)
	}
	out := make([][]byte, len(frames))
	for i, f := range frames {
		out[i] = append([]byte(nil), f...)
	}
	return out, nil
}

func (z *zconn) setReadDeadline(t time.Time) { _ = z.c.SetReadDeadline(t) }

func (z *zconn) close() { _ = z.c.Close() }

// subscribe sends a SUB's subscription to topic ("" = everything), in
// ZMTP 3.0's message form.
func (z *zconn) subscribe(topic string) error {
	return z.send([][]byte{append([]byte{1}, topic...)})
}

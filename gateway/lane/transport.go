// Package lane is the gateway side of the direct ZMQ lane (zmq-lane.md):
// one socket set per worker, the per-rank handshake state machine, the rank
// registry, request/response multiplexing by rid and death detection.
package lane

import (
	"errors"
	"time"
)

// SocketKind is the ZMQ socket type the gateway binds.
type SocketKind int

// The two kinds the gateway binds (zmq-lane.md §1.1).
const (
	Router SocketKind = iota
	Pull
)

func (k SocketKind) String() string {
	if k == Pull {
		return "PULL"
	}
	return "ROUTER"
}

// PeerEvent says that the first connection of a peer identity came up, or
// that its last connection went away. PULL peers have no identity (nil);
// their events count connections.
type PeerEvent struct {
	Identity []byte
	Up       bool
	Live     int // connections of that identity after the change
}

// Socket is the narrow view of one bound ZMQ socket the lane needs.
type Socket interface {
	// Endpoint is the concrete bound endpoint (ephemeral tcp ports read back).
	Endpoint() string
	// Recv returns the next message; on a ROUTER frame 0 is the identity.
	// It returns ErrClosed after Close.
	Recv() ([][]byte, error)
	// Send sends frames; on a ROUTER frame 0 names the peer. Sending to an
	// identity with no live connection fails with ErrNoPeer, like libzmq's
	// ROUTER_MANDATORY, instead of dropping the message silently.
	Send(frames [][]byte) error
	// Live reports how many live connections an identity has.
	Live(identity []byte) int
	// Events delivers peer up/down transitions; it is closed by Close.
	Events() <-chan PeerEvent
	Close() error
}

// Transport binds sockets.
type Transport interface {
	Bind(kind SocketKind, endpoint string) (Socket, error)
}

// TransportOptions bound what a misbehaving peer can do to the gateway.
type TransportOptions struct {
	// WriteTimeout cuts off a peer that stops reading; 0 means 10 s.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds the ZMTP greeting of a new connection, so a
	// peer that connects and says nothing cannot stall the accept loop;
	// 0 means 5 s.
	HandshakeTimeout time.Duration
	// MaxFrame is the largest frame accepted from a peer; 0 means 64 MiB.
	MaxFrame int64
	// OnPanic hears a panic caught in a connection's ZMTP watcher (the
	// connection is cut, the daemon lives on).
	OnPanic PanicFunc
}

func (o TransportOptions) withDefaults() TransportOptions {
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = 64 << 20
	}
	return o
}

// Errors a Socket returns.
var (
	ErrClosed = errors.New("socket closed")
	ErrNoPeer = errors.New("no live connection for identity")
)

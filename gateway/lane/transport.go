// Package lane is the gateway side of the direct ZMQ lane (docs/protocol.md):
// one socket set per worker, the per-rank handshake state machine, the rank
// registry, request/response multiplexing by rid and death detection.
package lane

import (
	"errors"
	"log/slog"
	"time"
)

// SocketKind is the ZMQ socket type the gateway binds.
type SocketKind int

// The two kinds the gateway binds (docs/protocol.md §1.1).
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
	// HandshakeTimeout bounds the ZMTP greeting (and READY) of a new
	// connection; greetings run concurrently, so a slow peer delays
	// nobody else. 0 means 5 s.
	HandshakeTimeout time.Duration
	// MaxFrame is the largest frame accepted from a peer; 0 means 64 MiB.
	MaxFrame int64
	// OnPanic hears a panic caught in a connection's greeting or reader
	// (the connection is cut, the daemon lives on).
	OnPanic PanicFunc
	// MaxMessage caps a whole multi-frame message (every frame of a
	// message is buffered before it is handed over, so a frame cap alone
	// would let one peer grow us without bound); 0 means DefaultMaxMessage.
	MaxMessage int64
	// FirstMessageTimeout closes a ROUTER connection that completes the
	// ZMTP greeting but sends no message (a rank sends HELLO or its
	// registration right after connecting); 0 means 30 s.
	FirstMessageTimeout time.Duration
	// MaxConns caps the connections of one socket, admitted or still
	// greeting, so idle peers cannot pin the fd limit; 0 means 256.
	MaxConns int
	// MaxPending caps one socket's unsettled connections: those still
	// greeting, and a ROUTER's admitted ones before their first message
	// (HELLO or a registration); 0 means 64. MaxPendingTotal caps them
	// over every socket the transport binds; 0 means 256. What an
	// unsettled connection may cost is small (churn.go), and these make
	// it small in total.
	MaxPending      int
	MaxPendingTotal int
	// ChurnRate and ChurnBurst limit new connections per source (a
	// remote address; a local peer's user): each takes a token, one that
	// settles gives it back, and a source without tokens is refused at
	// accept. Tokens refill at ChurnRate a second up to ChurnBurst; 0
	// means 16 and 64. Negative ChurnRate turns the limit off.
	ChurnRate  float64
	ChurnBurst int
}

// DefaultMaxMessage bounds one inbound message. The largest thing an engine
// legitimately sends us is an output batch; the largest tensor on the lane
// at all is an encode request's pixels (gateway/epd ImageItem: Qwen2-VL's
// default max_pixels 28*28*1280 gives 5120 patches of 1176 float32, 24 MB
// per image). 128 MiB leaves room for five such images or a prompt-logprob
// batch of a long context, while a rogue connection can no longer make us
// buffer gigabytes.
const DefaultMaxMessage = 128 << 20

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
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
	if o.MaxFrame > o.MaxMessage {
		o.MaxFrame = o.MaxMessage
	}
	if o.FirstMessageTimeout <= 0 {
		o.FirstMessageTimeout = 30 * time.Second
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 256
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 64
	}
	if o.MaxPendingTotal <= 0 {
		o.MaxPendingTotal = 256
	}
	if o.ChurnRate == 0 {
		o.ChurnRate = 16
	}
	if o.ChurnBurst <= 0 {
		o.ChurnBurst = 64
	}
	return o
}

// Errors a Socket returns.
var (
	ErrClosed = errors.New("socket closed")
	ErrNoPeer = errors.New("no live connection for identity")
)

// PeerInfo is what the transport knows about a connecting peer. An ipc
// peer's PID and UID come from SO_PEERCRED; a loopback tcp peer's UID
// and socket Inode from the kernel's socket table, its PID only through
// Process, among the processes a check names (peer.go). PID 0, UID -1
// and Inode 0 are unknown (a remote tcp peer).
type PeerInfo struct {
	Network  string // "tcp" or "unix"
	Addr     string // remote address ("" for unnamed unix peers)
	Identity []byte // ZMTP identity from the peer's READY
	PID      int
	UID      int
	Inode    uint64
}

// BindOptions are per-socket admission rules.
type BindOptions struct {
	// Role names the worker in log lines and is passed to Check.
	Role string
	// Check vets a peer after its greeting and before it is admitted; an
	// error refuses the connection (closed, logged). An ipc peer comes
	// with its PID (SO_PEERCRED); a loopback tcp peer with its socket's
	// Inode and no PID: the check finds the process among the ones it
	// admits (PeerInfo.Process), which keeps it from reading every
	// process (peer.go). A peer passing it may take over a live identity
	// (a restarted rank whose old connection lingers). Without it a
	// second connection for a live identity is always refused.
	Check func(PeerInfo) error
	// Logger receives refusals; nil discards them.
	Logger *slog.Logger
	// Sink, on a PULL socket, makes one message handler per connection;
	// the connection's reader goroutine calls it with each message,
	// whose frames are valid only during the call (they are the reader's
	// reused buffer). Recv then returns nothing until Close.
	Sink func() func(frames [][]byte)
}

// CheckedTransport is a Transport that applies BindOptions.
type CheckedTransport interface {
	Transport
	BindWith(kind SocketKind, endpoint string, o BindOptions) (Socket, error)
}

// PeerAddresser is implemented by sockets that can name the remote
// addresses of an identity's live connections (for log lines).
type PeerAddresser interface {
	PeerAddrs(identity []byte) []string
	// Disconnect closes every connection of the identity.
	Disconnect(identity []byte)
}

package profiles

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Worker is a parsed worker URL (ipc://PATH or tcp://HOST:PORT).
type Worker struct {
	Scheme string // "ipc" or "tcp"
	Path   string // ipc: the socket path prefix, exactly as written
	Host   string // tcp: host without brackets
	Port   int    // tcp: handshake port
	// HSPort, when set, replaces an ipc worker's derived handshake port:
	// the planner moves it when the derived one is already taken on this
	// host (another deployment's), since tsd's gateway and the engine's
	// --data-parallel-rpc-port both come from the plan.
	HSPort int
}

// ParseWorker parses a worker URL and applies the rules every worker URL
// must meet (docs/protocol.md): ipc needs a path, tcp a concrete host
// (not a wildcard, since it is advertised to engines) and a port.
func ParseWorker(url string) (Worker, error) {
	switch {
	case strings.HasPrefix(url, "ipc://"):
		path := strings.TrimPrefix(url, "ipc://")
		if path == "" {
			return Worker{}, fmt.Errorf("%q: an ipc worker needs a path, e.g. ipc:///run/tsd/prefill", url)
		}
		if strings.ContainsAny(path, "\x00\n") {
			return Worker{}, fmt.Errorf("%q: the ipc path holds a control character", url)
		}
		return Worker{Scheme: "ipc", Path: path}, nil
	case strings.HasPrefix(url, "tcp://"):
		hp := strings.TrimPrefix(url, "tcp://")
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			return Worker{}, fmt.Errorf("%q: want tcp://HOST:PORT: %v", url, err)
		}
		if isWildcard(host) {
			return Worker{}, fmt.Errorf("%q: the host is a wildcard; engines dial this address, so name the gateway's address they can reach (e.g. 127.0.0.1 or 10.0.0.5)", url)
		}
		if strings.ContainsAny(host, "/ \t") {
			return Worker{}, fmt.Errorf("%q: %q is not a host name or address", url, host)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return Worker{}, fmt.Errorf("%q: the port must be 1-65535 (the handshake listens there)", url)
		}
		return Worker{Scheme: "tcp", Host: host, Port: n}, nil
	}
	return Worker{}, fmt.Errorf("%q: a worker URL is ipc://PATH or tcp://HOST:PORT", url)
}

func isWildcard(host string) bool {
	switch host {
	case "", "*", "0.0.0.0", "::", "[::]", "0:0:0:0:0:0:0:0":
		return true
	}
	return false
}

// URL prints the worker back in canonical form.
func (w Worker) URL() string {
	if w.Scheme == "ipc" {
		return "ipc://" + w.Path
	}
	return "tcp://" + net.JoinHostPort(w.Host, strconv.Itoa(w.Port))
}

// DialHost and DialPort are what the engine gets as --data-parallel-address
// and --data-parallel-rpc-port.
func (w Worker) DialHost() string {
	if w.Scheme == "ipc" {
		return "127.0.0.1"
	}
	return w.Host
}

// DialPort is the handshake port: the tcp port, or the one derived from
// the ipc path.
func (w Worker) DialPort() int {
	if w.Scheme == "ipc" {
		if w.HSPort > 0 {
			return w.HSPort
		}
		return HandshakePort(w.Path)
	}
	return w.Port
}

// Handshake is the address the gateway's handshake ROUTER binds.
func (w Worker) Handshake() string {
	return "tcp://" + net.JoinHostPort(w.DialHost(), strconv.Itoa(w.DialPort()))
}

// Input and Output are the gateway's data-plane bind addresses: ipc
// sockets beside the path, or ephemeral ports on the tcp host.
func (w Worker) Input() string {
	if w.Scheme == "ipc" {
		return "ipc://" + w.Path + "-in.sock"
	}
	return "tcp://" + net.JoinHostPort(w.Host, "0")
}

// Output is the output PULL's bind address.
func (w Worker) Output() string {
	if w.Scheme == "ipc" {
		return "ipc://" + w.Path + "-out.sock"
	}
	return "tcp://" + net.JoinHostPort(w.Host, "0")
}

// Handshake port band of ipc workers (docs/protocol.md).
const (
	HandshakeBandLo = 20000
	HandshakeBandHi = 29999
	EphemeralLo     = 32768
	EphemeralHi     = 60999
)

// HandshakePort derives an ipc worker's handshake port from its path
// exactly as SMG does: 64-bit FNV-1a over the path bytes, then
// 20000 + h mod 10000.
func HandshakePort(path string) int {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(path); i++ {
		h ^= uint64(path[i])
		h *= 0x100000001b3
	}
	return HandshakeBandLo + int(h%10000)
}

// MaxSocketPath is the longest Unix socket path the kernel accepts
// (sun_path is 108 bytes including the terminating NUL).
const MaxSocketPath = 107

package procfs

// One TCP socket looked up by its exact addresses, without reading the
// socket table. The lane maps every loopback peer of a handshake port to
// its process (gateway/lane/peer.go); reading the whole of /proc/net/tcp
// for each connection made a local process that churned connections
// grow tsd by gigabytes (every row parsed, per connection, while the
// churn's own TIME_WAIT rows made the table longer). The kernel's
// sock_diag netlink interface answers the same question for one
// 4-tuple with one message of about a hundred bytes; FindTCPSocket is
// the bounded fallback for a kernel without it.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotFound says the kernel knows no socket with those addresses (the
// peer already closed it, or the addresses are not a connection's).
var ErrNotFound = errors.New("no such socket")

// ErrNoSockDiag says the kernel does not answer sock_diag requests; the
// caller falls back to FindTCPSocket.
var ErrNoSockDiag = errors.New("sock_diag unavailable")

// Sizes of the netlink structures (linux/netlink.h, linux/inet_diag.h).
const (
	nlmsgHdrLen     = 16 // struct nlmsghdr
	inetDiagReqLen  = 56 // struct inet_diag_req_v2
	inetDiagMsgLen  = 72 // struct inet_diag_msg
	inetDiagSockLen = 48 // struct inet_diag_sockid
	diagReplyBuf    = 4096
	diagTimeout     = time.Second
)

// diagSeq numbers requests, so a reply is matched to its own request.
var diagSeq atomic.Uint32

// TCPSocketByAddr returns the inode and owner uid of the TCP socket whose
// local address is local and remote address remote. For a connection a
// peer on this host made to us, pass the peer's address as local and
// ours as remote: the answer is the peer's socket.
func TCPSocketByAddr(local, remote netip.AddrPort) (inode uint64, uid int, err error) {
	req, family, err := diagRequest(local, remote, diagSeq.Add(1))
	if err != nil {
		return 0, -1, err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, -1, fmt.Errorf("%w: open netlink socket: %v", ErrNoSockDiag, err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(diagTimeout.Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, -1, fmt.Errorf("%w: send request: %v", ErrNoSockDiag, err)
	}
	var buf [diagReplyBuf]byte
	n, _, err := unix.Recvfrom(fd, buf[:], 0)
	if err != nil {
		return 0, -1, fmt.Errorf("%w: read reply: %v", ErrNoSockDiag, err)
	}
	return parseDiagReply(buf[:n], binary.NativeEndian.Uint32(req[8:12]), family, local, remote)
}

// diagRequest is one SOCK_DIAG_BY_FAMILY request for the TCP socket
// (local, remote): a netlink header and an inet_diag_req_v2.
func diagRequest(local, remote netip.AddrPort, seq uint32) ([]byte, uint8, error) {
	if !local.IsValid() || !remote.IsValid() {
		return nil, 0, fmt.Errorf("look up socket %s→%s: invalid address", local, remote)
	}
	l, r := local.Addr().Unmap(), remote.Addr().Unmap()
	family := uint8(unix.AF_INET)
	if l.Is6() || r.Is6() {
		family = unix.AF_INET6
		l, r = as16(l), as16(r)
	}
	b := make([]byte, nlmsgHdrLen+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:4], uint32(len(b)))
	ne.PutUint16(b[4:6], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:8], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:12], seq)
	q := b[nlmsgHdrLen:]
	q[0], q[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(q[4:8], ^uint32(0)) // every state
	putSockID(q[8:8+inetDiagSockLen], l, local.Port(), r, remote.Port())
	return b, family, nil
}

func as16(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.AddrFrom16(a.As16())
	}
	return a
}

// putSockID writes an inet_diag_sockid: ports big-endian, addresses as
// network bytes, no interface, no cookie.
func putSockID(id []byte, src netip.Addr, sport uint16, dst netip.Addr, dport uint16) {
	binary.BigEndian.PutUint16(id[0:2], sport)
	binary.BigEndian.PutUint16(id[2:4], dport)
	s, d := src.AsSlice(), dst.AsSlice()
	copy(id[4:20], s)
	copy(id[20:36], d)
	ne := binary.NativeEndian
	ne.PutUint32(id[36:40], 0)          // any interface
	ne.PutUint32(id[40:44], ^uint32(0)) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:48], ^uint32(0))
}

// parseDiagReply reads the first netlink message of a reply: an error
// (ENOENT: no such socket) or an inet_diag_msg, whose addresses must be
// the ones asked for. Lengths are checked before every read.
func parseDiagReply(b []byte, seq uint32, family uint8, local, remote netip.AddrPort) (uint64, int, error) {
	if len(b) < nlmsgHdrLen {
		return 0, -1, fmt.Errorf("%w: reply of %d bytes", ErrNoSockDiag, len(b))
	}
	ne := binary.NativeEndian
	mlen := ne.Uint32(b[0:4])
	typ := ne.Uint16(b[4:6])
	if mlen < nlmsgHdrLen || int(mlen) > len(b) {
		return 0, -1, fmt.Errorf("%w: reply length %d of %d bytes", ErrNoSockDiag, mlen, len(b))
	}
	if got := ne.Uint32(b[8:12]); got != seq {
		return 0, -1, fmt.Errorf("%w: reply to request %d, want %d", ErrNoSockDiag, got, seq)
	}
	body := b[nlmsgHdrLen:mlen]
	switch typ {
	case unix.NLMSG_ERROR:
		if len(body) < 4 {
			return 0, -1, fmt.Errorf("%w: short error reply", ErrNoSockDiag)
		}
		errno := -int32(ne.Uint32(body[0:4]))
		if unix.Errno(errno) == unix.ENOENT {
			return 0, -1, ErrNotFound
		}
		return 0, -1, fmt.Errorf("%w: %v", ErrNoSockDiag, unix.Errno(errno))
	case unix.SOCK_DIAG_BY_FAMILY:
	default:
		return 0, -1, fmt.Errorf("%w: reply of type %d", ErrNoSockDiag, typ)
	}
	if len(body) < inetDiagMsgLen {
		return 0, -1, fmt.Errorf("%w: inet_diag_msg of %d bytes", ErrNoSockDiag, len(body))
	}
	id := body[4 : 4+inetDiagSockLen]
	if body[0] != family || binary.BigEndian.Uint16(id[0:2]) != local.Port() || binary.BigEndian.Uint16(id[2:4]) != remote.Port() {
		return 0, -1, fmt.Errorf("%w: reply for another socket", ErrNoSockDiag)
	}
	uid := int(ne.Uint32(body[64:68]))
	inode := uint64(ne.Uint32(body[68:72]))
	if inode == 0 {
		return 0, -1, ErrNotFound
	}
	return inode, uid, nil
}

// FindTCPSocket is TCPSocketByAddr read from proc's net/tcp and net/tcp6
// tables, for a kernel without sock_diag: one pass that stops at the
// match, each line read into one fixed buffer and compared in place, so
// a table of any length costs time, not memory.
func FindTCPSocket(proc string, local, remote netip.AddrPort) (inode uint64, uid int, ok bool) {
	wantL, wantR := local.Addr().Unmap(), remote.Addr().Unmap()
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(filepath.Join(proc, "net", f))
		if err != nil {
			continue
		}
		rd := bufio.NewReaderSize(fh, 4096)
		first := true
		for {
			line, err := rd.ReadSlice('\n')
			if len(line) > 0 && !first {
				if in, u, hit := matchTCPRow(line, wantL, local.Port(), wantR, remote.Port()); hit {
					_ = fh.Close()
					return in, u, true
				}
			}
			first = false
			if errors.Is(err, bufio.ErrBufferFull) {
				// A line longer than any row: skip the rest of it.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = rd.ReadSlice('\n')
				}
				continue
			}
			if err != nil {
				break
			}
		}
		_ = fh.Close()
	}
	return 0, -1, false
}

// matchTCPRow compares one /proc/net/tcp{,6} row with the wanted
// addresses: fields 1 and 2 are local and remote ("0100007F:1F90", or
// 32 hex digits for tcp6), field 7 the uid and field 9 the inode.
func matchTCPRow(line []byte, l netip.Addr, lport uint16, r netip.Addr, rport uint16) (uint64, int, bool) {
	var fs [10][]byte
	k := 0
	for i := 0; i < len(line) && k < len(fs); {
		for i < len(line) && (line[i] == ' ' || line[i] == '\n') {
			i++
		}
		j := i
		for j < len(line) && line[j] != ' ' && line[j] != '\n' {
			j++
		}
		if j > i {
			fs[k] = line[i:j]
			k++
		}
		i = j
	}
	if k < 10 {
		return 0, -1, false
	}
	if !procAddrIs(fs[1], l, lport) || !procAddrIs(fs[2], r, rport) {
		return 0, -1, false
	}
	uid, ok1 := atoi(fs[7])
	inode, ok2 := atou(fs[9])
	if !ok1 || !ok2 {
		return 0, -1, false
	}
	return inode, uid, true
}

// procAddrIs reports whether a /proc address ("0100007F:1F90": the
// address's 32-bit words each in host order, then the port) is a:port;
// an IPv4-mapped tcp6 row matches its IPv4 address.
func procAddrIs(field []byte, a netip.Addr, port uint16) bool {
	colon := -1
	for i, c := range field {
		if c == ':' {
			colon = i
		}
	}
	if colon < 0 || len(field)-colon-1 != 4 {
		return false
	}
	p, ok := unhex(field[colon+1:])
	if !ok || uint16(p) != port {
		return false
	}
	h := field[:colon]
	var raw [16]byte
	if len(h) != 8 && len(h) != 32 {
		return false
	}
	for w := 0; w < len(h)/8; w++ {
		v, ok := unhex(h[w*8 : w*8+8])
		if !ok {
			return false
		}
		binary.NativeEndian.PutUint32(raw[w*4:w*4+4], uint32(v))
	}
	var got netip.Addr
	if len(h) == 8 {
		got = netip.AddrFrom4([4]byte(raw[:4]))
	} else {
		got = netip.AddrFrom16(raw).Unmap()
	}
	return got == a
}

func unhex(b []byte) (uint64, bool) {
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, len(b) > 0
}

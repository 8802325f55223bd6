package procfs

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// loopbackPair is a connected loopback pair: c is the dialler's end.
func loopbackPair(t *testing.T, network, addr string) (c net.Conn, s net.Conn) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	defer l.Close()
	c, err = net.Dial(network, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func addrPort(a net.Addr) netip.AddrPort { return a.(*net.TCPAddr).AddrPort() }

// The dialler's socket of a live loopback connection is found by its
// exact addresses, through sock_diag and through the bounded table scan
// alike, and this process holds it.
func TestTCPSocketByAddrLive(t *testing.T) {
	for _, tc := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(tc.network, func(t *testing.T) {
			_, s := loopbackPair(t, tc.network, tc.addr)
			peer, us := addrPort(s.RemoteAddr()), addrPort(s.LocalAddr())
			inode, uid, err := TCPSocketByAddr(peer, us)
			if err != nil {
				t.Fatalf("sock_diag: %v", err)
			}
			if uid != os.Getuid() {
				t.Fatalf("uid %d, want %d", uid, os.Getuid())
			}
			budget := 1 << 16
			if !HoldsSocket("", os.Getpid(), inode, &budget) {
				t.Fatalf("inode %d is not among our fds", inode)
			}
			// Not the accepted end: that one's local address is ours.
			other, _, err := TCPSocketByAddr(us, peer)
			if err != nil || other == inode {
				t.Fatalf("accepted end: inode %d err %v (dialler's %d)", other, err, inode)
			}
			in2, uid2, ok := FindTCPSocket("/proc", peer, us)
			if !ok || in2 != inode || uid2 != uid {
				t.Fatalf("table scan: inode %d uid %d ok %v, want %d %d", in2, uid2, ok, inode, uid)
			}
		})
	}
}

// Addresses of no connection: ErrNotFound, and the scan finds nothing.
func TestTCPSocketByAddrMissing(t *testing.T) {
	a := netip.MustParseAddrPort("127.0.0.1:1")
	b := netip.MustParseAddrPort("127.0.0.1:2")
	if _, _, err := TCPSocketByAddr(a, b); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
	if _, _, ok := FindTCPSocket("/proc", a, b); ok {
		t.Fatal("the scan found a socket that does not exist")
	}
	if _, _, err := TCPSocketByAddr(netip.AddrPort{}, b); err == nil {
		t.Fatal("an invalid address was looked up")
	}
}

// diagReply builds a reply of typ with body for parseDiagReply.
func diagReply(seq uint32, typ uint16, body []byte) []byte {
	b := make([]byte, nlmsgHdrLen+len(body))
	ne := binary.NativeEndian
	ne.PutUint32(b[0:4], uint32(len(b)))
	ne.PutUint16(b[4:6], typ)
	ne.PutUint32(b[8:12], seq)
	copy(b[nlmsgHdrLen:], body)
	return b
}

func diagMsg(family uint8, sport, dport uint16, uid, inode uint32) []byte {
	m := make([]byte, inetDiagMsgLen)
	m[0] = family
	binary.BigEndian.PutUint16(m[4:6], sport)
	binary.BigEndian.PutUint16(m[6:8], dport)
	binary.NativeEndian.PutUint32(m[64:68], uid)
	binary.NativeEndian.PutUint32(m[68:72], inode)
	return m
}

// Every reply shape: the answer, no such socket, an error, a reply too
// short for what it claims, another request's reply, another socket's.
func TestParseDiagReply(t *testing.T) {
	l, r := netip.MustParseAddrPort("127.0.0.1:4000"), netip.MustParseAddrPort("127.0.0.1:5000")
	errno := func(e unix.Errno) []byte {
		b := make([]byte, 4)
		binary.NativeEndian.PutUint32(b, uint32(-int32(e)))
		return b
	}
	cases := []struct {
		name     string
		reply    []byte
		inode    uint64
		uid      int
		notFound bool
		unavail  bool
	}{
		{"answer", diagReply(7, unix.SOCK_DIAG_BY_FAMILY, diagMsg(unix.AF_INET, 4000, 5000, 1000, 4242)), 4242, 1000, false, false},
		{"enoent", diagReply(7, unix.NLMSG_ERROR, errno(unix.ENOENT)), 0, -1, true, false},
		{"other error", diagReply(7, unix.NLMSG_ERROR, errno(unix.EPERM)), 0, -1, false, true},
		{"short header", []byte{1, 2, 3}, 0, -1, false, true},
		{"length past the end", func() []byte {
			b := diagReply(7, unix.SOCK_DIAG_BY_FAMILY, nil)
			binary.NativeEndian.PutUint32(b, 999)
			return b
		}(), 0, -1, false, true},
		{"short message", diagReply(7, unix.SOCK_DIAG_BY_FAMILY, make([]byte, 10)), 0, -1, false, true},
		{"short error", diagReply(7, unix.NLMSG_ERROR, nil), 0, -1, false, true},
		{"another request", diagReply(8, unix.SOCK_DIAG_BY_FAMILY, diagMsg(unix.AF_INET, 4000, 5000, 1000, 4242)), 0, -1, false, true},
		{"another socket", diagReply(7, unix.SOCK_DIAG_BY_FAMILY, diagMsg(unix.AF_INET, 4001, 5000, 1000, 4242)), 0, -1, false, true},
		{"another family", diagReply(7, unix.SOCK_DIAG_BY_FAMILY, diagMsg(unix.AF_INET6, 4000, 5000, 1000, 4242)), 0, -1, false, true},
		{"inode 0", diagReply(7, unix.SOCK_DIAG_BY_FAMILY, diagMsg(unix.AF_INET, 4000, 5000, 1000, 0)), 0, -1, true, false},
		{"odd type", diagReply(7, 99, diagMsg(unix.AF_INET, 4000, 5000, 1000, 4242)), 0, -1, false, true},
	}
	for _, c := range cases {
		inode, uid, err := parseDiagReply(c.reply, 7, unix.AF_INET, l, r)
		if inode != c.inode || uid != c.uid || errors.Is(err, ErrNotFound) != c.notFound || errors.Is(err, ErrNoSockDiag) != c.unavail {
			t.Errorf("%s: inode %d uid %d err %v", c.name, inode, uid, err)
		}
	}
}

// The request names the socket as the kernel wants it: family, TCP,
// ports big-endian, addresses as network bytes, no cookie; an IPv4 pair
// with an IPv6 side is asked as IPv6.
func TestDiagRequest(t *testing.T) {
	b, fam, err := diagRequest(netip.MustParseAddrPort("127.0.0.1:4000"), netip.MustParseAddrPort("127.0.0.2:5000"), 9)
	if err != nil || fam != unix.AF_INET || len(b) != nlmsgHdrLen+inetDiagReqLen {
		t.Fatalf("request %d bytes family %d err %v", len(b), fam, err)
	}
	q := b[nlmsgHdrLen:]
	id := q[8:]
	if q[0] != unix.AF_INET || q[1] != unix.IPPROTO_TCP || binary.BigEndian.Uint16(id[0:2]) != 4000 || binary.BigEndian.Uint16(id[2:4]) != 5000 ||
		!slices.Equal(id[4:8], []byte{127, 0, 0, 1}) || !slices.Equal(id[20:24], []byte{127, 0, 0, 2}) || binary.NativeEndian.Uint32(id[40:44]) != ^uint32(0) {
		t.Fatalf("request % x", b)
	}
	if _, fam, _ := diagRequest(netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("[::1]:2"), 1); fam != unix.AF_INET6 {
		t.Fatalf("mixed pair asked as family %d", fam)
	}
}

// A fake table: rows matched in place, an IPv4-mapped tcp6 row as its
// IPv4 address, short and overlong lines skipped.
func TestFindTCPSocketFake(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	long := make([]byte, 9000)
	for i := range long {
		long[i] = 'x'
	}
	tcp := "  sl local rem st\n" +
		"   0: 0100007F:0FA0 0100007F:1388 01 0:0 0:0 0 1000 0 111 1\n" +
		string(long) + "\n" +
		"short\n"
	tcp6 := "  sl local rem st\n" +
		"   0: 0000000000000000FFFF00000100007F:0FA1 0000000000000000FFFF00000100007F:1388 01 0:0 0:0 0 1001 0 222 1\n"
	_ = os.WriteFile(filepath.Join(dir, "net", "tcp"), []byte(tcp), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "net", "tcp6"), []byte(tcp6), 0o644)
	r := netip.MustParseAddrPort("127.0.0.1:5000")
	for _, c := range []struct {
		local string
		inode uint64
		uid   int
		ok    bool
	}{{"127.0.0.1:4000", 111, 1000, true}, {"127.0.0.1:4001", 222, 1001, true}, {"127.0.0.1:4002", 0, -1, false}} {
		inode, uid, ok := FindTCPSocket(dir, netip.MustParseAddrPort(c.local), r)
		if inode != c.inode || uid != c.uid || ok != c.ok {
			t.Errorf("%s: inode %d uid %d ok %v", c.local, inode, uid, ok)
		}
	}
}

// Children finds a child we started; HoldsSocket stops at its budget.
func TestChildrenAndBudget(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	kids, ok := Children("", os.Getpid(), nil)
	if !ok {
		t.Skip("this kernel has no task children files")
	}
	if !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("children %v lack %d", kids, cmd.Process.Pid)
	}
	if kids, ok := Children("", 1<<30, nil); !ok || len(kids) != 0 {
		t.Fatalf("a process that does not exist: %v %v", kids, ok)
	}
	c, _ := loopbackPair(t, "tcp4", "127.0.0.1:0")
	s := c.(*net.TCPConn)
	f, err := s.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	budget := 1 << 16
	if !HoldsSocket("", os.Getpid(), st.Ino, &budget) {
		t.Fatal("our own socket not found")
	}
	zero := 0
	if HoldsSocket("", os.Getpid(), st.Ino, &zero) {
		t.Fatal("found with no budget")
	}
	none := 1 << 16
	if HoldsSocket("", cmd.Process.Pid, st.Ino, &none) {
		t.Fatal("sleep holds our socket")
	}
}

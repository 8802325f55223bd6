package lane

// Mapping a connecting peer to its process, so that the supervisor (which
// owns every local role's process tree) can refuse peers that are not the
// role's engine. ipc peers: SO_PEERCRED. Loopback tcp peers: the socket's
// inode from /proc/net/tcp{,6}, then the process holding that inode in
// /proc/PID/fd. Remote tcp peers cannot be mapped (PID 0).

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/tsd-project/tsd/internal/procfs"
)

// peerProcess returns the pid and uid of the process at the other end of
// c, or (0, -1) when unknown.
func peerProcess(c net.Conn) (pid, uid int) {
	switch cc := c.(type) {
	case *net.UnixConn:
		raw, err := cc.SyscallConn()
		if err != nil {
			return 0, -1
		}
		var cred *syscall.Ucred
		_ = raw.Control(func(fd uintptr) {
			cred, _ = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		})
		if cred == nil {
			return 0, -1
		}
		return int(cred.Pid), int(cred.Uid)
	case *net.TCPConn:
		ra, ok1 := cc.RemoteAddr().(*net.TCPAddr)
		la, ok2 := cc.LocalAddr().(*net.TCPAddr)
		if !ok1 || !ok2 || !ra.IP.IsLoopback() {
			return 0, -1
		}
		inode, uid := loopbackInode("/proc", ra, la)
		if inode == "" {
			return 0, -1
		}
		return procfs.HolderOf("/proc", map[string]bool{inode: true}), uid
	}
	return 0, -1
}

// loopbackInode finds the socket whose local end is peer and remote end
// is us: the peer process's side of the connection.
func loopbackInode(proc string, peer, us *net.TCPAddr) (inode string, uid int) {
	want := [2]string{procAddr(peer), procAddr(us)}
	for _, so := range procfs.TCPSockets(proc) {
		if addrEqual(so.Local, want[0]) && addrEqual(so.Remote, want[1]) {
			return so.Inode, so.UID
		}
	}
	return "", -1
}

// procAddr renders an address as /proc/net/tcp does for IPv4
// ("0100007F:1F90"); IPv6 rows are matched through addrEqual.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	b := make([]byte, len(ip))
	// /proc prints each 32-bit word in host (little-endian) order.
	for i := 0; i+4 <= len(ip); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = ip[i+3], ip[i+2], ip[i+1], ip[i]
	}
	return strings.ToUpper(hex.EncodeToString(b)) + fmt.Sprintf(":%04X", a.Port)
}

// addrEqual compares a /proc address with one from procAddr, treating an
// IPv4-mapped IPv6 row ("0000000000000000FFFF00000100007F") as IPv4.
func addrEqual(proc, want string) bool {
	if proc == want {
		return true
	}
	h, p, ok := strings.Cut(proc, ":")
	if !ok || len(h) != 32 || !strings.HasPrefix(h, "0000000000000000FFFF0000") {
		return false
	}
	return h[24:]+":"+p == want
}

// InProcessTree reports whether pid is root or one of its descendants,
// by walking parent links in /proc. The supervisor builds its PeerCheck
// from it (the root being the role's guardian or engine process).
func InProcessTree(pid, root int) bool {
	for i := 0; pid > 1 && i < 4096; i++ {
		if pid == root {
			return true
		}
		pid = parentPID(pid)
	}
	return pid == root && root > 0
}

// TreeCheck builds a PeerCheck from the roles' root pids: a peer passes
// when its process descends from one of root(role) or shares its process
// group (each engine runs in its own group, and a rank re-parented to init
// keeps the group). root returns nil while the role has no process: then
// every peer is refused, since nobody tsd started can be dialling.
func TreeCheck(root func(role string) []int) func(role string, peer PeerInfo) error {
	return func(role string, peer PeerInfo) error {
		if peer.PID <= 0 {
			return fmt.Errorf("peer %s of role %s: its process could not be identified", peer.Addr, role)
		}
		for _, r := range root(role) {
			if r > 0 && (InProcessTree(peer.PID, r) || processGroup(peer.PID) == r) {
				return nil
			}
		}
		return fmt.Errorf("peer %s (pid %d) is not a process of role %s", peer.Addr, peer.PID, role)
	}
}

// processGroup reads a process's group id from /proc (0 when unknown).
func processGroup(pid int) int {
	st, _ := procfs.ReadStat("", pid)
	return st.PGRP
}

// parentPID reads a process's parent from /proc (0 when unknown).
func parentPID(pid int) int {
	st, _ := procfs.ReadStat("", pid)
	return st.PPID
}

package lane

// Mapping a connecting peer to its process, so that the supervisor (which
// owns every local role's process tree) can refuse peers that are not the
// role's engine. ipc peers: SO_PEERCRED. Loopback tcp peers: the peer's
// socket inode and owner uid, asked of the kernel for that one
// connection's addresses (internal/procfs TCPSocketByAddr, sock_diag),
// then the process holding that inode, looked for only among the
// role's own processes (PeerInfo.Process). Remote tcp peers cannot be
// mapped (PID 0, no inode).
//
// Nothing here reads a whole table per connection: reading all of
// /proc/net/tcp and every process's fds for each connection made a local
// process that churned connections to a handshake port grow tsd by
// gigabytes. The one fallback that reads the socket table (a kernel
// without sock_diag) streams it through a fixed buffer, and no more than
// two run at once.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"github.com/tsd-project/tsd/internal/procfs"
)

// peerOf is what can be learned of c's peer cheaply, at accept: an ipc
// peer's pid and uid (SO_PEERCRED); a loopback tcp peer's socket inode
// and uid (sock_diag). Anything else, or a lookup that failed, leaves
// PID 0, UID -1 and Inode 0; diag is false when the kernel did not
// answer sock_diag (lookupInode then reads the table).
func peerOf(c net.Conn) (p PeerInfo, diag bool) {
	p = PeerInfo{Network: c.LocalAddr().Network(), Addr: c.RemoteAddr().String(), UID: -1}
	switch cc := c.(type) {
	case *net.UnixConn:
		raw, err := cc.SyscallConn()
		if err != nil {
			return p, true
		}
		var cred *syscall.Ucred
		_ = raw.Control(func(fd uintptr) {
			cred, _ = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		})
		if cred != nil {
			p.PID, p.UID = int(cred.Pid), int(cred.Uid)
		}
		return p, true
	case *net.TCPConn:
		ra, la, ok := loopbackAddrs(cc)
		if !ok {
			return p, true
		}
		inode, uid, err := procfs.TCPSocketByAddr(ra, la)
		if err != nil {
			return p, !errors.Is(err, procfs.ErrNoSockDiag)
		}
		p.Inode, p.UID = inode, uid
		return p, true
	}
	return p, true
}

// loopbackAddrs are a loopback tcp connection's remote and local
// addresses (the peer's socket has them the other way round).
func loopbackAddrs(c *net.TCPConn) (remote, local netip.AddrPort, ok bool) {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || !ra.IP.IsLoopback() {
		return remote, local, false
	}
	return ra.AddrPort(), la.AddrPort(), true
}

// tableScans bounds the socket-table fallback: a kernel without
// sock_diag makes each loopback peer check read /proc/net/tcp (through
// one fixed buffer), and at most two of those run at once.
var tableScans = make(chan struct{}, 2)

// lookupInode fills a loopback tcp peer's inode from the socket table,
// for a kernel that did not answer sock_diag at accept.
func lookupInode(c net.Conn, p *PeerInfo) {
	cc, ok := c.(*net.TCPConn)
	if !ok || p.Inode != 0 {
		return
	}
	ra, la, ok := loopbackAddrs(cc)
	if !ok {
		return
	}
	tableScans <- struct{}{}
	defer func() { <-tableScans }()
	if inode, uid, found := procfs.FindTCPSocket("/proc", ra, la); found {
		p.Inode, p.UID = inode, uid
	}
}

// Process is the pid of the peer's process: PID when the transport
// learned it (an ipc peer's SO_PEERCRED), else the holder of the peer's
// socket (Inode) among the processes of roots (each root's tree, and
// the members of its process group under its parent: a rank re-parented
// to its guardian keeps the group), else 0. It reads only those
// processes' /proc entries, never the whole process table, and stops
// after a bounded number of processes and fds.
func (p PeerInfo) Process(roots []int) int {
	if p.PID > 0 {
		return p.PID
	}
	if p.Inode == 0 {
		return 0
	}
	w := holderWalk{inode: p.Inode, fds: maxWalkFDs, procs: maxWalkProcs, seen: map[int]bool{}}
	for _, r := range roots {
		if r <= 1 {
			continue
		}
		if p.UID >= 0 && !ownedBy(r, p.UID) {
			continue // the peer's socket belongs to another user than the role's processes
		}
		if pid := w.find(r); pid > 0 {
			return pid
		}
	}
	return 0
}

// Bounds of one holder search: a role is one engine launcher with a
// process per rank (and their helpers); a search that reaches these is
// looking at something else.
const (
	maxWalkProcs = 4096
	maxWalkFDs   = 1 << 16
)

// holderWalk is one search for a socket's holder.
type holderWalk struct {
	inode uint64
	fds   int // fd links left to read
	procs int // processes left to visit
	seen  map[int]bool
	table *procfs.Table // read once, only on a kernel without children files
}

// find looks through root's tree, then through its group's members
// among its parent's other descendants.
func (w *holderWalk) find(root int) int {
	if pid := w.tree(root, 0); pid > 0 {
		return pid
	}
	st, ok := procfs.ReadStat("", root)
	if !ok || st.PPID <= 1 {
		return 0
	}
	return w.tree(st.PPID, root)
}

// tree searches start's descendants breadth first, start included. With
// group > 0 start (a root's parent) is only where the search begins: the
// candidates are its descendants of that process group, and the search
// descends through them alone.
func (w *holderWalk) tree(start, group int) int {
	queue := []int{start}
	for i := 0; i < len(queue) && w.procs > 0 && w.fds > 0; i++ {
		pid := queue[i]
		first := i == 0 && group > 0
		if !first {
			if w.seen[pid] {
				continue // a pid met twice (reused mid-walk, or an earlier root's tree)
			}
			w.seen[pid] = true
			if group > 0 {
				if st, ok := procfs.ReadStat("", pid); !ok || st.PGRP != group {
					continue
				}
			}
		}
		w.procs--
		if !first && procfs.HoldsSocket("", pid, w.inode, &w.fds) {
			return pid
		}
		queue = w.children(pid, queue)
	}
	return 0
}

// children appends pid's children to queue: from the task children
// files, or from one scan of the process table where the kernel has none.
func (w *holderWalk) children(pid int, queue []int) []int {
	if w.table == nil {
		if out, ok := procfs.Children("", pid, queue); ok {
			return out
		}
		t, err := procfs.Scan("")
		if err != nil {
			return queue
		}
		w.table = &t
	}
	return append(queue, w.table.Kids[pid]...)
}

// ownedBy reports whether pid's process belongs to uid (its /proc
// directory's owner); unknown counts as yes, so the walk decides.
func ownedBy(pid, uid int) bool {
	fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || int(st.Uid) == uid
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
// group (each engine runs in its own group, and a rank re-parented to its
// guardian keeps the group). root returns nil while the role has no
// process: then every peer is refused, since nobody tsd started can be
// dialling. A loopback tcp peer's process is looked for among those
// processes only (PeerInfo.Process).
func TreeCheck(root func(role string) []int) func(role string, peer PeerInfo) error {
	return func(role string, peer PeerInfo) error {
		if peer.PID <= 0 && peer.Inode == 0 {
			return fmt.Errorf("peer %s of role %s: its process could not be identified", peer.Addr, role)
		}
		roots := root(role)
		if peer.PID <= 0 {
			if pid := peer.Process(roots); pid > 0 {
				return nil
			}
			return fmt.Errorf("peer %s (socket inode %d, uid %d) is not a process of role %s", peer.Addr, peer.Inode, peer.UID, role)
		}
		for _, r := range roots {
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

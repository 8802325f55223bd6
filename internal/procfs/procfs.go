// Package procfs is tsd's one reader of /proc. Processes: each one's stat
// file (stat.go: state, parent, group, CPU time, RSS, start time) and the
// whole process table in one pass (the trees telemetry measures, the
// stall scan, the guardian's strays, the registry's liveness). Sockets: the
// TCP socket table (/proc/net/tcp, tcp6) and which process holds a socket
// inode among its fds; preflight names the process that holds a port with
// them (profiles/preflight.go). For one connection's peer, without reading
// any whole table: the socket by its exact addresses (sockdiag.go, the
// kernel's sock_diag) and whether one of a few processes holds it
// (holder.go); the lane maps a loopback peer to its process with those
// (gateway/lane/peer.go). Best effort: unreadable entries are skipped.
package procfs

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Socket is one row of /proc/net/tcp{,6}: addresses as /proc prints them
// ("0100007F:1F90"), the state in hex ("0A" = LISTEN), owner uid, inode.
type Socket struct {
	Local, Remote string
	State         string
	UID           int
	Inode         string
}

// Listen is the state of a listening socket; TimeWait of one that
// closed and lingers (up to 60 s) in TIME_WAIT.
const (
	Listen   = "0A"
	TimeWait = "06"
)

// TCPSockets reads proc's net/tcp and net/tcp6 tables.
func TCPSockets(proc string) []Socket {
	var out []Socket
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(filepath.Join(proc, "net", f))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 {
				continue
			}
			uid, err := strconv.Atoi(fs[7])
			if err != nil {
				uid = -1
			}
			out = append(out, Socket{Local: fs[1], Remote: fs[2], State: fs[3], UID: uid, Inode: fs[9]})
		}
		_ = fh.Close()
	}
	return out
}

// HolderOf returns the first process under proc holding one of the socket
// inodes among its fds, or 0.
func HolderOf(proc string, inodes map[string]bool) int {
	if len(inodes) == 0 {
		return 0
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join(proc, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			ino, ok := strings.CutPrefix(link, "socket:[")
			if ok && inodes[strings.TrimSuffix(ino, "]")] {
				return pid
			}
		}
	}
	return 0
}

// Cmdline is pid's command line with spaces between arguments ("" when
// unreadable).
func Cmdline(proc string, pid int) string {
	b, _ := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

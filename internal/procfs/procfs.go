// Package procfs reads the /proc facts tsd needs: the TCP socket table
// (/proc/net/tcp, tcp6) and which process holds a socket inode among its
// fds — the lane maps a loopback peer to its process with them
// (gateway/lane/peer.go), preflight names the process that holds a port
// (profiles/preflight.go) — and a process's stat line (state, parent,
// process group, name, start time), with which the registry and the
// supervisor name a process for good by pid and start time. Best effort:
// unreadable entries are skipped.
package procfs

import (
	"bufio"
	"bytes"
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

// Listen is the state of a listening socket.
const Listen = "0A"

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

// Stat is what tsd reads of /proc/PID/stat.
type Stat struct {
	State byte   // R, S, D, T, Z, X, …
	PPID  int    // parent
	PGRP  int    // process group
	Comm  string // the command name (may hold spaces and parentheses)
	// Start is the start time in clock ticks after boot: with the pid it
	// names one process across pid reuse.
	Start uint64
}

// Live says the process runs: it is neither a zombie nor dead.
func (s Stat) Live() bool { return s.State != 'Z' && s.State != 'X' }

// ReadStat reads proc/PID/stat (proc is "/proc" outside tests).
func ReadStat(proc string, pid int) (Stat, bool) {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, false
	}
	return ParseStat(b)
}

// ParseStat parses one stat line. The command name is in parentheses and
// may hold spaces and ')' itself, so the fields are counted from the last
// ')'.
func ParseStat(b []byte) (Stat, bool) {
	i := bytes.LastIndexByte(b, ')')
	j := bytes.IndexByte(b, '(')
	if i < 0 || j < 0 || j > i {
		return Stat{}, false
	}
	// After ") ": state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice threads
	// itrealvalue starttime ...
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PPID: ppid, PGRP: pgrp, Comm: string(b[j+1 : i]), Start: start}, true
}

// Alive says whether pid is the live process that started at start.
func Alive(proc string, pid int, start uint64) bool {
	st, ok := ReadStat(proc, pid)
	return ok && st.Live() && st.Start == start
}

// PIDs lists the processes under proc (unsorted).
func PIDs(proc string) []int {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if n := e.Name(); n != "" && n[0] >= '1' && n[0] <= '9' {
			if pid, err := strconv.Atoi(n); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

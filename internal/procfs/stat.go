package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// UserHZ is the unit of the CPU times and start times in /proc/PID/stat:
// USER_HZ, 100 a second on every Linux architecture tsd runs on.
const UserHZ = 100

// Stat is what tsd reads of one process's /proc/PID/stat.
type Stat struct {
	PID     int
	Comm    string // the command name the process chose (may hold spaces and parentheses)
	State   byte   // R, S, D, T (stopped), t, Z (zombie), X, ...
	PPID    int
	PGRP    int
	Session int
	UTime   uint64 // clock ticks (UserHZ) in user mode
	STime   uint64 // clock ticks in kernel mode
	Threads int
	Start   uint64 // clock ticks after boot: with the pid, names one process across pid reuse
	RSS     int64  // resident pages
}

// Gone reports a process that has exited and waits to be reaped (or is
// being reaped): a zombie holds no memory, GPU or socket.
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// Stopped reports a process stopped by a signal (SIGSTOP, SIGTSTP) or a
// tracer.
func (s Stat) Stopped() bool { return s.State == 'T' || s.State == 't' }

// CPUTicks is the process's user plus system time in clock ticks.
func (s Stat) CPUTicks() uint64 { return s.UTime + s.STime }

// RSSBytes is the resident set in bytes.
func (s Stat) RSSBytes() uint64 {
	if s.RSS <= 0 {
		return 0
	}
	return uint64(s.RSS) * uint64(os.Getpagesize())
}

// statBufs are read buffers: a stat line is well under 1 KiB, and a
// scan of /proc reads hundreds of them, so none is allocated per read.
var statBufs = sync.Pool{New: func() any { return new([4096]byte) }}

// ReadStat reads /proc/PID/stat under proc ("" is /proc).
func ReadStat(proc string, pid int) (Stat, bool) {
	if proc == "" {
		proc = "/proc"
	}
	buf := statBufs.Get().(*[4096]byte)
	defer statBufs.Put(buf)
	fd, err := syscall.Open(proc+"/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return Stat{}, false
	}
	n, err := syscall.Read(fd, buf[:])
	_ = syscall.Close(fd)
	if err != nil || n <= 0 {
		return Stat{}, false
	}
	st, err := ParseStat(buf[:n])
	if err != nil {
		return Stat{}, false
	}
	return st, true
}

// ParseStat parses one /proc/PID/stat line. The command name is in
// parentheses and may hold spaces or ')' itself, so the fields are
// counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("parse stat: no (comm)")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("parse stat pid: %w", err)
	}
	st := Stat{PID: pid, Comm: string(b[open+1 : end])}
	// After ") ": state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime vsize rss ...
	rest := b[end+1:]
	var f [22][]byte
	k := 0
	for k < len(f) {
		for len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\n') {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			break
		}
		i := bytes.IndexAny(rest, " \n")
		if i < 0 {
			i = len(rest)
		}
		f[k], rest = rest[:i], rest[i:]
		k++
	}
	if k < 3 || len(f[0]) == 0 {
		return Stat{}, fmt.Errorf("parse stat: %d fields after the command name", k)
	}
	st.State = f[0][0]
	var ok bool
	if st.PPID, ok = atoi(f[1]); !ok {
		return Stat{}, fmt.Errorf("parse stat ppid %q", f[1])
	}
	if st.PGRP, ok = atoi(f[2]); !ok {
		return Stat{}, fmt.Errorf("parse stat pgrp %q", f[2])
	}
	// The later fields are optional for the callers that need only the
	// first three (a truncated line from a hostile or old kernel).
	if k > 3 {
		st.Session, _ = atoi(f[3])
	}
	if k > 12 {
		st.UTime, _ = atou(f[11])
		st.STime, _ = atou(f[12])
	}
	if k > 17 {
		st.Threads, _ = atoi(f[17])
	}
	if k > 19 {
		st.Start, _ = atou(f[19])
	}
	if k > 21 {
		rss, _ := atoi(f[21])
		st.RSS = int64(rss)
	}
	return st, nil
}

// atoi and atou parse a decimal field without allocating (strconv on a
// []byte→string conversion the compiler does not copy).
func atoi(b []byte) (int, bool) {
	v, err := strconv.Atoi(string(b))
	return v, err == nil
}

func atou(b []byte) (uint64, bool) {
	v, err := strconv.ParseUint(string(b), 10, 64)
	return v, err == nil
}

// PIDs lists the process ids under proc ("" is /proc), in directory order.
func PIDs(proc string) ([]int, error) {
	if proc == "" {
		proc = "/proc"
	}
	d, err := os.Open(proc)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", proc, err)
	}
	names, err := d.Readdirnames(-1)
	_ = d.Close()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", proc, err)
	}
	out := make([]int, 0, len(names))
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		if pid, err := strconv.Atoi(name); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Table is the process table as one pass over /proc saw it: every
// process's stat and each parent's children.
type Table struct {
	Procs map[int]Stat
	Kids  map[int][]int
}

// Scan reads every process's stat under proc ("" is /proc) once.
func Scan(proc string) (Table, error) {
	pids, err := PIDs(proc)
	if err != nil {
		return Table{}, err
	}
	t := Table{Procs: make(map[int]Stat, len(pids)), Kids: make(map[int][]int, len(pids)/4)}
	for _, pid := range pids {
		st, ok := ReadStat(proc, pid)
		if !ok {
			continue // exited between listing and reading
		}
		t.Procs[pid] = st
		t.Kids[st.PPID] = append(t.Kids[st.PPID], pid)
	}
	return t, nil
}

// Tree lists root and all its descendants, root first, breadth first; nil
// when root is not in the table.
func (t Table) Tree(root int) []int {
	if _, ok := t.Procs[root]; !ok {
		return nil
	}
	out := []int{root}
	// Stat files are read at different instants, so a pid reused mid-scan
	// can make a cycle: never visit a pid twice.
	seen := map[int]bool{root: true}
	for i := 0; i < len(out); i++ {
		for _, k := range t.Kids[out[i]] {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// Children lists the live (not Gone) children of pid.
func (t Table) Children(pid int) []int {
	var out []int
	for _, k := range t.Kids[pid] {
		if !t.Procs[k].Gone() {
			out = append(out, k)
		}
	}
	return out
}

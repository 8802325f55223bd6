package telemetry

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/shirou/gopsutil/v4/process"

	"github.com/tsd-project/tsd/snapshot"
)

// RoleInfo is what the supervisor tells telemetry about one role instance.
type RoleInfo struct {
	Name string
	// RootPID is the role's guardian (or engine) PID; 0 while not running.
	RootPID int
	// CudaVisibleDevices is the role's CUDA_VISIBLE_DEVICES ("" = none).
	CudaVisibleDevices string
}

// procEntry is one process as the /proc scan saw it.
type procEntry struct {
	ppid    int
	threads int
	start   uint64 // starttime in clock ticks since boot: tells a reused PID apart
}

// procScanner lists every process and its parent in one pass over /proc.
// Only the stat file of each process is read, into one reused buffer.
type procScanner struct {
	root  string
	buf   []byte
	procs map[int]procEntry
	kids  map[int][]int
}

func newProcScanner(root string) *procScanner {
	if root == "" {
		root = "/proc"
	}
	return &procScanner{root: root, buf: make([]byte, 4096)}
}

func (s *procScanner) scan() error {
	d, err := os.Open(s.root)
	if err != nil {
		return fmt.Errorf("open %s: %w", s.root, err)
	}
	names, err := d.Readdirnames(-1)
	_ = d.Close()
	if err != nil {
		return fmt.Errorf("list %s: %w", s.root, err)
	}
	s.procs = make(map[int]procEntry, len(names))
	s.kids = make(map[int][]int, len(names)/4)
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		e, ok := s.readStat(pid)
		if !ok {
			continue // exited between listing and reading
		}
		s.procs[pid] = e
		s.kids[e.ppid] = append(s.kids[e.ppid], pid)
	}
	return nil
}

// readStat reads ppid and starttime from /proc/PID/stat. The command name is
// in parentheses and may hold spaces or ')' itself, so fields are counted
// from the last ')'.
func (s *procScanner) readStat(pid int) (procEntry, bool) {
	path := s.root + "/" + strconv.Itoa(pid) + "/stat"
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return procEntry{}, false
	}
	n, err := syscall.Read(fd, s.buf)
	_ = syscall.Close(fd)
	if err != nil || n <= 0 {
		return procEntry{}, false
	}
	b := s.buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procEntry{}, false
	}
	// After ") ": state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice threads
	// itrealvalue starttime ...
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 20 {
		return procEntry{}, false
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return procEntry{}, false
	}
	threads, _ := strconv.Atoi(string(fields[17]))
	start, _ := strconv.ParseUint(string(fields[19]), 10, 64)
	return procEntry{ppid: ppid, threads: threads, start: start}, true
}

// tree lists root and all its descendants, root first, breadth first.
func (s *procScanner) tree(root int) []int {
	if _, ok := s.procs[root]; !ok {
		return nil
	}
	out := []int{root}
	// Stat files are read at different instants, so a PID reused mid-scan
	// can make a cycle; never visit a PID twice.
	seen := map[int]bool{root: true}
	for i := 0; i < len(out); i++ {
		for _, k := range s.kids[out[i]] {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// handle is a gopsutil process kept across ticks, so CPU percent is the
// delta since the previous tick rather than since the process started.
type handle struct {
	p     *process.Process
	start uint64
}

// ProcPoller measures the process tree of every role. It is not safe for
// concurrent use: one goroutine owns it (the poller in Telemetry.Run, or a
// benchmark).
type ProcPoller struct {
	scan    *procScanner
	handles map[int]handle
}

// NewProcPoller reads processes under procRoot ("" = /proc).
func NewProcPoller(procRoot string) *ProcPoller {
	return &ProcPoller{scan: newProcScanner(procRoot), handles: map[int]handle{}}
}

// Poll scans /proc once and measures each role's tree under RootPID. Roles
// whose root is not running are absent from the result. pidRole maps every
// PID found to its role, for joining GPU processes.
func (p *ProcPoller) Poll(roles []RoleInfo) (procs map[string]snapshot.ProcStatus, pidRole map[int]string, err error) {
	if err := p.scan.scan(); err != nil {
		return nil, nil, err
	}
	procs = make(map[string]snapshot.ProcStatus, len(roles))
	pidRole = map[int]string{}
	live := make(map[int]handle, len(p.handles))
	for _, r := range roles {
		if r.RootPID <= 0 {
			continue
		}
		pids := p.scan.tree(r.RootPID)
		if len(pids) == 0 {
			continue
		}
		st := snapshot.ProcStatus{PIDs: pids}
		for _, pid := range pids {
			if _, dup := pidRole[pid]; dup {
				continue // two roles claim one tree: count it once
			}
			pidRole[pid] = r.Name
			e := p.scan.procs[pid]
			// The scan already read the thread count; asking gopsutil would
			// parse /proc/PID/status for it, the costliest file of the three.
			st.Threads += e.threads
			h, ok := p.handles[pid]
			start := e.start
			if !ok || h.start != start {
				np, err := process.NewProcess(int32(pid))
				if err != nil {
					continue
				}
				h = handle{p: np, start: start}
			}
			live[pid] = h
			if pct, err := h.p.Percent(0); err == nil {
				st.CPUPercent += pct
			}
			if mi, err := h.p.MemoryInfo(); err == nil {
				st.RSSBytes += mi.RSS
			}
		}
		procs[r.Name] = st
	}
	// Dropping handles of exited processes keeps a PID that comes back from
	// inheriting someone else's CPU baseline.
	p.handles = live
	return procs, pidRole, nil
}

// procAvailable says whether procRoot looks like a Linux /proc.
func procAvailable(procRoot string) error {
	if procRoot == "" {
		procRoot = "/proc"
	}
	if _, err := os.Stat(filepath.Join(procRoot, "self", "stat")); err != nil {
		return errors.Join(fmt.Errorf("no process table at %s", procRoot), err)
	}
	return nil
}

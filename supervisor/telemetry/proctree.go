package telemetry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tsd-project/tsd/internal/procfs"
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

// sample is one process's CPU time at one poll, kept across ticks so CPU
// percent is the delta since the previous tick rather than since the
// process started.
type sample struct {
	start uint64 // the process's start time: a reused pid starts afresh
	ticks uint64
	at    time.Time
}

// ProcPoller measures the process tree of every role. It is not safe for
// concurrent use: one goroutine owns it (the poller in Telemetry.Run, or a
// benchmark).
//
// A pass over all of /proc reads every process's stat on the host, tens
// of microseconds each, so only every fullEvery-th poll (and any poll
// that meets a role root it has not seen) reads the whole table and
// rebuilds the trees; the polls between read only the processes of the
// trees found last time (one stat each, with its start time checked, so
// a reused pid is dropped). A process a role forks is measured from the
// next full poll on.
type ProcPoller struct {
	root      string
	last      map[int]sample
	now       func() time.Time
	fullEvery int
	polls     int
	trees     map[int][]int // role root → its tree at the last full poll
}

// procFullEvery is how many polls share one full pass over /proc: with
// the 2 s default cadence, a new process joins its role's figures within
// 10 s.
const procFullEvery = 5

// NewProcPoller reads processes under procRoot ("" = /proc).
func NewProcPoller(procRoot string) *ProcPoller {
	return &ProcPoller{root: procRoot, last: map[int]sample{}, now: time.Now, fullEvery: procFullEvery, trees: map[int][]int{}}
}

// read returns the stat of every process in the roles' trees, and the
// trees, from a full scan or from the trees of the last one.
func (p *ProcPoller) read(roles []RoleInfo) (map[int]procfs.Stat, map[int][]int, error) {
	full := p.polls%p.fullEvery == 0
	p.polls++
	for _, r := range roles {
		if _, ok := p.trees[r.RootPID]; r.RootPID > 0 && !ok {
			full = true
		}
	}
	if full {
		table, err := procfs.Scan(p.root)
		if err != nil {
			return nil, nil, err
		}
		p.trees = make(map[int][]int, len(roles))
		for _, r := range roles {
			if r.RootPID > 0 {
				p.trees[r.RootPID] = table.Tree(r.RootPID)
			}
		}
		return table.Procs, p.trees, nil
	}
	stats := map[int]procfs.Stat{}
	for root, pids := range p.trees {
		kept := pids[:0:0]
		for _, pid := range pids {
			st, ok := procfs.ReadStat(p.root, pid)
			if !ok || (p.last[pid].start != 0 && st.Start != p.last[pid].start) {
				if pid == root {
					kept = nil // the root is gone: its tree with it
					break
				}
				continue
			}
			stats[pid] = st
			kept = append(kept, pid)
		}
		p.trees[root] = kept
	}
	return stats, p.trees, nil
}

// Poll measures each role's tree under RootPID. Roles whose root is not
// running are absent from the result. pidRole maps every PID found to its
// role, for joining GPU processes.
func (p *ProcPoller) Poll(roles []RoleInfo) (procs map[string]snapshot.ProcStatus, pidRole map[int]string, err error) {
	stats, trees, err := p.read(roles)
	if err != nil {
		return nil, nil, err
	}
	now := p.now()
	procs = make(map[string]snapshot.ProcStatus, len(roles))
	pidRole = map[int]string{}
	live := make(map[int]sample, len(p.last))
	for _, r := range roles {
		if r.RootPID <= 0 {
			continue
		}
		pids := trees[r.RootPID]
		if len(pids) == 0 {
			continue
		}
		st := snapshot.ProcStatus{PIDs: pids}
		for _, pid := range pids {
			if _, dup := pidRole[pid]; dup {
				continue // two roles claim one tree: count it once
			}
			e, ok := stats[pid]
			if !ok {
				continue
			}
			pidRole[pid] = r.Name
			st.Threads += e.Threads
			st.RSSBytes += e.RSSBytes()
			cur := sample{start: e.Start, ticks: e.CPUTicks(), at: now}
			if prev, ok := p.last[pid]; ok && prev.start == cur.start && cur.at.After(prev.at) && cur.ticks >= prev.ticks {
				cpu := float64(cur.ticks-prev.ticks) / procfs.UserHZ
				st.CPUPercent += 100 * cpu / cur.at.Sub(prev.at).Seconds()
			}
			live[pid] = cur
		}
		procs[r.Name] = st
	}
	// Dropping samples of exited processes keeps a PID that comes back from
	// inheriting someone else's CPU baseline.
	p.last = live
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

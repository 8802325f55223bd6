package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/internal/procfs"
)

// Orphan defence in depth (docs/architecture.md, "No orphans"): the
// guardian tears a role's group down when tsd dies, but when tsd and a
// guardian die together (an OOM kill of the whole cgroup, kill -9 of both)
// nobody is left to do it. So every live role's process group is recorded
// in the run folder (pgid plus the leader's start time, which tells our
// group from a later one that reuses the number), and the next `tsd up`
// kills what is left before it starts anything. Where cgroup v2 is
// writable each run is also born in its own cgroup, killed whole through
// cgroup.kill, which catches even processes that left the group.

// groupRecord is one role's live process group as written to the run folder.
type groupRecord struct {
	Role       string `json:"role"`
	PGID       int    `json:"pgid"`
	Start      uint64 `json:"start"` // /proc start time of the leader, clock ticks
	GuardPID   int    `json:"guard_pid"`
	GuardStart uint64 `json:"guard_start"`
	Cgroup     string `json:"cgroup,omitempty"`
	TSDPID     int    `json:"tsd_pid"`
	// TSDStart is the daemon's own start time: with TSDPID it tells a
	// live daemon's records from a dead one's (leftovers.go).
	TSDStart uint64 `json:"tsd_start,omitempty"`
}

// groupRecords is the orphan recorder: the run folder's record of every
// live process group, by instance id, and the cgroup of each run. Actors
// use it through their recorder interface (env.go), the supervisor
// through clean at start and close at the end. A record's file is named
// by the instance's name (what a later tsd reports and `tsd ls` reads),
// so an instance's record moves when it is recorded under a new name.
type groupRecords struct {
	dir    string // <run_dir>/groups; "": no run folder, nothing recorded
	cgBase string // this tsd's cgroup v2 directory for role cgroups, or ""
	cgSeq  atomic.Int64
	mu     sync.Mutex
	files  map[int]string // instance id → the file that records its group
}

func newGroupRecords(dir string) *groupRecords {
	return &groupRecords{dir: dir, files: map[int]string{}}
}

// recordGroup writes the instance's record (atomically: a half-written
// file would hide a live group from the next tsd), under its name now.
func (g *groupRecords) recordGroup(id int, name string, p *process, cgroup string) {
	if g.dir == "" || p == nil || p.pid <= 0 {
		return
	}
	rec := groupRecord{Role: name, PGID: p.pid, Cgroup: cgroup, TSDPID: os.Getpid()}
	if st, ok := procfs.ReadStat("", rec.TSDPID); ok {
		rec.TSDStart = st.Start
	}
	if st, ok := procfs.ReadStat("", p.pid); ok {
		rec.Start = st.Start
	}
	if p.guard != nil && p.guard.Process != nil {
		rec.GuardPID = p.guard.Process.Pid
		if st, ok := procfs.ReadStat("", rec.GuardPID); ok {
			rec.GuardStart = st.Start
		}
	}
	b, _ := json.Marshal(rec)
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return
	}
	tmp := filepath.Join(g.dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return
	}
	path := filepath.Join(g.dir, name+".json")
	if os.Rename(tmp, path) != nil {
		return
	}
	g.mu.Lock()
	old := g.files[id]
	g.files[id] = path
	g.mu.Unlock()
	if old != "" && old != path {
		_ = os.Remove(old) // recorded under its former name
	}
}

// dropGroup removes the record of an instance whose group is verified
// empty.
func (g *groupRecords) dropGroup(id int) {
	g.mu.Lock()
	path := g.files[id]
	delete(g.files, id)
	g.mu.Unlock()
	if path != "" {
		_ = os.Remove(path)
	}
}

// open finds this tsd's cgroup base (Run's start); close removes it, and
// the records folder once empty (every group was verified gone; kept
// otherwise, for the next tsd).
func (g *groupRecords) open() { g.cgBase = cgroupBase() }

func (g *groupRecords) close() {
	if g.cgBase != "" {
		_ = os.Remove(g.cgBase)
	}
	if g.dir != "" {
		_ = os.Remove(g.dir)
	}
}

// leftover is one live process a previous tsd left.
type leftover struct {
	role string
	pid  int
	comm string
}

// cleanOrphans kills every process a previous tsd of this run folder left
// behind and returns one line saying what it killed ("" if nothing).
func (g *groupRecords) cleanOrphans() string {
	dir := g.dir
	if dir == "" {
		return ""
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var recs []groupRecord
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		var r groupRecord
		if err == nil && json.Unmarshal(b, &r) == nil && r.PGID > 0 {
			recs = append(recs, r)
		}
		_ = os.Remove(path)
	}
	if len(recs) == 0 {
		return ""
	}
	killed := findLeftovers(recs)
	for _, r := range recs {
		if r.Cgroup != "" {
			for _, pid := range cgroupPIDs(r.Cgroup) {
				if !hasPID(killed, pid) {
					st, _ := procfs.ReadStat("", pid)
					killed = append(killed, leftover{role: r.Role, pid: pid, comm: st.Comm})
				}
			}
		}
	}
	for _, l := range killed {
		_ = syscall.Kill(l.pid, syscall.SIGKILL)
	}
	for _, r := range recs {
		if r.Cgroup != "" {
			killCgroup(r.Cgroup)
			_ = os.Remove(filepath.Dir(r.Cgroup)) // the old tsd's base, once its last role is gone
		}
	}
	waitGone(killed, 5*time.Second)
	if len(killed) == 0 {
		return ""
	}
	sort.Slice(killed, func(i, j int) bool { return killed[i].pid < killed[j].pid })
	parts := make([]string, len(killed))
	for i, l := range killed {
		parts[i] = fmt.Sprintf("%s pid %d (%s)", l.role, l.pid, l.comm)
	}
	return fmt.Sprintf("killed %d process(es) left by a previous tsd: %s", len(killed), strings.Join(parts, ", "))
}

// findLeftovers lists the live processes of the recorded groups. A group
// is the recorded one while its leader has the recorded start time, or,
// once the leader is gone, for members started no earlier than it (a pgid
// cannot be reused while any member of the group lives).
func findLeftovers(recs []groupRecord) []leftover {
	byPGID := map[int]groupRecord{}
	for _, r := range recs {
		if st, ok := procfs.ReadStat("", r.PGID); ok && st.State != 'Z' && st.Start != r.Start {
			continue // the number belongs to someone else now
		}
		byPGID[r.PGID] = r
	}
	var out []leftover
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procfs.ReadStat("", pid)
		if !ok || st.Gone() {
			continue
		}
		if r, ok := byPGID[st.PGRP]; ok && st.Start >= r.Start {
			out = append(out, leftover{role: r.Role, pid: pid, comm: st.Comm})
			continue
		}
		for _, r := range recs {
			if r.GuardPID == pid && r.GuardStart != 0 && st.Start == r.GuardStart {
				out = append(out, leftover{role: r.Role + " guardian", pid: pid, comm: st.Comm})
			}
		}
	}
	return out
}

func hasPID(ls []leftover, pid int) bool {
	for _, l := range ls {
		if l.pid == pid {
			return true
		}
	}
	return false
}

// waitGone waits, bounded, until the killed processes are gone or zombies
// (they are not our children, so there is no wait4 to block on).
func waitGone(ls []leftover, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		alive := false
		for _, l := range ls {
			if st, ok := procfs.ReadStat("", l.pid); ok && !st.Gone() {
				alive = true
				break
			}
		}
		if !alive {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling /proc: there is no event for another parent's child dying
	}
}

// cgroupBase finds a writable cgroup v2 directory for this tsd's roles
// (a child of tsd's own cgroup), or "" where there is none: then the
// process group and the records do the job alone.
func cgroupBase() string {
	if os.Getenv("TSD_NO_CGROUP") == "1" {
		return ""
	}
	mnt := cgroup2Mount()
	if mnt == "" {
		return ""
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	var own string
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return ""
	}
	base := filepath.Join(mnt, own, fmt.Sprintf("tsd-%d", os.Getpid()))
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return ""
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.kill")); err != nil {
		_ = os.Remove(base) // no cgroup.kill (kernel < 5.14): not worth it
		return ""
	}
	return base
}

func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts ... - fstype source superopts
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4]
			}
		}
	}
	return ""
}

// roleCgroup makes a fresh cgroup for one run of a role, or "".
func (g *groupRecords) roleCgroup(role string) string {
	if g.cgBase == "" {
		return ""
	}
	dir := filepath.Join(g.cgBase, fmt.Sprintf("%s-%d", role, g.cgSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	return dir
}

// releaseCgroup kills whatever is left in a run's cgroup and removes it.
func (g *groupRecords) releaseCgroup(dir string) {
	if dir != "" {
		killCgroup(dir)
	}
}

func cgroupPIDs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// killCgroup SIGKILLs every process of the cgroup (cgroup.kill) and
// removes the directory once it is empty (bounded).
func killCgroup(dir string) {
	if _, err := os.Stat(dir); err != nil {
		return
	}
	if len(cgroupPIDs(dir)) > 0 {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o200)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond) // the kernel empties it asynchronously after cgroup.kill
	}
}

// stallFullScanEvery is how many stall scans share one pass over all of
// /proc (stopScan): with the default 500 ms scan, a process a role forks
// is watched within 5 s, while a stopped process the role already had is
// seen within one scan.
const stallFullScanEvery = 10

// stallReport is the /proc scanner's verdict on one run of a role.
type stallReport struct {
	pid int    // the run's process group
	why string // "" = nothing stopped
}

// scanStalls watches every role's process tree for stopped (T) processes
// and tells the role's actor when that changes, until stop is closed.
// One scan of /proc serves every role; roster says which instances there
// are, runs which process group each runs.
func scanStalls(stop <-chan struct{}, every time.Duration, roster func() *roster, runs *Runs) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := map[int]stallReport{}
	scan := newStopScan("", stallFullScanEvery)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		groups := map[int]bool{}
		members := roster().members
		for _, m := range members {
			if pid := runs.of(m.id); pid > 0 {
				groups[pid] = true
			}
		}
		found := map[int]string{}
		if len(groups) > 0 {
			found = scan.stopped(groups)
		}
		for _, m := range members {
			a := m.a
			pid := runs.of(m.id)
			rep := stallReport{pid: pid, why: found[pid]}
			if pid == 0 || last[m.id] == rep {
				continue
			}
			last[m.id] = rep
			select {
			case <-a.in.stalls: // latest wins: only this goroutine sends
			default:
			}
			select {
			case a.in.stalls <- rep:
			default:
			}
		}
	}
}

// stopScan finds the stopped processes of the process groups of
// interest. A pass over the whole of /proc reads every process's stat
// file, tens of microseconds each: twice a second on a host with
// thousands of processes, that was the idle daemon's largest cost. So
// only every fullEvery-th pass reads the whole table, and every pass while
// a group is young (its first fullEvery passes: an engine forks its ranks
// as it starts); the passes between read only the members the last full
// pass found, each checked again for its group. A process a member forks
// later is seen at the next full pass.
type stopScan struct {
	proc      string // "" is /proc
	fullEvery int
	n         int
	members   map[int][]int // pgid → its pids at the last full pass
	born      map[int]int   // pgid → the pass that first saw it
}

func newStopScan(proc string, fullEvery int) *stopScan {
	return &stopScan{proc: proc, fullEvery: max(1, fullEvery), members: map[int][]int{}, born: map[int]int{}}
}

// stopped says, per process group in groups, which of its processes are
// stopped ("" or absent: none).
func (s *stopScan) stopped(groups map[int]bool) map[int]string {
	full := s.n%s.fullEvery == 0
	for pg := range groups {
		b, seen := s.born[pg]
		if !seen {
			b = s.n
			s.born[pg] = b
		}
		if s.n-b < s.fullEvery {
			full = true
		}
	}
	for pg := range s.born {
		if !groups[pg] {
			delete(s.born, pg)
		}
	}
	s.n++
	stopped := map[int][]string{}
	note := func(st procfs.Stat) {
		if st.Stopped() {
			stopped[st.PGRP] = append(stopped[st.PGRP], fmt.Sprintf("%d (%s)", st.PID, st.Comm))
		}
	}
	if full {
		pids, err := procfs.PIDs(s.proc)
		if err != nil {
			return map[int]string{}
		}
		s.members = make(map[int][]int, len(groups))
		for pg := range groups {
			s.members[pg] = nil // seen, even with no member
		}
		for _, pid := range pids {
			st, ok := procfs.ReadStat(s.proc, pid)
			if !ok || !groups[st.PGRP] {
				continue
			}
			s.members[st.PGRP] = append(s.members[st.PGRP], pid)
			note(st)
		}
	} else {
		for pg, pids := range s.members {
			if !groups[pg] {
				delete(s.members, pg)
				continue
			}
			for _, pid := range pids {
				if st, ok := procfs.ReadStat(s.proc, pid); ok && st.PGRP == pg {
					note(st)
				}
			}
		}
	}
	out := make(map[int]string, len(stopped))
	for pg, list := range stopped {
		sort.Strings(list)
		out[pg] = "process " + strings.Join(list, ", ") + " stopped (state T: SIGSTOP or a debugger)"
	}
	return out
}

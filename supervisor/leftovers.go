package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tsd-project/tsd/internal/procfs"
	"github.com/tsd-project/tsd/profiles"
)

// What a killed daemon left, seen from outside it (`tsd ls`, `tsd stop
// NAME`): kill -9 of tsd and all its guardians at once leaves the engines
// running under PID 1 (a Python engine ignores the SIGPIPE of its dead
// log pipe), holding the GPUs. The group records in the run folder
// (orphans.go) name them; a record whose daemon is alive is that
// daemon's business and is never touched. Processes are named by pid and
// start time, never by name, and signalled through pidfds, so a pid
// reused meanwhile is never hit.

// RecordDir is the folder where plan's daemon records its process groups
// (a registry entry's Records).
func RecordDir(plan *profiles.Plan) string {
	if plan == nil || plan.RunDir == "" {
		return ""
	}
	return filepath.Join(plan.RunDir, "groups")
}

// Leftover is one live process a dead daemon left: a role's engine
// process (any process of its recorded group or cgroup) or its guardian.
type Leftover struct {
	Role  string `json:"role"` // "decode", or "decode guardian"
	PID   int    `json:"pid"`
	Comm  string `json:"comm"`
	start uint64
}

func (l Leftover) String() string { return fmt.Sprintf("%s pid %d (%s)", l.Role, l.PID, l.Comm) }

// orphanedRecords reads the records in dir whose daemon is gone (with
// their file paths).
func orphanedRecords(dir string) (recs []groupRecord, paths []string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		var r groupRecord
		if err != nil || json.Unmarshal(b, &r) != nil || r.PGID <= 0 {
			continue
		}
		if daemonAlive(r) {
			continue
		}
		recs = append(recs, r)
		paths = append(paths, p)
	}
	return recs, paths
}

// daemonAlive says whether the tsd that wrote r still runs. Records of an
// older tsd carry no start time: the pid alone decides then.
func daemonAlive(r groupRecord) bool {
	if r.TSDPID <= 0 {
		return false
	}
	st, ok := procfs.ReadStat("", r.TSDPID)
	return ok && !st.Gone() && (r.TSDStart == 0 || st.Start == r.TSDStart)
}

// Leftovers lists the live processes the records in dir name whose
// daemon is gone, sorted by pid.
func Leftovers(dir string) []Leftover {
	recs, _ := orphanedRecords(dir)
	return leftoversOf(recs)
}

func leftoversOf(recs []groupRecord) []Leftover {
	if len(recs) == 0 {
		return nil
	}
	var out []Leftover
	for _, l := range findLeftovers(recs) {
		if st, ok := procfs.ReadStat("", l.pid); ok && !st.Gone() {
			out = append(out, Leftover{Role: l.role, PID: l.pid, Comm: st.Comm, start: st.Start})
		}
	}
	for _, r := range recs {
		if r.Cgroup == "" {
			continue
		}
		for _, pid := range cgroupPIDs(r.Cgroup) {
			if st, ok := procfs.ReadStat("", pid); ok && !st.Gone() && !hasLeftover(out, pid) {
				out = append(out, Leftover{Role: r.Role, PID: pid, Comm: st.Comm, start: st.Start})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

func hasLeftover(ls []Leftover, pid int) bool {
	for _, l := range ls {
		if l.PID == pid {
			return true
		}
	}
	return false
}

// Reap bounds: the whole reap stays within 5 s (SIGTERM, a grace, SIGKILL,
// the wait for the kernel), whatever stop_grace the roles had: the daemon
// that would have honoured it is gone.
const (
	ReapGrace = 3 * time.Second
	ReapLimit = 5 * time.Second
)

// ReapLeftovers ends what Leftovers lists in dir: SIGTERM (and SIGCONT,
// so a stopped process sees it) to every process of the recorded groups
// and to the guardians, SIGKILL after grace to what is left, then a wait
// until each is gone, up to limit in all; a process that appears in the
// groups meanwhile (a launcher forking) is killed too. It then removes
// the dead daemon's records and cgroups. It returns what it found, and an
// error naming what survived (its records are kept then).
func ReapLeftovers(dir string, grace, limit time.Duration) ([]Leftover, error) {
	recs, paths := orphanedRecords(dir)
	deadline := time.Now().Add(limit)
	var all []Leftover
	var surv []Leftover
	for round := 0; ; round++ {
		ls := leftoversOf(recs)
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			if !hasLeftover(all, l.PID) {
				all = append(all, l)
			}
		}
		sig := syscall.SIGTERM
		if round > 0 {
			sig = syscall.SIGKILL // it was asked once
		}
		termUntil := time.Now().Add(grace)
		if termUntil.After(deadline) {
			termUntil = deadline
		}
		surv = signalAndWait(ls, sig, termUntil)
		if len(surv) > 0 && sig == syscall.SIGTERM {
			surv = signalAndWait(surv, syscall.SIGKILL, deadline)
		}
		if len(surv) > 0 || !time.Now().Before(deadline) {
			break
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].PID < all[j].PID })
	// Verified from /proc, not from the signals' bookkeeping.
	if surv = leftoversOf(recs); len(surv) > 0 {
		parts := make([]string, len(surv))
		for i, l := range surv {
			parts[i] = l.String()
		}
		return all, fmt.Errorf("reap leftovers in %s: still running after SIGKILL and %s: %s", dir, limit, strings.Join(parts, ", "))
	}
	for _, r := range recs {
		if r.Cgroup != "" {
			killCgroup(r.Cgroup)
			_ = os.Remove(filepath.Dir(r.Cgroup)) // the dead tsd's base, once its last role is gone
		}
	}
	for _, p := range paths {
		_ = os.Remove(p)
	}
	_ = os.Remove(dir) // only when empty
	return all, nil
}

// DropStaleRecords removes the records in dir whose daemon is gone and
// which name no live process (a daemon killed alone: its guardians
// cleaned up, but nobody removed the records).
func DropStaleRecords(dir string) {
	recs, paths := orphanedRecords(dir)
	for i, r := range recs {
		if len(leftoversOf([]groupRecord{r})) == 0 {
			_ = os.Remove(paths[i])
			if r.Cgroup != "" {
				killCgroup(r.Cgroup)
				_ = os.Remove(filepath.Dir(r.Cgroup))
			}
		}
	}
	_ = os.Remove(dir) // only when empty
}

// signalAndWait sends sig to each process (through a pidfd opened and then
// checked against its start time, so only that process can be hit) and
// waits, until the deadline, for them to exit. It returns those still
// running.
func signalAndWait(ls []Leftover, sig syscall.Signal, deadline time.Time) []Leftover {
	type open struct {
		l  Leftover
		fd int
	}
	var fds []open
	defer func() {
		for _, o := range fds {
			_ = unix.Close(o.fd)
		}
	}()
	var polled []Leftover // no pidfd (a kernel before 5.3): watched through /proc
	for _, l := range ls {
		fd, err := unix.PidfdOpen(l.PID, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // gone already
		}
		if err != nil {
			if st, ok := procfs.ReadStat("", l.PID); ok && st.Start == l.start {
				_ = syscall.Kill(l.PID, sig)
				polled = append(polled, l)
			}
			continue
		}
		if st, ok := procfs.ReadStat("", l.PID); !ok || st.Start != l.start || st.Gone() {
			_ = unix.Close(fd) // gone, or the pid is someone else's now
			continue
		}
		fds = append(fds, open{l, fd})
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		if sig == syscall.SIGTERM {
			_ = unix.PidfdSendSignal(fd, syscall.SIGCONT, nil, 0)
		}
	}
	// A pidfd reads as ready once its process has exited: wait on all of
	// them at once, an event and not a sleep.
	for len(fds) > 0 {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			break
		}
		pfds := make([]unix.PollFd, len(fds))
		for i, o := range fds {
			pfds[i] = unix.PollFd{Fd: int32(o.fd), Events: unix.POLLIN}
		}
		n, err := unix.Poll(pfds, ms)
		if err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
		if n <= 0 {
			continue
		}
		keep := fds[:0]
		for i, o := range fds {
			if pfds[i].Revents != 0 {
				_ = unix.Close(o.fd)
				continue
			}
			keep = append(keep, o)
		}
		fds = keep
	}
	for len(polled) > 0 && time.Now().Before(deadline) {
		keep := polled[:0]
		for _, l := range polled {
			if st, ok := procfs.ReadStat("", l.PID); ok && st.Start == l.start && !st.Gone() {
				keep = append(keep, l)
			}
		}
		if polled = keep; len(polled) > 0 {
			time.Sleep(20 * time.Millisecond) // no event for another parent's child without a pidfd
		}
	}
	out := make([]Leftover, 0, len(fds)+len(polled))
	for _, o := range fds {
		out = append(out, o.l)
	}
	return append(out, polled...)
}

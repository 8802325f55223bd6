package profiles

import (
	"strconv"
	"strings"
)

// The stable planner (docs/architecture.md §4.3): given the plan a
// deployment runs now (HostFacts.Running), the planner keeps what it chose
// for every instance that continues a running one, so `tsd apply` and
// `tsd scale` move nothing they do not change. An instance continues a
// running one when both come from the same profile entry (RolePlan.Group)
// with the same replica index on the same host: `decode` (one replica) is
// continued by `decode-0` when a second replica is added, and `decode-0`
// by `decode` when the group goes back to one.

// ReplicaIndex is which replica of its profile entry a planned instance
// is: 0 for an entry with one replica (the instance is named after the
// entry), k for "<entry>-k"; false for a plan that does not follow the
// naming (hand-written plans).
func (r *RolePlan) ReplicaIndex() (int, bool) {
	if r.Name == r.Group {
		return 0, true
	}
	rest, ok := strings.CutPrefix(r.Name, r.Group+"-")
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(rest)
	if err != nil || k < 0 || strconv.Itoa(k) != rest {
		return 0, false
	}
	return k, true
}

// AddressName is the name the instance's socket path, handshake port and
// log file were planned under: PlannedAs once it was renamed, else Name.
func (r *RolePlan) AddressName() string {
	if r.PlannedAs != "" {
		return r.PlannedAs
	}
	return r.Name
}

// Continues reports whether the running instance old is continued by an
// instance of profile entry group, replica k, on host (docs/architecture.md
// §4.3).
func (r *RolePlan) Continues(group string, k int, local bool, host string) bool {
	if r.Group != group || r.Local != local || (!local && r.Host != host) {
		return false
	}
	idx, ok := r.ReplicaIndex()
	return ok && idx == k
}

// matchRunning finds, for each instance, the running instance it
// continues (nil: a new instance, planned afresh).
func (pl *planner) matchRunning(insts []*inst) {
	run := pl.facts.Running
	if run == nil {
		return
	}
	for _, in := range insts {
		for i := range run.Roles {
			if run.Roles[i].Continues(in.role.Name, in.k, in.role.Local(), in.role.Host) {
				in.keep = &run.Roles[i]
				break
			}
		}
	}
}

// keepWorker gives a continued instance whose profile sets no worker the
// running instance's one (its socket path and handshake port, even when
// the port was moved off a busy derived one); false when there is none to
// keep.
func (pl *planner) keepWorker(in *inst) bool {
	if in.keep == nil || in.keep.Worker == "" {
		return false
	}
	w, err := ParseWorker(in.keep.Worker)
	if err != nil {
		return false
	}
	if w.Scheme == "ipc" {
		if hp := addrPort(in.keep.Handshake); hp > 0 && hp != HandshakePort(w.Path) {
			w.HSPort = hp
		}
	}
	in.worker, in.keptWorker = w, true
	return true
}

package tui

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tsd-project/tsd/snapshot"
)

// The roles table is a list of display rows: a role instance, the summary
// of a role's replicas (its profile entry, snapshot.RoleStatus.Group), or
// one rank of an expanded multi-rank instance. Replicas and ranks fold
// under their summary until → or enter opens it; ← closes it again. The
// overview remembers what is open per role, across snapshots.
type rowKind uint8

const (
	rowRole  rowKind = iota // one role instance
	rowGroup                // the replicas of one profile role
	rowRank                 // one rank of an expanded instance
)

type dispRow struct {
	kind    rowKind
	role    int    // index in Snapshot.Roles: the instance, or a group's first member
	group   string // rowGroup: the group; rowRole: the group it is listed under, if any
	members []int  // rowGroup: its instances
	rank    int    // rowRank: index in Roles[role].Ranks
}

// key names a row across snapshots (indices move when the table sorts).
func (d dispRow) key(s *snapshot.Snapshot) string {
	switch d.kind {
	case rowGroup:
		return "g:" + d.group
	case rowRank:
		return "k:" + s.Roles[d.role].Name + ":" + strconv.Itoa(s.Roles[d.role].Ranks[d.rank].Identity)
	}
	return "r:" + s.Roles[d.role].Name
}

// expandable: a summary row (a group, or an instance of several ranks).
func (d dispRow) expandable(s *snapshot.Snapshot) bool {
	return d.kind == rowGroup || d.kind == rowRole && len(s.Roles[d.role].Ranks) > 1
}

// buildRows lays the table out from the roles in table order: a group row
// where a group's first instance stands, its members under it when open,
// and each open instance's ranks under the instance. keep (nil: every
// role) filters instances; a group stays while any member does, with
// only those.
func buildRows(s *snapshot.Snapshot, open map[string]bool, dst []dispRow, keep func(i int) bool) []dispRow {
	rows := dst[:0]
	size := map[string]int{}
	for i := range s.Roles {
		if g := s.Roles[i].Group; g != "" {
			size[g]++
		}
	}
	placed := map[string]bool{}
	addRole := func(i int, group string) {
		rows = append(rows, dispRow{kind: rowRole, role: i, group: group})
		r := &s.Roles[i]
		if len(r.Ranks) > 1 && open["r:"+r.Name] {
			for k := range r.Ranks {
				rows = append(rows, dispRow{kind: rowRank, role: i, group: group, rank: k})
			}
		}
	}
	for i := range s.Roles {
		g := s.Roles[i].Group
		if g == "" || size[g] < 2 {
			if keep == nil || keep(i) {
				addRole(i, "")
			}
			continue
		}
		if placed[g] {
			continue
		}
		var members []int
		for j := i; j < len(s.Roles); j++ {
			if s.Roles[j].Group == g && (keep == nil || keep(j)) {
				members = append(members, j)
			}
		}
		placed[g] = true
		if len(members) == 0 {
			continue // the filter hides every member
		}
		i := members[0]
		rows = append(rows, dispRow{kind: rowGroup, role: i, group: g, members: members})
		if open["g:"+g] {
			for _, j := range members {
				addRole(j, g)
			}
		}
	}
	return rows
}

// stateRank orders states by how much they need the operator: a group's
// summary shows its worst member's.
func stateRank(state string) int {
	switch state {
	case snapshot.StateFailed:
		return 9
	case snapshot.StateStalled:
		return 8
	case snapshot.StateCrashed:
		return 7
	case snapshot.StateBackoff:
		return 6
	case snapshot.StateStopped:
		return 5
	case snapshot.StateStopping, snapshot.StateDraining:
		return 4
	case snapshot.StateStarting, snapshot.StateHandshaking:
		return 3
	case snapshot.StatePlanned, snapshot.StateRemote:
		return 2
	case snapshot.StateReady:
		return 0
	}
	return 1
}

// groupStatus folds a group's members into one RoleStatus for the summary
// row: sums of counts and load, the worst state (with "k/n ready" as its
// detail), and the worst member's reason, named.
func groupStatus(s *snapshot.Snapshot, d dispRow) snapshot.RoleStatus {
	first := &s.Roles[d.members[0]]
	g := snapshot.RoleStatus{Name: d.group, Group: d.group, Kind: first.Kind, State: snapshot.StateReady}
	ready, worst := 0, -1
	var gpus []string
	seen := map[string]bool{}
	var proc snapshot.ProcStatus
	hasProc := false
	for _, i := range d.members {
		r := &s.Roles[i]
		if r.State == snapshot.StateReady {
			ready++
		}
		if k := stateRank(r.State); k > worst {
			worst = k
			g.State = r.State
			if r.Reason != "" {
				g.Reason = r.Name + ": " + r.Reason
			} else {
				g.Reason = ""
			}
			g.NextTryAt = r.NextTryAt
		}
		if r.Kind != g.Kind {
			g.Kind = "mixed"
		}
		for _, x := range r.GPUs {
			if !seen[x] {
				seen[x] = true
				gpus = append(gpus, x)
			}
		}
		g.Restarts += r.Restarts
		g.RanksExpected += r.RanksExpected
		g.RanksRegistered += r.RanksRegistered
		g.InFlight += r.InFlight
		g.GPUMemB += r.GPUMemB
		if r.Proc != nil {
			hasProc = true
			proc.CPUPercent += r.Proc.CPUPercent
			proc.RSSBytes += r.Proc.RSSBytes
		}
		if r.LogError != "" && g.LogError == "" {
			g.LogError = r.Name + ": " + r.LogError
		}
	}
	g.GPUs = gpus
	if hasProc {
		g.Proc = &proc
	}
	g.Phase = fmt.Sprintf("%d/%d ready", ready, len(d.members))
	return g
}

// groupGPUMem is a group's memory per GPU (members sharing a card add
// up there), so the summary never reads more than a card holds: from
// per-process readings, else from a one-GPU member's total.
func groupGPUMem(s *snapshot.Snapshot, members []int) []gpuMem {
	var out []gpuMem
	add := func(g gpuMem) {
		for i := range out {
			if out[i].index == g.index {
				out[i].used += g.used
				return
			}
		}
		out = append(out, g)
	}
	for _, i := range members {
		r := &s.Roles[i]
		if per := roleGPUMem(s, r.Name); len(per) > 0 {
			for _, g := range per {
				add(g)
			}
			continue
		}
		if len(r.GPUs) == 1 && r.GPUMemB > 0 {
			if idx, err := strconv.Atoi(r.GPUs[0]); err == nil {
				add(gpuMem{index: idx, used: r.GPUMemB})
			}
		}
	}
	return out
}

// rankStatus is one rank as a row: its handshake state and load.
func rankStatus(r *snapshot.RoleStatus, k int) snapshot.RoleStatus {
	rk := &r.Ranks[k]
	return snapshot.RoleStatus{State: rk.State, InFlight: rk.InFlight}
}

// groupTraffic adds up the gateway's accounting of a group's members; the
// latencies are the worst member's (a mean of percentiles means nothing).
func groupTraffic(tr map[string]*snapshot.RoleTraffic, s *snapshot.Snapshot, members []int) *snapshot.RoleTraffic {
	var out snapshot.RoleTraffic
	any := false
	for _, i := range members {
		t := tr[s.Roles[i].Name]
		if t == nil || !serving(s.Roles[i].State) {
			continue // a member that serves nothing now adds no rate
		}
		any = true
		out.ReqPerS += t.ReqPerS
		out.TokPerS += t.TokPerS
		out.InFlight += t.InFlight
		out.Errors += t.Errors
		out.TTFTp50, out.TTFTp99 = max(out.TTFTp50, t.TTFTp50), max(out.TTFTp99, t.TTFTp99)
		out.ITLp50, out.ITLp99 = max(out.ITLp50, t.ITLp50), max(out.ITLp99, t.ITLp99)
		// The group's cache share weighs each member by its prompt
		// tokens; one member without events makes the group's absent.
		if len(t.Cache) > 0 {
			out.Cache = append(out.Cache, t.Cache...)
			out.CachedShare = (out.CachedShare*out.PromptTokS + t.CachedShare*t.PromptTokS) / max(out.PromptTokS+t.PromptTokS, 1e-9)
			out.PromptTokS += t.PromptTokS
		}
		if t.KVEvents != "" && out.KVEvents != snapshot.KVEventsAbsent {
			out.KVEvents, out.KVNote = t.KVEvents, t.KVNote
		}
	}
	if !any {
		return nil
	}
	return &out
}

// rowLabel is the ROLE cell: a group carries an open/closed marker
// (+/−), members and ranks are indented under their summary. An instance
// of several ranks has no marker: its RANKS cell says there is more.
func rowLabel(s *snapshot.Snapshot, d dispRow, open map[string]bool) string {
	var b strings.Builder
	switch d.kind {
	case rowGroup:
		if open["g:"+d.group] {
			b.WriteString("− ")
		} else {
			b.WriteString("+ ")
		}
		b.WriteString(d.group)
		b.WriteString(" ×")
		b.WriteString(strconv.Itoa(len(d.members)))
		return b.String()
	case rowRank:
		if d.group != "" {
			b.WriteString("  ")
		}
		rk := &s.Roles[d.role].Ranks[d.rank]
		b.WriteString("  rank ")
		b.WriteString(strconv.Itoa(rk.Identity))
		if rk.DPRank != rk.Identity {
			b.WriteString(" dp ")
			b.WriteString(strconv.Itoa(rk.DPRank))
		}
		return b.String()
	}
	r := &s.Roles[d.role]
	if d.group != "" {
		b.WriteString("  ")
	}
	b.WriteString(r.Name)
	return b.String()
}

package telemetry

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tsd-project/tsd/snapshot"
)

// RoleGPUs is the GPU selection of one role, as its environment has it.
type RoleGPUs struct {
	Role string
	// CudaVisibleDevices is the role's CUDA_VISIBLE_DEVICES. Empty means the
	// role does not say (remote, or not planned with GPUs): it is mapped to
	// no GPU rather than to all of them, so the panel never claims a GPU for
	// a role on a guess.
	CudaVisibleDevices string
}

// Mapping is which GPUs each role sees, joined by UUID.
type Mapping struct {
	RoleUUIDs map[string][]string // role -> UUIDs, in CUDA's device order
	GPURoles  map[string][]string // UUID -> roles, in the order roles were given
	Notes     []string            // one line per entry that could not be mapped
}

// MapRoles resolves each role's CUDA_VISIBLE_DEVICES against the GPUs a
// provider reported. Entries may be indices (NVML's, which are PCI bus order,
// and equal CUDA's because every role runs with CUDA_DEVICE_ORDER=PCI_BUS_ID)
// or UUIDs: the full "GPU-..." form, or any unique prefix, with or without
// "GPU-". As CUDA does, the first entry that names no GPU hides itself and
// every later entry; the note says so. NVML ignores CUDA_VISIBLE_DEVICES, so
// this join, not the index a process sees, is what ties a GPU to a role.
func MapRoles(gpus []GPUInfo, roles []RoleGPUs) Mapping {
	m := Mapping{RoleUUIDs: map[string][]string{}, GPURoles: map[string][]string{}}
	for _, r := range roles {
		cvd := strings.TrimSpace(r.CudaVisibleDevices)
		if cvd == "" {
			continue
		}
		var uuids []string
		seen := map[string]bool{}
		entries := strings.Split(cvd, ",")
		for n, e := range entries {
			e = strings.TrimSpace(e)
			u, err := resolveDevice(gpus, e)
			if err != nil {
				note := fmt.Sprintf("role %s: CUDA_VISIBLE_DEVICES=%q: entry %q %v", r.Role, r.CudaVisibleDevices, e, err)
				if rest := len(entries) - n - 1; rest > 0 {
					note += fmt.Sprintf("; CUDA also ignores the %d entr%s after it", rest, plural(rest, "y", "ies"))
				}
				m.Notes = append(m.Notes, note)
				break
			}
			if seen[u] {
				m.Notes = append(m.Notes, fmt.Sprintf("role %s: CUDA_VISIBLE_DEVICES=%q: entry %q names %s twice", r.Role, r.CudaVisibleDevices, e, u))
				continue
			}
			seen[u] = true
			uuids = append(uuids, u)
			m.GPURoles[u] = append(m.GPURoles[u], r.Role)
		}
		if len(uuids) > 0 {
			m.RoleUUIDs[r.Role] = uuids
		}
	}
	return m
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// resolveDevice turns one CUDA_VISIBLE_DEVICES entry into a GPU UUID.
func resolveDevice(gpus []GPUInfo, e string) (string, error) {
	if e == "" {
		return "", fmt.Errorf("is empty")
	}
	if n, err := strconv.Atoi(e); err == nil {
		for _, g := range gpus {
			if g.Index == n {
				return g.UUID, nil
			}
		}
		return "", fmt.Errorf("is not a GPU index here (%d GPU%s)", len(gpus), plural(len(gpus), "", "s"))
	}
	if strings.HasPrefix(strings.ToUpper(e), "MIG-") {
		return "", fmt.Errorf("is a MIG device, which the panel does not map")
	}
	want := strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(e, "GPU-"), "gpu-"))
	var found []string
	for _, g := range gpus {
		have := strings.ToLower(strings.TrimPrefix(g.UUID, "GPU-"))
		if strings.HasPrefix(have, want) {
			found = append(found, g.UUID)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("matches no GPU UUID")
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("is ambiguous: prefix of %d GPU UUIDs", len(found))
}

// Join builds the published GPU rows: provider readings plus the roles that
// see each GPU and, per compute process, the role whose process tree holds
// its PID (pidRole). It also sums each role's GPU memory over all GPUs. Pure.
func Join(gpus []GPUInfo, m Mapping, pidRole map[int]string) ([]snapshot.GPUStatus, map[string]uint64) {
	out := make([]snapshot.GPUStatus, 0, len(gpus))
	mem := map[string]uint64{}
	for _, g := range gpus {
		s := snapshot.GPUStatus{
			Index:      g.Index,
			UUID:       g.UUID,
			Name:       g.Name,
			UtilPct:    g.UtilPct,
			MemUsedB:   g.MemUsedB,
			MemTotalB:  g.MemTotalB,
			PowerW:     g.PowerW,
			TempC:      g.TempC,
			SMClockMHz: g.SMClockMHz,
			Roles:      append([]string(nil), m.GPURoles[g.UUID]...),
			Processes:  make([]snapshot.GPUProcess, 0, len(g.Processes)),
		}
		for _, p := range g.Processes {
			role := pidRole[p.PID]
			s.Processes = append(s.Processes, snapshot.GPUProcess{PID: p.PID, UsedB: p.UsedB, Role: role})
			if role != "" {
				mem[role] += p.UsedB
			}
		}
		sort.Slice(s.Processes, func(i, j int) bool { return s.Processes[i].PID < s.Processes[j].PID })
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out, mem
}

// StrayProcesses lists compute processes on role's GPUs that no watched
// role's process tree holds: after a role stops, these are what still pins
// its GPU memory (an orphaned rank, or someone else's job). Empty when the
// role has no mapped GPU or the GPUs are clean.
func (r Readings) StrayProcesses(role string) []StrayProcess {
	var out []StrayProcess
	for _, g := range r.GPUs {
		mine := false
		for _, name := range g.Roles {
			if name == role {
				mine = true
				break
			}
		}
		if !mine {
			continue
		}
		for _, p := range g.Processes {
			if p.Role == "" {
				out = append(out, StrayProcess{GPU: g.Index, UUID: g.UUID, PID: p.PID, UsedB: p.UsedB})
			}
		}
	}
	return out
}

// StrayProcess is a compute process on a role's GPU outside every role tree.
type StrayProcess struct {
	GPU   int
	UUID  string
	PID   int
	UsedB uint64
}

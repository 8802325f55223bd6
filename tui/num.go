package tui

import (
	"fmt"
	"strconv"

	"github.com/tsd-project/tsd/snapshot"
)

func itoa(n int) string    { return strconv.Itoa(n) }
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

func ftoa(f float64, prec int) string { return strconv.FormatFloat(f, 'f', prec, 64) }

// roleGPUMem is a role's GPU memory per GPU it uses, by physical index,
// from the per-process readings (a role's total across its GPUs is not a
// number any card has).
func roleGPUMem(s *snapshot.Snapshot, role string) []gpuMem {
	var out []gpuMem
	for _, g := range s.GPUs {
		var used uint64
		for _, p := range g.Processes {
			if p.Role == role {
				used += p.UsedB
			}
		}
		if used > 0 {
			out = append(out, gpuMem{index: g.Index, used: used, total: g.MemTotalB})
		}
	}
	return out
}

type gpuMem struct {
	index       int
	used, total uint64
}

// gpuMemCell fits a role's per-GPU memory in the table's column: one GPU
// "71.2 GiB", several "≤71 GiB/GPU" (the most on any of its GPUs, said to
// be per GPU: "2×71 GiB" read as a total), else the role's total.
func gpuMemCell(c *cell, per []gpuMem, sum uint64) {
	switch len(per) {
	case 0:
		if sum == 0 {
			c.set("-", pPlain)
			return
		}
		c.set(humanBytes(sum), pPlain) // no per-process readings: the role's total
		return
	case 1:
		c.set(humanBytes(per[0].used), pPlain)
		return
	}
	top := uint64(0)
	for _, g := range per {
		top = max(top, g.used)
	}
	gb := float64(top) / (1 << 30)
	c.set(fmt.Sprintf("≤%.0f GiB/GPU", gb), pPlain)
	c.add(fmt.Sprintf("≤%.0fG/GPU", gb))
}

// pcts are "0%" … "100%", made once: a percentage cell each frame costs
// no allocation.
var pcts = func() [101]string {
	var out [101]string
	for i := range out {
		out[i] = strconv.Itoa(i) + "%"
	}
	return out
}()

// pctText is n as a percentage cell.
func pctText(n int) string {
	if n >= 0 && n <= 100 {
		return pcts[n]
	}
	return strconv.Itoa(n) + "%"
}

// gpuUtil is the mean utilization of the GPUs that run any of the role
// instances members (indices in s.Roles), as telemetry joins GPUs to
// roles; ok is false when no GPU reading names one of them.
func gpuUtil(s *snapshot.Snapshot, members []int) (int, bool) {
	sum, n := 0, 0
	for gi := range s.GPUs {
		g := &s.GPUs[gi]
		if gpuRuns(s, g.Roles, members) {
			sum += g.UtilPct
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return (sum + n/2) / n, true
}

func gpuRuns(s *snapshot.Snapshot, on []string, members []int) bool {
	for _, name := range on {
		for _, i := range members {
			if s.Roles[i].Name == name {
				return true
			}
		}
	}
	return false
}

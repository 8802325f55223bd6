package tui

import (
	"fmt"
	"strconv"

	"github.com/charmbracelet/x/ansi"

	"github.com/tsd-project/tsd/snapshot"
)

func itoa(n int) string    { return strconv.Itoa(n) }
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

func ftoa(f float64, prec int) string { return strconv.FormatFloat(f, 'f', prec, 64) }

func textWidthANSI(s string) int { return ansi.StringWidth(s) }

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

// gpuMemCell fits a role's per-GPU memory in the table's 9-cell column:
// one GPU "71.2 GiB", several "2×71 GiB" (the largest, so the cell never
// reads more than a card holds).
func gpuMemCell(per []gpuMem, sum uint64) string {
	switch len(per) {
	case 0:
		if sum == 0 {
			return "-"
		}
		return humanBytes(sum) // no per-process readings: the role's total
	case 1:
		return humanBytes(per[0].used)
	}
	top := uint64(0)
	for _, g := range per {
		top = max(top, g.used)
	}
	return fmt.Sprintf("%d×%.0f GiB", len(per), float64(top)/(1<<30))
}

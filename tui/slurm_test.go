package tui

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/tui/tuitest"
)

// Slurm roles: the GPU column names what Slurm gave each step
// (NODE:INDEX); a step on another node shows "remote" in the GPU memory
// column and "remote, no telemetry" in the inspector, never a number.
func TestGoldenSlurmRemote(t *testing.T) {
	for _, sz := range sizes {
		s := tuitest.Deployment(4, 1, 2, t0)
		s.Roles[0].SlurmGPUs, s.Roles[0].Nodes, s.Roles[0].SlurmStep = []string{"n1:0", "n1:1"}, []string{"n1"}, "41.0"
		s.Roles[1].SlurmGPUs, s.Roles[1].Nodes, s.Roles[1].SlurmStep = []string{"n2:0"}, []string{"n2"}, "41.3"
		s.Roles[1].NoTelemetry = "remote, no telemetry"
		// This node's telemetry knows nothing of the remote step.
		s.Roles[1].GPUMemB, s.Roles[1].Proc, s.Roles[1].GPUUUIDs = 0, nil, nil
		for i := range s.GPUs {
			g := &s.GPUs[i]
			g.Roles = slices.DeleteFunc(slices.Clone(g.Roles), func(r string) bool { return r == s.Roles[1].Name })
			g.Processes = slices.DeleteFunc(slices.Clone(g.Processes), func(p snapshot.GPUProcess) bool { return p.Role == s.Roles[1].Name })
		}
		remote := s.Roles[1].Name
		m, _ := newTestModel(t, sz.w, sz.h, s)
		over := plain(m)
		checkFrame(t, over, sz.w, sz.h)
		golden(t, fmt.Sprintf("slurm_overview_%dx%d", sz.w, sz.h), over)
		press(m, "down", "enter")
		insp := plain(m)
		checkFrame(t, insp, sz.w, sz.h)
		golden(t, fmt.Sprintf("slurm_inspector_%dx%d", sz.w, sz.h), insp)
		if !strings.Contains(insp, remote) || !strings.Contains(insp, "remote, no telemetry") || !strings.Contains(insp, "n2:0") {
			t.Errorf("%dx%d inspector of %s lacks the remote label or Slurm's GPU:\n%s", sz.w, sz.h, remote, insp)
		}
	}
}

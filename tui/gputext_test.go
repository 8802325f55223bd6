package tui

import (
	"strings"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// Roles that name GPUs by UUID show the physical index telemetry resolved,
// not a truncated UUID that looks the same for every role (found on the
// simulated 4-GPU run).
func TestGPUTextShowsResolvedIndices(t *testing.T) {
	s := &snapshot.Snapshot{GPUs: []snapshot.GPUStatus{
		{Index: 0, UUID: "GPU-fa4e0000"}, {Index: 3, UUID: "GPU-fa4e0003"},
	}}
	for _, c := range []struct {
		role snapshot.RoleStatus
		want string
	}{
		{snapshot.RoleStatus{GPUs: []string{"GPU-fa4e0003"}, GPUUUIDs: []string{"GPU-fa4e0003"}}, "3"},
		{snapshot.RoleStatus{GPUs: []string{"0", "3"}, GPUUUIDs: []string{"GPU-fa4e0000", "GPU-fa4e0003"}}, "0,3"},
		{snapshot.RoleStatus{GPUs: []string{"1"}}, "1"},                                            // not resolved yet
		{snapshot.RoleStatus{GPUs: []string{"GPU-x"}, GPUUUIDs: []string{"GPU-unknown"}}, "GPU-x"}, // not in the list
		{snapshot.RoleStatus{}, "-"},
	} {
		if got := gpuText(s, &c.role); got != c.want {
			t.Errorf("gpuText(%v) = %q, want %q", c.role.GPUs, got, c.want)
		}
	}
}

// Pins: on Ascend the dashboard says NPUs, in the roles
// table's header and the device panel, and GPUs everywhere else.
func TestDeviceLabel(t *testing.T) {
	for _, c := range []struct {
		provider, want string
	}{{"npu-smi", "NPU"}, {"npu-fake", "NPU"}, {"nvml", "GPU"}, {"fake", "GPU"}, {"", "GPU"}} {
		s := snapshot.Snapshot{
			GPUInfo: snapshot.GPUPanelStatus{Provider: c.provider},
			GPUs:    []snapshot.GPUStatus{{Index: 0, UUID: "NPU-0000:c1:00.0", Name: "910B3", Roles: []string{"prefill"}}},
			Roles:   []snapshot.RoleStatus{{Name: "prefill", Kind: "prefill", GPUs: []string{"0"}}},
		}
		m, _ := newTestModel(t, 120, 40, s)
		view := m.overview.View()
		if !strings.Contains(view, c.want+"S") || !strings.Contains(view, c.want+"s") {
			t.Errorf("%q: view lacks %sS / %ss:\n%s", c.provider, c.want, c.want, view)
		}
		other := map[string]string{"NPU": "GPUS", "GPU": "NPUS"}[c.want]
		if strings.Contains(view, other) {
			t.Errorf("%q: view shows %s", c.provider, other)
		}
	}
}

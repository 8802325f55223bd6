package tui

import (
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

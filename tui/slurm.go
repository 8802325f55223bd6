package tui

import (
	"strings"

	"github.com/tsd-project/tsd/snapshot"
)

// A Slurm role's devices are the ones Slurm gave its step, on its node(s):
// the status names them NODE:INDEX (cmd/tsd/slurm.go); the profile's gpus:
// do not apply.
func slurmGPUText(r *snapshot.RoleStatus) (string, bool) {
	if len(r.SlurmGPUs) == 0 {
		return "", false
	}
	return strings.Join(r.SlurmGPUs, ","), true
}

// noTelemetryCell is what a reading column shows for a role this node
// cannot read (a Slurm step on another node): a word, never a number.
func noTelemetryCell(r *snapshot.RoleStatus) (string, bool) {
	if r.NoTelemetry == "" {
		return "", false
	}
	return "remote", true
}

// slurmInspectorParts are the inspector's words about a Slurm role: its
// step and nodes, and why it shows no readings.
func slurmInspectorParts(r *snapshot.RoleStatus) []string {
	var out []string
	if r.SlurmStep != "" {
		out = append(out, "Slurm step "+r.SlurmStep)
	}
	if len(r.Nodes) > 0 {
		out = append(out, "on "+strings.Join(r.Nodes, ","))
	}
	if r.NoTelemetry != "" {
		out = append(out, r.NoTelemetry)
	}
	return out
}

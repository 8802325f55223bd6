package telemetry

import (
	"context"
	"slices"

	"github.com/tsd-project/tsd/snapshot"
)

// Decorator is the GPU↔role join: it keeps the roles telemetry watches in
// step with each Snapshot's roles (their PIDs and the devices each was
// given) and folds the latest readings into the Snapshot: the GPU table
// and panel, each running role's process load, its GPU memory and the
// UUIDs of the GPUs it holds. It is the supervisor's Telemetry and
// GPUReleaseVerifier; Decorate runs on the publisher goroutine alone, so
// the last role list is that goroutine's.
type Decorator struct {
	t     *Telemetry
	watch func(r *snapshot.RoleStatus) RoleInfo
	roles []RoleInfo // the list last given to SetRoles
}

// NewDecorator joins t's readings to snapshots. watch says what telemetry
// watches for one role of a snapshot: its process tree's root and its
// devices (the plan's CUDA_VISIBLE_DEVICES or its accelerator's
// variable); it may also fill fields of the role that only its launcher
// knows (a Slurm step's nodes and GPUs). nil watches each role's PID and
// no devices.
func NewDecorator(t *Telemetry, watch func(r *snapshot.RoleStatus) RoleInfo) *Decorator {
	if watch == nil {
		watch = func(r *snapshot.RoleStatus) RoleInfo { return RoleInfo{Name: r.Name, RootPID: r.PID} }
	}
	return &Decorator{t: t, watch: watch}
}

// Decorate assigns s's telemetry fields from the cached readings (no I/O).
func (d *Decorator) Decorate(s *snapshot.Snapshot) {
	roles := make([]RoleInfo, 0, len(s.Roles))
	for i := range s.Roles {
		roles = append(roles, d.watch(&s.Roles[i]))
	}
	if !slices.Equal(roles, d.roles) {
		d.roles = roles
		d.t.SetRoles(roles)
	}
	rd := d.t.Latest()
	s.GPUs = rd.GPUs
	s.GPUInfo = rd.Panel
	for i := range s.Roles {
		name := s.Roles[i].Name
		if p, ok := rd.Procs[name]; ok && s.Roles[i].PID != 0 {
			s.Roles[i].Proc = &p
		}
		s.Roles[i].GPUMemB = rd.RoleGPUMem[name]
		if u := rd.RoleGPUUUIDs[name]; len(u) > 0 {
			s.Roles[i].GPUUUIDs = u
		}
	}
}

// HoldGPUs lets the supervisor verify that a stopped role's GPU memory is
// released (Telemetry.HoldGPUs).
func (d *Decorator) HoldGPUs(role string) func(context.Context) (bool, string) {
	return d.t.HoldGPUs(role)
}

package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// GPUHold is what one role held on its GPUs when its stop began: the
// baseline that later readings are judged against to tell that a stopped
// role's GPU memory was released (docs/architecture.md §4, stop/restart).
type GPUHold struct {
	Role string
	// PIDs is the role's process tree as last polled: any of them still on
	// a GPU pins the role's memory, whichever tree (if any) holds it now.
	PIDs map[int]bool
	// GPUs are the role's GPUs (by CUDA_VISIBLE_DEVICES) with what it held.
	GPUs []HeldGPU
	// others are compute processes on those GPUs outside every role tree
	// when the stop began (someone else's job): they are not the role's to
	// release. A process that turns up outside every tree only after the
	// stop began is counted as the role's (an orphaned rank).
	others map[int]bool
}

// HeldGPU is one of a role's GPUs.
type HeldGPU struct {
	Index int
	UUID  string
	// UsedB is the memory of the role's processes on it.
	UsedB uint64
	// DevUsedB is the whole GPU's used memory then; the fallback measure of
	// what was freed when the driver reports no per-process memory.
	DevUsedB uint64
}

// Hold records what role holds on its GPUs in r. ok is false when there is
// nothing to verify against: no GPU readings (no driver, or not polled yet)
// or no GPU mapped to the role.
func (r Readings) Hold(role string) (GPUHold, bool) {
	uuids := r.RoleGPUUUIDs[role]
	if len(uuids) == 0 || len(r.GPUs) == 0 {
		return GPUHold{}, false
	}
	h := GPUHold{Role: role, PIDs: map[int]bool{}, others: map[int]bool{}}
	for _, pid := range r.Procs[role].PIDs {
		h.PIDs[pid] = true
	}
	mine := map[string]bool{}
	for _, u := range uuids {
		mine[u] = true
	}
	for _, g := range r.GPUs {
		if !mine[g.UUID] {
			continue
		}
		hg := HeldGPU{Index: g.Index, UUID: g.UUID, DevUsedB: g.MemUsedB}
		for _, p := range g.Processes {
			switch {
			case p.Role == role || h.PIDs[p.PID]:
				hg.UsedB += p.UsedB
				h.PIDs[p.PID] = true
			case p.Role == "":
				h.others[p.PID] = true
			}
		}
		h.GPUs = append(h.GPUs, hg)
	}
	if len(h.GPUs) == 0 {
		return GPUHold{}, false
	}
	return h, true
}

// Pending lists the compute processes in r that still pin the memory of
// h's role: on one of its GPUs, and in its tree when the stop began, or
// still counted to it, or outside every tree and new since the stop began.
// Pure.
func (h GPUHold) Pending(r Readings) []StrayProcess {
	var out []StrayProcess
	for _, hg := range h.GPUs {
		for _, g := range r.GPUs {
			if g.UUID != hg.UUID {
				continue
			}
			for _, p := range g.Processes {
				if h.PIDs[p.PID] || p.Role == h.Role || (p.Role == "" && !h.others[p.PID]) {
					out = append(out, StrayProcess{GPU: g.Index, UUID: g.UUID, PID: p.PID, UsedB: p.UsedB})
				}
			}
		}
	}
	return out
}

// Release is the outcome of WaitReleased.
type Release struct {
	Role     string
	Released bool
	// Freed is, per GPU of the role, what it held; when the driver reported
	// no per-process memory, the drop in the GPU's used memory instead.
	Freed []HeldGPU
	// Pending is what still pinned the memory when the wait ended.
	Pending []StrayProcess
	// Waited is how long the wait took.
	Waited time.Duration
	// Err says why the release could not be judged (no fresh reading).
	Err string
}

// String is the line for the role's log: "GPU memory released (2048 MiB
// freed on GPU-…)", or why it was not.
func (r Release) String() string {
	if r.Released {
		parts := make([]string, 0, len(r.Freed))
		for _, g := range r.Freed {
			parts = append(parts, fmt.Sprintf("%d MiB freed on %s", g.UsedB/mib, g.UUID))
		}
		return "GPU memory released (" + strings.Join(parts, ", ") + ")"
	}
	if len(r.Pending) > 0 {
		parts := make([]string, 0, len(r.Pending))
		for _, p := range r.Pending {
			parts = append(parts, fmt.Sprintf("pid %d holds %d MiB on %s", p.PID, p.UsedB/mib, p.UUID))
		}
		return fmt.Sprintf("GPU memory not released after %s: %s", r.Waited.Round(100*time.Millisecond), strings.Join(parts, "; "))
	}
	return "GPU memory release not verified: " + r.Err
}

// freed says what went from each GPU of h, judged by r.
func (h GPUHold) freed(r Readings) []HeldGPU {
	out := make([]HeldGPU, 0, len(h.GPUs))
	for _, hg := range h.GPUs {
		f := hg
		if f.UsedB == 0 {
			for _, g := range r.GPUs {
				if g.UUID == hg.UUID && g.MemUsedB < hg.DevUsedB {
					f.UsedB = hg.DevUsedB - g.MemUsedB
				}
			}
		}
		out = append(out, f)
	}
	return out
}

// WaitReleased waits until no process of h's role is left on its GPUs,
// judging only GPU polls begun after the call (so a reading taken while
// the role was still alive never counts), or until ctx ends. Call it once
// the role's process group is verified empty. It wakes on each published
// Readings; it never polls by itself.
func (t *Telemetry) WaitReleased(ctx context.Context, h GPUHold) Release {
	since := time.Now()
	ch, cancel := t.Subscribe()
	defer cancel()
	var last Readings
	fresh := false
	for {
		select {
		case r := <-ch:
			if !r.GPUPolledAt.After(since) {
				continue
			}
			last, fresh = r, true
			if len(h.Pending(r)) == 0 {
				return Release{Role: h.Role, Released: true, Freed: h.freed(r), Waited: time.Since(since)}
			}
		case <-ctx.Done():
			rel := Release{Role: h.Role, Waited: time.Since(since)}
			if !fresh {
				why := "no GPU reading came in"
				if errors.Is(ctx.Err(), context.Canceled) {
					why = "the wait was cancelled"
				}
				rel.Err = fmt.Sprintf("%s within %s", why, rel.Waited.Round(100*time.Millisecond))
				return rel
			}
			rel.Pending = h.Pending(last)
			return rel
		}
	}
}

// aliveHold is a role's hold gathered over the readings of one run (one
// root pid).
type aliveHold struct {
	root int
	h    GPUHold
}

// merge adds what h's role held in an earlier reading of the same run:
// its pids stay the role's (never someone else's), and each GPU keeps the
// most it held. Pure.
func (h GPUHold) merge(prev GPUHold) GPUHold {
	out := GPUHold{Role: h.Role, PIDs: map[int]bool{}, others: map[int]bool{}}
	for pid := range prev.PIDs {
		out.PIDs[pid] = true
	}
	for pid := range h.PIDs {
		out.PIDs[pid] = true
	}
	for pid := range h.others {
		if !out.PIDs[pid] {
			out.others[pid] = true
		}
	}
	for pid := range prev.others {
		if !out.PIDs[pid] {
			out.others[pid] = true
		}
	}
	out.GPUs = append([]HeldGPU(nil), h.GPUs...)
	for i, g := range out.GPUs {
		for _, p := range prev.GPUs {
			if p.UUID == g.UUID && p.UsedB > g.UsedB {
				out.GPUs[i].UsedB, out.GPUs[i].DevUsedB = p.UsedB, p.DevUsedB
			}
		}
	}
	return out
}

// HoldGPUs notes what role holds on its GPUs now (cheap: it reads Latest)
// and returns the wait to run once its process group is verified empty,
// with the line to log; nil when there is nothing to verify. It is the
// supervisor's GPUReleaseVerifier seam. The baseline is what the role's
// run held over the readings that showed its tree: for a role that already
// died (a crash), the latest reading may show only part of the tree or
// none, its dying ranks then looking like someone else's processes.
func (t *Telemetry) HoldGPUs(role string) func(ctx context.Context) (released bool, msg string) {
	h, ok := t.Latest().Hold(role)
	t.mu.Lock()
	if a, found := t.alive[role]; found {
		// It has the latest reading in it whenever that showed the tree.
		h, ok = a.h, true
	}
	t.mu.Unlock()
	if !ok {
		return nil
	}
	return func(ctx context.Context) (bool, string) {
		r := t.WaitReleased(ctx, h)
		return r.Released, r.String()
	}
}

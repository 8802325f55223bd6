package telemetry

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

func relReadings(procs ...snapshot.GPUProcess) Readings {
	return Readings{
		GPUs: []snapshot.GPUStatus{
			{Index: 0, UUID: "GPU-a", MemUsedB: 5000 * mib, Roles: []string{"decode"}, Processes: procs},
			{Index: 1, UUID: "GPU-b", MemUsedB: 100 * mib, Roles: []string{"prefill"}, Processes: []snapshot.GPUProcess{{PID: 30, UsedB: 100 * mib, Role: "prefill"}}},
		},
		Procs:        map[string]snapshot.ProcStatus{"decode": {PIDs: []int{10, 11, 12}}},
		RoleGPUUUIDs: map[string][]string{"decode": {"GPU-a"}, "prefill": {"GPU-b"}},
	}
}

// Pending is what still pins a stopped role's memory: its old pids (now
// counted to no role), and processes outside every tree that were not there
// when the stop began; someone else's job and other roles are not its.
func TestGPUHoldPending(t *testing.T) {
	t.Parallel()
	before := relReadings(
		snapshot.GPUProcess{PID: 11, UsedB: 2048 * mib, Role: "decode"},
		snapshot.GPUProcess{PID: 99, UsedB: 512 * mib}, // someone else's job
	)
	h, ok := before.Hold("decode")
	if !ok || len(h.GPUs) != 1 || h.GPUs[0].UsedB != 2048*mib || h.GPUs[0].UUID != "GPU-a" {
		t.Fatalf("hold %+v ok %v", h, ok)
	}
	if _, ok := before.Hold("encode"); ok {
		t.Fatal("a role with no GPU has nothing to verify")
	}
	if _, ok := (Readings{RoleGPUUUIDs: before.RoleGPUUUIDs}).Hold("decode"); ok {
		t.Fatal("no GPU readings: nothing to verify")
	}
	cases := []struct {
		name string
		r    Readings
		want []int
	}{
		{"released", relReadings(snapshot.GPUProcess{PID: 99, UsedB: 512 * mib}), nil},
		{"old pid now outside every tree", relReadings(snapshot.GPUProcess{PID: 11, UsedB: 2048 * mib}, snapshot.GPUProcess{PID: 99, UsedB: 512 * mib}), []int{11}},
		{"new orphan", relReadings(snapshot.GPUProcess{PID: 13, UsedB: 1 * mib}), []int{13}},
		{"another role on the GPU", relReadings(snapshot.GPUProcess{PID: 40, UsedB: 1 * mib, Role: "prefill"}), nil},
	}
	for _, c := range cases {
		var got []int
		for _, p := range h.Pending(c.r) {
			got = append(got, p.PID)
		}
		if len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) {
			t.Errorf("%s: pending %v, want %v", c.name, got, c.want)
		}
	}
}

func TestReleaseString(t *testing.T) {
	t.Parallel()
	ok := Release{Released: true, Freed: []HeldGPU{{UUID: "GPU-a", UsedB: 2048 * mib}}}
	if got := ok.String(); got != "GPU memory released (2048 MiB freed on GPU-a)" {
		t.Errorf("released: %q", got)
	}
	not := Release{Waited: 15 * time.Second, Pending: []StrayProcess{{UUID: "GPU-a", PID: 11, UsedB: 2048 * mib}}}
	if got := not.String(); got != "GPU memory not released after 15s: pid 11 holds 2048 MiB on GPU-a" {
		t.Errorf("not released: %q", got)
	}
	if got := (Release{Err: "no GPU reading came in within 1s"}).String(); !strings.HasPrefix(got, "GPU memory release not verified: ") {
		t.Errorf("unverified: %q", got)
	}
	// Without per-process memory the GPU's own drop is what was freed.
	h := GPUHold{GPUs: []HeldGPU{{UUID: "GPU-a", DevUsedB: 3000 * mib}}}
	f := h.freed(Readings{GPUs: []snapshot.GPUStatus{{UUID: "GPU-a", MemUsedB: 1000 * mib}}})
	if f[0].UsedB != 2000*mib {
		t.Errorf("freed by device drop: %d MiB", f[0].UsedB/mib)
	}
}

// On the simulated GPUs: a role's process holds memory; once it is gone
// WaitReleased says so from a poll made after the call. A process that
// stays past the deadline is named.
func TestWaitReleasedFakeGPUs(t *testing.T) {
	t.Parallel()
	tel := New(Options{FakeGPUs: 2, FakeManualProcesses: true, GPUInterval: 20 * time.Millisecond, ProcInterval: 20 * time.Millisecond})
	runTelemetry(t, tel)
	root := startTree(t, `sleep 60 & sleep 60 & wait`)
	tel.SetRoles([]RoleInfo{{Name: "decode", RootPID: root, CudaVisibleDevices: "1"}})
	ch, cancel := tel.Subscribe()
	defer cancel()
	r := waitReadings(t, ch, func(r Readings) bool { return len(r.Procs["decode"].PIDs) == 3 })
	kids := r.Procs["decode"].PIDs[1:]
	if err := tel.Fake().AttachProcess(1, kids[0], 2048*mib); err != nil {
		t.Fatal(err)
	}
	if err := tel.Fake().AttachProcess(1, kids[1], 1024*mib); err != nil {
		t.Fatal(err)
	}
	waitReadings(t, ch, func(r Readings) bool { return r.RoleGPUMem["decode"] == 3072*mib })
	h, ok := tel.Latest().Hold("decode")
	if !ok {
		t.Fatal("no hold")
	}

	// One process lets go; the other stays: not released by the deadline.
	tel.Fake().DetachProcess(kids[0])
	ctx, c1 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	rel := tel.WaitReleased(ctx, h)
	c1()
	if rel.Released || len(rel.Pending) != 1 || rel.Pending[0].PID != kids[1] || rel.Pending[0].UUID != tel.Fake().UUID(1) {
		t.Fatalf("with one process left: %+v", rel)
	}
	if !strings.Contains(rel.String(), "not released") {
		t.Errorf("line %q", rel.String())
	}

	// The role stops: its tree dies and its last process lets go.
	_ = syscall.Kill(-root, syscall.SIGKILL)
	tel.SetRoles([]RoleInfo{{Name: "decode", CudaVisibleDevices: "1"}})
	tel.Fake().DetachProcess(kids[1])
	ctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer c2()
	rel = tel.WaitReleased(ctx, h)
	if !rel.Released {
		t.Fatalf("not released: %+v", rel)
	}
	want := "GPU memory released (3072 MiB freed on " + tel.Fake().UUID(1) + ")"
	if rel.String() != want {
		t.Errorf("line %q, want %q", rel.String(), want)
	}

	// A role with no GPU, or telemetry without GPU readings: nothing to wait for.
	if tel.HoldGPUs("encode") != nil {
		t.Error("HoldGPUs for a role without GPUs")
	}
}

// A crashed role's tree dies rank by rank: a reading that lost a rank from
// the tree while the rank still shows on the GPU must not make it someone
// else's, nor shrink what the run held.
func TestGPUHoldMergeKeepsDyingRanks(t *testing.T) {
	t.Parallel()
	alive := relReadings(snapshot.GPUProcess{PID: 11, UsedB: 2048 * mib, Role: "decode"})
	h1, _ := alive.Hold("decode")
	dying := relReadings(snapshot.GPUProcess{PID: 11, UsedB: 2048 * mib}) // 11 left the tree
	dying.Procs = map[string]snapshot.ProcStatus{"decode": {PIDs: []int{10}}}
	h2, _ := dying.Hold("decode")
	if len(h2.Pending(dying)) != 0 {
		t.Fatal("premise: the dying reading alone calls pid 11 someone else's")
	}
	h := h2.merge(h1)
	if p := h.Pending(dying); len(p) != 1 || p[0].PID != 11 {
		t.Fatalf("pending %+v, want pid 11", p)
	}
	if h.GPUs[0].UsedB != 2048*mib {
		t.Fatalf("held %d", h.GPUs[0].UsedB)
	}
}

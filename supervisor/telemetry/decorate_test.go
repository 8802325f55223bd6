package telemetry

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// The join gives each running role its process load, GPU memory and GPU
// UUIDs from the devices watch names, fills the GPU table, and leaves a
// role that is not running without process readings.
func TestDecoratorJoinsReadingsToRoles(t *testing.T) {
	t.Parallel()
	tel := New(Options{FakeGPUs: 2, GPUInterval: 10 * time.Millisecond, ProcInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tel.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var watched []string
	d := NewDecorator(tel, func(r *snapshot.RoleStatus) RoleInfo {
		watched = append(watched, r.Name)
		devices := map[string]string{"decode": "1", "prefill": "0"}[r.Name]
		return RoleInfo{Name: r.Name, RootPID: r.PID, CudaVisibleDevices: devices}
	})
	me := os.Getpid()
	snap := func() snapshot.Snapshot {
		s := snapshot.Snapshot{Roles: []snapshot.RoleStatus{{Name: "decode", PID: me}, {Name: "prefill"}}}
		d.Decorate(&s)
		return s
	}
	// Readings change on telemetry's own goroutine: wait for the one that
	// shows the role's process on its GPU, a bounded number of polls.
	updates, stop := tel.Subscribe()
	defer stop()
	deadline := time.After(10 * time.Second)
	var s snapshot.Snapshot
	for {
		s = snap()
		if s.Roles[0].GPUMemB > 0 && s.Roles[0].Proc != nil {
			break
		}
		select {
		case <-updates:
		case <-deadline:
			t.Fatalf("no joined reading: %+v", s.Roles)
		}
	}
	dec, pre := s.Roles[0], s.Roles[1]
	if !slices.Equal(dec.GPUUUIDs, []string{tel.Fake().UUID(1)}) {
		t.Errorf("decode GPUs %v, want [%s]", dec.GPUUUIDs, tel.Fake().UUID(1))
	}
	if !slices.Contains(dec.Proc.PIDs, me) {
		t.Errorf("decode pids %v lack %d", dec.Proc.PIDs, me)
	}
	if pre.Proc != nil || pre.GPUMemB != 0 {
		t.Errorf("prefill is not running but shows %+v", pre)
	}
	if len(s.GPUs) != 2 || !s.GPUInfo.Simulated {
		t.Errorf("GPU table %d rows, panel %+v", len(s.GPUs), s.GPUInfo)
	}
	if len(watched) == 0 || watched[0] != "decode" || watched[1] != "prefill" {
		t.Errorf("watch saw %v", watched)
	}
	if d.HoldGPUs("decode") == nil {
		t.Error("no GPU release wait for a role holding a GPU")
	}
}

package supervisor

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor/telemetry"
)

// watchDevices is the telemetry join as tsd wires it (telemetry.Decorator),
// with each role's CUDA_VISIBLE_DEVICES from cvd instead of a plan.
func watchDevices(t *telemetry.Telemetry, cvd map[string]string) *telemetry.Decorator {
	return telemetry.NewDecorator(t, func(r *snapshot.RoleStatus) telemetry.RoleInfo {
		return telemetry.RoleInfo{Name: r.Name, RootPID: r.PID, CudaVisibleDevices: cvd[r.Name]}
	})
}

func startTel(t *testing.T, opts telemetry.Options) *telemetry.Telemetry {
	t.Helper()
	opts.GPUInterval, opts.ProcInterval = 20*time.Millisecond, 20*time.Millisecond
	tel := telemetry.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tel.Run(ctx) }()
	// Registered before the fixture's: runs after Run has returned.
	t.Cleanup(func() { cancel(); <-done })
	return tel
}

func hasGPUMem(r snapshot.RoleStatus) bool { return r.GPUMemB > 0 && r.PID != 0 }

// On simulated GPUs (which put a role's processes on its GPUs by pid), a
// restart and a stop each wait for the role's memory to go before moving
// on, and say how much went from which GPU.
func TestStopVerifiesGPUMemoryReleased(t *testing.T) {
	t.Parallel()
	tel := startTel(t, telemetry.Options{FakeGPUs: 2})
	seam := watchDevices(tel, map[string]string{"decode": "1"})
	f := newFixture(t, nil, func(o *Options) { o.Telemetry = seam }, shRole("decode", profiles.KindDecode, readyScript))
	f.wait("decode", "GPU memory held", hasGPUMem)

	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "restarted and holding again", func(r snapshot.RoleStatus) bool { return r.Restarts == 1 && hasGPUMem(r) })
	if log := logText(t, f.sup, "decode"); !strings.Contains(log, "GPU memory released (") || !strings.Contains(log, "freed on "+tel.Fake().UUID(1)+")") {
		t.Fatalf("restart log lacks the release line:\n%s", log)
	}

	if err := f.sup.Stop("decode"); err != nil {
		t.Fatal(err)
	}
	r := f.wait("decode", "stopped", state(snapshot.StateStopped))
	if r.Reason != "stopped by request" {
		t.Errorf("reason %q", r.Reason)
	}
	if n := strings.Count(logText(t, f.sup, "decode"), "[tsd] GPU memory released ("); n != 2 {
		t.Errorf("%d release lines, want 2", n)
	}
	found := false
	for _, e := range f.sup.Snapshot().Events {
		found = found || (e.Role == "decode" && strings.HasPrefix(e.Message, "GPU memory released ("))
	}
	if !found {
		t.Error("no release event")
	}
}

// A process the role left on its GPU (here one the simulated GPU keeps
// showing) holds the stop until the deadline; the role still stops, and
// its Reason says why the memory was not released.
func TestStopReportsGPUMemoryNotReleased(t *testing.T) {
	t.Parallel()
	tel := startTel(t, telemetry.Options{FakeGPUs: 1, FakeManualProcesses: true})
	seam := watchDevices(tel, map[string]string{"decode": "0"})
	f := newFixture(t, nil, func(o *Options) {
		o.Telemetry = seam
		o.GPUReleaseTimeout = 500 * time.Millisecond
	}, shRole("decode", profiles.KindDecode, readyScript))
	f.wait("decode", "ready", state(snapshot.StateReady))
	ch, cancel := tel.Subscribe()
	defer cancel()
	deadline := time.After(waitLimit)
	var kid int
	for kid == 0 {
		select {
		case rd := <-ch:
			if p := rd.Procs["decode"].PIDs; len(p) == 3 {
				kid = p[2]
			}
		case <-deadline:
			t.Fatal("role tree never polled")
		}
	}
	if err := tel.Fake().AttachProcess(0, kid, 1024<<20); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "GPU memory held", hasGPUMem)
	if err := f.sup.Stop("decode"); err != nil {
		t.Fatal(err)
	}
	r := f.wait("decode", "stopped", state(snapshot.StateStopped))
	want := "stopped by request; GPU memory not released after "
	if !strings.HasPrefix(r.Reason, want) || !strings.Contains(r.Reason, "holds 1024 MiB on "+tel.Fake().UUID(0)) {
		t.Errorf("reason %q, want %q...", r.Reason, want)
	}
}

// Without a GPU release verifier (or with no GPU mapped) a stop is what it
// was: the group check alone, no wait.
func TestStopWithoutGPUsSkipsCheck(t *testing.T) {
	t.Parallel()
	tel := startTel(t, telemetry.Options{FakeGPUs: 1})
	seam := watchDevices(tel, nil) // no CUDA_VISIBLE_DEVICES: no GPU mapped
	f := newFixture(t, nil, func(o *Options) { o.Telemetry = seam }, shRole("decode", profiles.KindDecode, readyScript))
	f.wait("decode", "ready", state(snapshot.StateReady))
	if err := f.sup.Stop("decode"); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "stopped", state(snapshot.StateStopped))
	if log := logText(t, f.sup, "decode"); strings.Contains(log, "GPU memory") {
		t.Errorf("unexpected GPU check:\n%s", log)
	}
}

// A crashed role is restarted only once its GPU memory is released (a
// relaunch on memory a dying rank still holds would OOM), and the release
// wait runs alongside the backoff instead of after it.
func TestCrashRestartWaitsForGPUMemoryRelease(t *testing.T) {
	t.Parallel()
	tel := startTel(t, telemetry.Options{FakeGPUs: 1, FakeManualProcesses: true})
	seam := watchDevices(tel, map[string]string{"decode": "0"})
	role := shRole("decode", profiles.KindDecode, readyScript)
	role.Restart.Backoff = profiles.Duration(500 * time.Millisecond)
	role.Restart.MaxBackoff = profiles.Duration(2 * time.Second)
	f := newFixture(t, nil, func(o *Options) { o.Telemetry = seam }, role)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("decode log:\n%s", logText(t, f.sup, "decode"))
		}
	})
	r := f.wait("decode", "ready", state(snapshot.StateReady))

	// A rank the fake GPU keeps showing after the crash: a dying rank
	// whose memory the driver has not freed yet.
	ch, cancel := tel.Subscribe()
	defer cancel()
	deadline := time.After(waitLimit)
	var kid int
	for kid == 0 {
		select {
		case rd := <-ch:
			if p := rd.Procs["decode"].PIDs; len(p) == 3 {
				kid = p[2]
			}
		case <-deadline:
			t.Fatal("role tree never polled")
		}
	}
	cancel()
	if err := tel.Fake().AttachProcess(0, kid, 1024<<20); err != nil {
		t.Fatal(err)
	}
	f.wait("decode", "GPU memory held", hasGPUMem)
	if err := syscall.Kill(-r.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The 500 ms backoff ends, the memory is still held: no start yet.
	r = f.wait("decode", "backoff over, memory held", func(r snapshot.RoleStatus) bool {
		return r.State == snapshot.StateBackoff && r.Reason == "waiting for the GPU memory to be released"
	})
	if r.Restarts != 1 || r.PID != 0 {
		t.Fatalf("started on held memory: %+v\n%s", r, logText(t, f.sup, "decode"))
	}
	tel.Fake().DetachProcess(kid)
	f.wait("decode", "restarted", func(r snapshot.RoleStatus) bool { return r.Restarts == 1 && r.State == snapshot.StateReady })
	log := logText(t, f.sup, "decode")
	wait := strings.Index(log, "[tsd] waiting up to 15s for the GPU memory to be released")
	rel := strings.Index(log, "[tsd] GPU memory released (1024 MiB freed on "+tel.Fake().UUID(0)+")")
	second := strings.LastIndex(log, "[tsd] starting: ")
	if wait < 0 || rel < wait || second < rel {
		t.Fatalf("log lacks wait → released → starting:\n%s", log)
	}

	// Nothing holds the GPU now: the release comes in while the 1 s
	// backoff still runs, and the start waits for the backoff alone.
	r = f.wait("decode", "pid", func(r snapshot.RoleStatus) bool { return r.PID != 0 })
	if err := syscall.Kill(-r.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cur, sub, unsub := f.sup.Subscribe()
	defer unsub()
	timeout := time.After(waitLimit)
	for {
		n := 0
		for _, e := range cur.Events {
			if e.Role == "decode" && strings.HasPrefix(e.Message, "GPU memory released (") {
				n++
			}
		}
		if n == 2 {
			break
		}
		select {
		case cur = <-sub:
		case <-timeout:
			t.Fatal("no release after the second crash")
		}
	}
	for _, r := range cur.Roles {
		if r.Name == "decode" && (r.State != snapshot.StateBackoff || !strings.Contains(r.Reason, "next try in 1s")) {
			t.Errorf("release did not overlap the backoff: %s %q", r.State, r.Reason)
		}
	}
	f.wait("decode", "restarted again", func(r snapshot.RoleStatus) bool { return r.Restarts == 2 && r.State == snapshot.StateReady })
}

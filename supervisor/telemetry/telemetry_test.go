package telemetry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// waitReadings reads the subscription until cond holds or 10 s pass.
func waitReadings(t *testing.T, ch <-chan Readings, cond func(Readings) bool) Readings {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var last Readings
	for {
		select {
		case r := <-ch:
			if cond(r) {
				return r
			}
			last = r
		case <-timeout:
			t.Fatalf("readings never matched; last seq %d panel %+v procs %+v mem %v gpus %d", last.Seq, last.Panel, last.Procs, last.RoleGPUMem, len(last.GPUs))
		}
	}
}

func runTelemetry(t *testing.T, tel *Telemetry) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tel.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// The demo path: fake GPUs, real process trees, roles named by index and by
// UUID prefix; each role's processes land on its GPUs and its memory adds up.
func TestTelemetryFakeDemoAttributesMemoryPerRole(t *testing.T) {
	t.Parallel()
	tel := New(Options{FakeGPUs: 4, GPUInterval: 20 * time.Millisecond, ProcInterval: 20 * time.Millisecond})
	pre := startTree(t, `sleep 60 & wait`)
	dec := startTree(t, `sleep 60 & sleep 60 & wait`)
	ch, cancel := tel.Subscribe()
	defer cancel()
	first := <-ch
	if first.Panel.Provider != ProviderFake || !first.Panel.Simulated {
		t.Fatalf("first panel %+v", first.Panel)
	}
	runTelemetry(t, tel)
	tel.SetRoles([]RoleInfo{
		{Name: "prefill", RootPID: pre, CudaVisibleDevices: "0"},
		{Name: "decode", RootPID: dec, CudaVisibleDevices: tel.Fake().UUID(2)[:12] + "," + tel.Fake().UUID(3)},
	})
	r := waitReadings(t, ch, func(r Readings) bool {
		return len(r.GPUs) == 4 && r.RoleGPUMem["prefill"] > 0 && r.RoleGPUMem["decode"] > 0 &&
			len(r.Procs["decode"].PIDs) == 3 && len(r.GPUs[2].Processes) == 1 && len(r.GPUs[3].Processes) == 1 &&
			// The fake attaches what the previous tree poll saw, and a GPU poll
			// reads each device at its own instant: until a tree poll has seen
			// both ranks (the root alone stands in before they fork), one
			// reading can show the root on one GPU and a rank on the other.
			// Wait for both ranks.
			r.GPUs[2].Processes[0].PID != r.GPUs[3].Processes[0].PID &&
			r.GPUs[2].Processes[0].PID != dec && r.GPUs[3].Processes[0].PID != dec
	})
	if !r.Panel.Simulated || r.Panel.Provider != ProviderFake {
		t.Errorf("panel %+v", r.Panel)
	}
	if got := r.GPUs[0].Roles; len(got) != 1 || got[0] != "prefill" {
		t.Errorf("GPU 0 roles %v", got)
	}
	if got := r.GPUs[2].Roles; len(got) != 1 || got[0] != "decode" {
		t.Errorf("GPU 2 roles %v", got)
	}
	if len(r.GPUs[1].Roles) != 0 || len(r.GPUs[1].Processes) != 0 {
		t.Errorf("GPU 1 should be free: %+v", r.GPUs[1])
	}
	if got := r.RoleGPUUUIDs["decode"]; len(got) != 2 || got[0] != tel.Fake().UUID(2) {
		t.Errorf("decode UUIDs %v", got)
	}
	// Two ranks under the engine, one per GPU, like TP=2.
	p2, p3 := r.GPUs[2].Processes[0], r.GPUs[3].Processes[0]
	if p2.Role != "decode" || p3.Role != "decode" || p2.PID == p3.PID || p2.PID == dec {
		t.Errorf("decode GPU processes %+v %+v (root %d)", p2, p3, dec)
	}
	if r.RoleGPUMem["decode"] != p2.UsedB+p3.UsedB {
		t.Errorf("decode memory %d != %d + %d", r.RoleGPUMem["decode"], p2.UsedB, p3.UsedB)
	}
	if r.Procs["prefill"].RSSBytes == 0 {
		t.Error("prefill RSS is zero")
	}
	if r.Seq <= first.Seq {
		t.Error("seq did not advance")
	}

	// A role that stops loses its processes and memory.
	tel.SetRoles([]RoleInfo{{Name: "prefill", RootPID: pre, CudaVisibleDevices: "0"}, {Name: "decode", CudaVisibleDevices: "2,3"}})
	waitReadings(t, ch, func(r Readings) bool {
		_, running := r.Procs["decode"]
		return !running && r.RoleGPUMem["decode"] == 0 && len(r.GPUs) == 4 && len(r.GPUs[2].Processes) == 0
	})

	// Latest agrees with the stream.
	if l := tel.Latest(); l.Seq == 0 || len(l.GPUs) != 4 {
		t.Errorf("Latest = seq %d, %d GPUs", l.Seq, len(l.GPUs))
	}
}

func TestTelemetryNoDriverStillWatchesProcesses(t *testing.T) {
	t.Parallel()
	tel := New(Options{NVMLLibrary: "/nonexistent/libnvidia-ml.so.1", NvidiaSMI: "/nonexistent/nvidia-smi", ProcInterval: 20 * time.Millisecond})
	if tel.Fake() != nil {
		t.Fatal("fake without FakeGPUs")
	}
	root := startTree(t, `sleep 60 & wait`)
	ch, cancel := tel.Subscribe()
	defer cancel()
	runTelemetry(t, tel)
	tel.SetRoles([]RoleInfo{{Name: "decode", RootPID: root, CudaVisibleDevices: "0"}})
	// The panel starts as "probing GPUs" with provider none too: wait for
	// the probe's verdict, not only for the provider.
	r := waitReadings(t, ch, func(r Readings) bool {
		return r.Panel.Provider == ProviderNone && r.Panel.Note != ProbingNote && len(r.Procs["decode"].PIDs) == 2
	})
	if r.Panel.Note != NoDriverNote || len(r.GPUs) != 0 || len(r.Notes) != 0 {
		t.Fatalf("panel %+v gpus %d notes %q", r.Panel, len(r.GPUs), r.Notes)
	}
}

func TestTelemetryMappingNotesReachPanel(t *testing.T) {
	t.Parallel()
	tel := New(Options{FakeGPUs: 2, GPUInterval: 20 * time.Millisecond, ProcInterval: 20 * time.Millisecond})
	ch, cancel := tel.Subscribe()
	defer cancel()
	runTelemetry(t, tel)
	tel.SetRoles([]RoleInfo{{Name: "decode", CudaVisibleDevices: "0,5"}})
	r := waitReadings(t, ch, func(r Readings) bool { return len(r.Notes) > 0 })
	if !strings.Contains(r.Panel.Note, `role decode: CUDA_VISIBLE_DEVICES="0,5": entry "5"`) || !strings.HasPrefix(r.Panel.Note, "simulated GPUs") {
		t.Fatalf("panel note %q", r.Panel.Note)
	}
}

func TestRunTwiceRefused(t *testing.T) {
	t.Parallel()
	tel := New(Options{FakeGPUs: 1})
	// A done context makes the winning Run return at once too.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- tel.Run(ctx) }()
	}
	a, b := <-errs, <-errs
	if (a == nil) == (b == nil) {
		t.Fatalf("errors %v and %v: exactly one Run must be refused", a, b)
	}
}

func TestCollectorExportsGPUAndRoleGauges(t *testing.T) {
	t.Parallel()
	tel := New(Options{FakeGPUs: 2, GPUInterval: 20 * time.Millisecond, ProcInterval: 20 * time.Millisecond})
	root := startTree(t, `sleep 60 & wait`)
	ch, cancel := tel.Subscribe()
	defer cancel()
	runTelemetry(t, tel)
	tel.SetRoles([]RoleInfo{{Name: "decode", RootPID: root, CudaVisibleDevices: "1"}})
	waitReadings(t, ch, func(r Readings) bool { return len(r.GPUs) == 2 && r.RoleGPUMem["decode"] > 0 })

	reg := prometheus.NewPedanticRegistry()
	c := tel.Collector()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, f := range families {
		count[f.GetName()] = len(f.GetMetric())
	}
	for name, n := range map[string]int{
		"tsd_gpu_provider_info": 1, "tsd_gpu_utilization_percent": 2, "tsd_gpu_memory_used_bytes": 2,
		"tsd_gpu_memory_total_bytes": 2, "tsd_gpu_power_watts": 2, "tsd_gpu_temperature_celsius": 2,
		"tsd_gpu_sm_clock_hertz": 2, "tsd_role_cpu_percent": 1, "tsd_role_rss_bytes": 1,
		"tsd_role_threads": 1, "tsd_role_processes": 1, "tsd_role_gpu_memory_bytes": 1,
	} {
		if count[name] != n {
			t.Errorf("%s: %d series, want %d", name, count[name], n)
		}
	}
	want := `# HELP tsd_gpu_provider_info Where GPU readings come from (value 1); simulated=true for fake GPUs.
# TYPE tsd_gpu_provider_info gauge
tsd_gpu_provider_info{provider="fake",simulated="true"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "tsd_gpu_provider_info"); err != nil {
		t.Error(err)
	}
}

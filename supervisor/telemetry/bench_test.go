package telemetry

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuTime is this process's user+system CPU so far (all threads, GC too).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// eightRoles starts 8 role trees shaped like guardian -> engine -> 2 ranks.
func eightRoles(b *testing.B) []RoleInfo {
	roles := make([]RoleInfo, 8)
	for i := range roles {
		pid := startTree(b, `sh -c 'sleep 600 & sleep 600 & wait' & wait`)
		roles[i] = RoleInfo{Name: fmt.Sprintf("role-%d", i), RootPID: pid, CudaVisibleDevices: fmt.Sprint(i)}
	}
	// Let the shells fork their children before measuring.
	p := NewProcPoller("")
	deadline := time.Now().Add(10 * time.Second)
	for {
		procs, _, err := p.Poll(roles)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, s := range procs {
			n += len(s.PIDs)
		}
		if n == 32 {
			return roles
		}
		if time.Now().After(deadline) {
			b.Fatalf("trees incomplete: %d processes", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Per-poll latency of the fake provider (8 simulated H200s, 8 processes).
func BenchmarkFakeGPUPoll(b *testing.B) {
	f := NewFakeGPUs(8, nil)
	for i := range 8 {
		_ = f.AttachProcess(i, 1000+i, 100<<30)
	}
	p := f.Provider()
	ctx := context.Background()
	for b.Loop() {
		if _, err := p.Poll(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// Per-poll latency and CPU of the process-tree poller with 8 roles of 4
// processes each: one /proc scan plus gopsutil reads of the 32 members.
func BenchmarkProcPoll8Roles(b *testing.B) {
	roles := eightRoles(b)
	p := NewProcPoller("")
	b.ResetTimer()
	c0 := cpuTime(b)
	for b.Loop() {
		if _, _, err := p.Poll(roles); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-c0).Microseconds())/float64(b.N), "cpu-µs/poll")
}

// CPU cost of the pollers at the default cadence, 8 roles on 8 fake GPUs:
// one op is one second of running (a GPU poll and join every second, a
// tree poll every other second). cpu-%core is the share of one core.
func BenchmarkPollersCPU8Roles(b *testing.B) {
	roles := eightRoles(b)
	tel := New(Options{FakeGPUs: 8})
	prov := tel.fake.Provider()
	pp := NewProcPoller("")
	ctx := context.Background()
	var proc procResult
	b.ResetTimer()
	c0 := cpuTime(b)
	i := 0
	for b.Loop() {
		gpus, err := prov.Poll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if i%2 == 0 {
			procs, pidRole, err := pp.Poll(roles)
			if err != nil {
				b.Fatal(err)
			}
			proc = procResult{procs: procs, pidRole: pidRole}
			tel.publish(tel.join(uint64(i), roles, gpuResult{provider: ProviderFake, panel: fakePanel(), gpus: gpus}, proc))
		}
		tel.publish(tel.join(uint64(i), roles, gpuResult{provider: ProviderFake, panel: fakePanel(), gpus: gpus}, proc))
		i++
	}
	cpu := cpuTime(b) - c0
	b.ReportMetric(100*cpu.Seconds()/float64(b.N), "cpu-%core")
}

func BenchmarkParseSMI8GPUs(b *testing.B) {
	var out []byte
	for i := range 8 {
		out = fmt.Appendf(out, "%d, GPU-5a1e43b4-2d6c-8f3e-97d1-0c4bfa0e2a%02d, NVIDIA H200, 97, 131072, 143771, 612.48, 63, 1980\n", i, i)
	}
	for b.Loop() {
		if _, err := parseSMIGPUs(out); err != nil {
			b.Fatal(err)
		}
	}
}

// Per-poll latency of the real NVML provider; skipped without a driver (run
// the test binary on the GPU machine).
func BenchmarkNVMLPoll(b *testing.B) {
	p, err := NewNVML(nil, "")
	if err != nil {
		b.Skipf("no NVML here: %v", err)
	}
	defer func() { _ = p.Close() }()
	ctx := context.Background()
	c0 := cpuTime(b)
	for b.Loop() {
		if _, err := p.Poll(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-c0).Microseconds())/float64(b.N), "cpu-µs/poll")
}

// NVML init (dlopen, driver attach, device enumeration) plus shutdown.
func BenchmarkNVMLInit(b *testing.B) {
	p0, err := NewNVML(nil, "")
	if err != nil {
		b.Skipf("no NVML here: %v", err)
	}
	_ = p0.Close()
	for b.Loop() {
		p, err := NewNVML(nil, "")
		if err != nil {
			b.Fatal(err)
		}
		_ = p.Close()
	}
}

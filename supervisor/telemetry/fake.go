package telemetry

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/tsd-project/tsd/snapshot"
)

// FakeGPUs simulates H200s on go-nvml's DGX H200 mock system, so the demo and
// the tests run the very NVML code path a real machine runs. Readings drift
// with the clock (a slow wave plus per-second jitter) and a GPU that holds
// compute processes runs busy; processes are injected by tests or attached
// automatically to the roles whose CUDA_VISIBLE_DEVICES name the GPU.
//
// It is hardware, shared by the poller and whoever injects processes, so
// unlike the rest of the package it guards its state with a mutex.
type FakeGPUs struct {
	mu     sync.Mutex
	now    func() time.Time
	start  time.Time
	srv    *server.Server
	devs   []*fakeDevice
	manual [][]GPUProc // injected per GPU
	auto   [][]GPUProc // attached from role trees, replaced wholesale
	lost   []bool
}

// fakeDevice overrides the readings the mock system leaves unset. Doing it by
// method rather than through the mock's *Func fields keeps the mock from
// recording every call, which would grow without bound in a long demo.
type fakeDevice struct {
	*server.Device
	f *FakeGPUs
	i int
}

// fakeUUID is deterministic so demo profiles and tests can name fake GPUs by
// UUID.
func fakeUUID(i int) string {
	return fmt.Sprintf("GPU-fa4e%04x-7e57-4c0d-9a11-%012x", i, 0x5e0000000000+i)
}

// NewFakeGPUs builds n simulated H200s. now nil means time.Now.
func NewFakeGPUs(n int, now func() time.Time) *FakeGPUs {
	if now == nil {
		now = time.Now
	}
	srv := dgxh200.NewWithGPUs(gpus.Multiple(n, gpus.H200_SXM5_141GB)...)
	f := &FakeGPUs{
		now:    now,
		start:  now(),
		srv:    srv,
		manual: make([][]GPUProc, n),
		auto:   make([][]GPUProc, n),
		lost:   make([]bool, n),
	}
	for i, d := range srv.Devices {
		sd := d.(*server.Device)
		sd.UUID = fakeUUID(i)
		fd := &fakeDevice{Device: sd, f: f, i: i}
		f.devs = append(f.devs, fd)
		srv.Devices[i] = fd
	}
	// The mock looks devices up by concrete type; answer with our wrappers.
	srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(f.devs) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return f.devs[i], nvml.SUCCESS
	}
	srv.DeviceGetHandleByUUIDFunc = func(u string) (nvml.Device, nvml.Return) {
		for _, d := range f.devs {
			if d.UUID == u {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return f
}

// Provider returns an NVML provider over the mock system, named "fake".
func (f *FakeGPUs) Provider() GPUProvider {
	p, err := newNVMLProvider(f.srv, ProviderFake)
	if err != nil {
		// The mock's Init cannot fail; reaching here is a programming error.
		panic(fmt.Sprintf("fake NVML: %v", err))
	}
	return p
}

// Count is the number of simulated GPUs.
func (f *FakeGPUs) Count() int { return len(f.devs) }

// UUID is the UUID of simulated GPU i.
func (f *FakeGPUs) UUID(i int) string { return fakeUUID(i) }

// AttachProcess shows pid on GPU gpu holding usedB bytes, until detached.
func (f *FakeGPUs) AttachProcess(gpu, pid int, usedB uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gpu < 0 || gpu >= len(f.devs) {
		return fmt.Errorf("attach pid %d: no fake GPU %d (have %d)", pid, gpu, len(f.devs))
	}
	f.manual[gpu] = append(f.manual[gpu], GPUProc{PID: pid, UsedB: usedB})
	return nil
}

// DetachProcess removes every injected entry of pid.
func (f *FakeGPUs) DetachProcess(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, ps := range f.manual {
		kept := ps[:0]
		for _, p := range ps {
			if p.PID != pid {
				kept = append(kept, p)
			}
		}
		f.manual[i] = kept
	}
}

// SetLost makes every reading of GPU gpu fail as a fallen-off-the-bus GPU
// does, to exercise error display.
func (f *FakeGPUs) SetLost(gpu int, lost bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gpu >= 0 && gpu < len(f.lost) {
		f.lost[gpu] = lost
	}
}

// autoAttach puts each role's processes on the GPUs its CUDA_VISIBLE_DEVICES
// names, like an engine whose ranks each hold one GPU: the k-th GPU goes to
// the k-th process below the root (the root is the engine's launcher, which
// holds no GPU; its children are the ranks), most of the memory taken as a
// KV cache would.
func (f *FakeGPUs) autoAttach(roleUUIDs map[string][]string, procs map[string]snapshot.ProcStatus) {
	uuids := make([]string, len(f.devs))
	for i, d := range f.devs {
		uuids[i] = d.UUID
	}
	auto := autoProcs(uuids, float64(gpus.H200_SXM5_141GB.MemoryMB), roleUUIDs, procs)
	f.mu.Lock()
	f.auto = auto
	f.mu.Unlock()
}

// autoProcs is what simulated devices (uuids, in index order, of memMB
// each) show for the roles holding them, as autoAttach describes: per
// device, the processes on it. Roles go in name order, so the result is
// the same for the same input.
func autoProcs(uuids []string, memMB float64, roleUUIDs map[string][]string, procs map[string]snapshot.ProcStatus) [][]GPUProc {
	byUUID := make(map[string]int, len(uuids))
	for i, u := range uuids {
		byUUID[u] = i
	}
	auto := make([][]GPUProc, len(uuids))
	roles := make([]string, 0, len(roleUUIDs))
	for r := range roleUUIDs {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	for _, role := range roles {
		ps, ok := procs[role]
		if !ok || len(ps.PIDs) == 0 {
			continue
		}
		cands := ps.PIDs
		if len(cands) > 1 {
			cands = cands[1:]
		}
		for k, u := range roleUUIDs[role] {
			i, ok := byUUID[u]
			if !ok {
				continue
			}
			frac := 0.70 + 0.15*jitter(role, k)
			used := uint64(frac*memMB) * mib
			auto[i] = append(auto[i], GPUProc{PID: cands[k%len(cands)], UsedB: used})
		}
	}
	return auto
}

// jitter is a deterministic pseudo-random number in [0,1).
func jitter(s string, n int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", s, n)
	return float64(h.Sum64()%10000) / 10000
}

// state is what one GPU shows at the current instant.
type fakeState struct {
	lost  bool
	procs []GPUProc
	util  float64
	noise float64
}

func (d *fakeDevice) state() fakeState {
	f := d.f
	f.mu.Lock()
	defer f.mu.Unlock()
	s := fakeState{lost: f.lost[d.i]}
	s.procs = append(append(s.procs, f.manual[d.i]...), f.auto[d.i]...)
	t := f.now().Sub(f.start).Seconds()
	s.noise = jitter(d.UUID, int(math.Floor(t)))
	if len(s.procs) == 0 {
		s.util = 3 * s.noise
		return s
	}
	wave := 0.5 + 0.5*math.Sin(2*math.Pi*t/20+1.3*float64(d.i))
	s.util = math.Min(100, 40+50*wave+8*s.noise)
	return s
}

func (d *fakeDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	s := d.state()
	if s.lost {
		return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
	}
	return nvml.Utilization{Gpu: uint32(s.util), Memory: uint32(s.util * 0.6)}, nvml.SUCCESS
}

// fakeReserved is what the driver keeps for itself on an idle GPU (NVML's v1
// memory "used" counts it, v2 and nvidia-smi do not).
const fakeReserved = 615 * mib

func (d *fakeDevice) memory() (total, reserved, used uint64, ret nvml.Return) {
	s := d.state()
	if s.lost {
		return 0, 0, 0, nvml.ERROR_GPU_IS_LOST
	}
	total = d.Config.MemoryMB * mib
	for _, p := range s.procs {
		used += p.UsedB
	}
	return total, fakeReserved, min(used, total-fakeReserved), nvml.SUCCESS
}

func (d *fakeDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	total, reserved, used, ret := d.memory()
	if ret != nvml.SUCCESS {
		return nvml.Memory{}, ret
	}
	return nvml.Memory{Total: total, Used: used + reserved, Free: total - used - reserved}, nvml.SUCCESS
}

func (d *fakeDevice) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	total, reserved, used, ret := d.memory()
	if ret != nvml.SUCCESS {
		return nvml.Memory_v2{}, ret
	}
	return nvml.Memory_v2{Version: 2, Total: total, Reserved: reserved, Used: used, Free: total - used - reserved}, nvml.SUCCESS
}

func (d *fakeDevice) GetPowerUsage() (uint32, nvml.Return) {
	s := d.state()
	if s.lost {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	w := 75 + s.util/100*560 + 10*s.noise
	return uint32(w * 1000), nvml.SUCCESS
}

func (d *fakeDevice) GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return) {
	s := d.state()
	if s.lost {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	return uint32(31 + s.util*0.38 + 2*s.noise), nvml.SUCCESS
}

func (d *fakeDevice) GetClockInfo(nvml.ClockType) (uint32, nvml.Return) {
	s := d.state()
	if s.lost {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	if len(s.procs) == 0 {
		return 345, nvml.SUCCESS
	}
	return uint32(1980 - 120*s.noise), nvml.SUCCESS
}

func (d *fakeDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	s := d.state()
	if s.lost {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	out := make([]nvml.ProcessInfo, len(s.procs))
	for i, p := range s.procs {
		out[i] = nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: p.UsedB}
	}
	return out, nvml.SUCCESS
}

package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// fakeNPUHBMMB is the HBM of one simulated Ascend 910B3.
const fakeNPUHBMMB = 65536

// FakeNPUs simulates Ascend NPUs by printing what `npu-smi info` prints,
// so the demo and the tests run the very parser a real machine runs.
// Like FakeGPUs, readings drift with the clock, a busy NPU runs warm, and
// processes are injected or attached to the roles whose
// ASCEND_RT_VISIBLE_DEVICES name the NPU. It is hardware shared by the
// poller and whoever injects processes, so it guards its state.
type FakeNPUs struct {
	mu     sync.Mutex
	now    func() time.Time
	start  time.Time
	n      int
	manual [][]GPUProc
	auto   [][]GPUProc
}

// NewFakeNPUs builds n simulated NPUs. now nil means time.Now.
func NewFakeNPUs(n int, now func() time.Time) *FakeNPUs {
	if now == nil {
		now = time.Now
	}
	return &FakeNPUs{now: now, start: now(), n: n, manual: make([][]GPUProc, n), auto: make([][]GPUProc, n)}
}

// Count is the number of simulated NPUs.
func (f *FakeNPUs) Count() int { return f.n }

// busID is NPU i's PCI address, as npu-smi prints it.
func fakeNPUBus(i int) string { return fmt.Sprintf("0000:%02X:00.0", 0xC1+i) }

// UUID is the id tsd gives simulated NPU i.
func (f *FakeNPUs) UUID(i int) string { return NPUUUID(fakeNPUBus(i)) }

// Provider is the npu-smi provider reading this fake, named "npu-fake".
func (f *FakeNPUs) Provider() GPUProvider {
	return &npuSMIProvider{path: "npu-smi", run: f.run, name: ProviderFakeNPU}
}

// AttachProcess shows pid on NPU npu holding usedB bytes, until detached.
func (f *FakeNPUs) AttachProcess(npu, pid int, usedB uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if npu < 0 || npu >= f.n {
		return fmt.Errorf("attach pid %d: no fake NPU %d (have %d)", pid, npu, f.n)
	}
	f.manual[npu] = append(f.manual[npu], GPUProc{PID: pid, UsedB: usedB})
	return nil
}

// autoAttach puts each role's ranks on the NPUs it was given, as
// FakeGPUs.autoAttach does.
func (f *FakeNPUs) autoAttach(roleUUIDs map[string][]string, procs map[string]snapshot.ProcStatus) {
	uuids := make([]string, f.n)
	for i := range uuids {
		uuids[i] = f.UUID(i)
	}
	auto := autoProcs(uuids, fakeNPUHBMMB, roleUUIDs, procs)
	f.mu.Lock()
	f.auto = auto
	f.mu.Unlock()
}

// run prints the current state in npu-smi info's layout.
func (f *FakeNPUs) run(ctx context.Context, _ string, _ ...string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	procs := make([][]GPUProc, f.n)
	for i := range procs {
		procs[i] = append(append([]GPUProc(nil), f.manual[i]...), f.auto[i]...)
	}
	t := f.now().Sub(f.start).Seconds()
	f.mu.Unlock()

	var b bytes.Buffer
	sep := "+===========================+===============+====================================================+\n"
	b.WriteString("+------------------------------------------------------------------------------------------------+\n")
	b.WriteString("| npu-smi 23.0.rc3 (simulated by tsd)  Version: 23.0.rc3                                        |\n")
	b.WriteString("+---------------------------+---------------+----------------------------------------------------+\n")
	b.WriteString("| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n")
	b.WriteString("| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n")
	b.WriteString(sep)
	for i := 0; i < f.n; i++ {
		noise := jitter(f.UUID(i), int(math.Floor(t)))
		util := 2 * noise
		var used uint64 = 3398
		for _, p := range procs[i] {
			used += p.UsedB / mib
		}
		used = min(used, fakeNPUHBMMB)
		if len(procs[i]) > 0 {
			wave := 0.5 + 0.5*math.Sin(2*math.Pi*t/20+1.3*float64(i))
			util = math.Min(100, 35+55*wave+8*noise)
		}
		power := 90 + util/100*260 + 8*noise
		temp := 36 + int(util*0.3+2*noise)
		fmt.Fprintf(&b, "| %-5d %-19s | %-13s | %-11.1f %-17d %-4d / %-12d|\n", i, "910B3", "OK", power, temp, 0, 0)
		fmt.Fprintf(&b, "| %-25d | %-13s | %-11d %-4d / %-8d %-5d/ %-13d|\n", 0, fakeNPUBus(i), int(util), 0, 0, used, fakeNPUHBMMB)
		b.WriteString(sep)
	}
	b.WriteString("+---------------------------+---------------+----------------------------------------------------+\n")
	b.WriteString("| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |\n")
	b.WriteString(sep)
	for i := 0; i < f.n; i++ {
		if len(procs[i]) == 0 {
			fmt.Fprintf(&b, "| %-94s |\n", fmt.Sprintf("No running processes found in NPU %d", i))
		}
		for _, p := range procs[i] {
			fmt.Fprintf(&b, "| %-7d %-17d | %-13d | %-24s | %-23d |\n", i, 0, p.PID, "python3", p.UsedB/mib)
		}
		b.WriteString(sep)
	}
	return b.Bytes(), nil
}

func fakeNPUPanel() snapshot.GPUPanelStatus {
	return snapshot.GPUPanelStatus{Provider: ProviderFakeNPU, Simulated: true, Note: "simulated NPUs"}
}

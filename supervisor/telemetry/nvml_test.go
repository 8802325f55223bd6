package telemetry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fixedClock is a settable clock for fake readings.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fixedClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestFakeH200ReadsThroughNVMLPath(t *testing.T) {
	t.Parallel()
	clk := &fixedClock{t: time.Unix(1_700_000_000, 0)}
	f := NewFakeGPUs(4, clk.Now)
	p := f.Provider()
	defer func() { _ = p.Close() }()
	if p.Name() != ProviderFake {
		t.Fatalf("name = %q", p.Name())
	}
	if err := f.AttachProcess(2, 4242, 70<<30); err != nil {
		t.Fatal(err)
	}
	if err := f.AttachProcess(9, 1, 1); err == nil {
		t.Error("attach to a missing GPU succeeded")
	}
	gpus, err := p.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 4 {
		t.Fatalf("got %d GPUs", len(gpus))
	}
	for i, g := range gpus {
		if g.Index != i || g.UUID != f.UUID(i) || g.Name != "NVIDIA H200 141GB HBM3e" {
			t.Errorf("GPU %d identity = %d %q %q", i, g.Index, g.UUID, g.Name)
		}
		if g.MemTotalB != 144384*mib || g.PowerW <= 0 || g.TempC <= 0 || g.SMClockMHz <= 0 || g.Err != "" {
			t.Errorf("GPU %d readings implausible: %+v", i, g)
		}
	}
	busy, idle := gpus[2], gpus[0]
	if len(busy.Processes) != 1 || busy.Processes[0] != (GPUProc{PID: 4242, UsedB: 70 << 30}) {
		t.Errorf("GPU 2 processes = %+v", busy.Processes)
	}
	if busy.MemUsedB < 70<<30 || busy.UtilPct < 40 || busy.UtilPct <= idle.UtilPct || busy.PowerW <= idle.PowerW {
		t.Errorf("busy GPU not busier than idle: busy %+v idle %+v", busy, idle)
	}
	if len(idle.Processes) != 0 || idle.MemUsedB != 0 {
		t.Errorf("idle GPU has processes %+v or memory %d (v2 leaves the reservation out)", idle.Processes, idle.MemUsedB)
	}

	// Readings move with time.
	seen := map[int]bool{}
	for range 12 {
		clk.Add(1700 * time.Millisecond)
		g, err := p.Poll(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		seen[g[2].UtilPct] = true
	}
	if len(seen) < 4 {
		t.Errorf("busy GPU utilisation barely moves: %v", seen)
	}

	f.DetachProcess(4242)
	gpus, _ = p.Poll(context.Background())
	if len(gpus[2].Processes) != 0 {
		t.Errorf("detached process still shown: %+v", gpus[2].Processes)
	}
}

func TestFakeLostGPUReportsErrorKeepsOthers(t *testing.T) {
	t.Parallel()
	f := NewFakeGPUs(2, nil)
	p := f.Provider()
	f.SetLost(1, true)
	gpus, err := p.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if gpus[0].Err != "" || !strings.Contains(gpus[1].Err, "GPU is lost") || gpus[1].UUID != f.UUID(1) {
		t.Fatalf("errs = %q / %q", gpus[0].Err, gpus[1].Err)
	}
}

func TestNVMLInitFailureIsClean(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ret       nvml.Return
		noLibrary bool
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, true},
		{nvml.ERROR_DRIVER_NOT_LOADED, false},
		{nvml.ERROR_NO_PERMISSION, false},
	} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return c.ret }}
		_, err := NewNVML(lib, "")
		if !errors.Is(err, ErrNVMLUnavailable) || errors.Is(err, errNoLibrary) != c.noLibrary {
			t.Errorf("init %d: err = %v", c.ret, err)
		}
	}
}

// The real loader, pointed at a library that is not there, must fail with an
// error rather than crash: this is every laptop without the driver.
func TestNVMLRealLoaderMissingLibrary(t *testing.T) {
	t.Parallel()
	_, err := NewNVML(nil, "/nonexistent/libnvidia-ml.so.1")
	if !errors.Is(err, errNoLibrary) {
		t.Fatalf("err = %v, want library-not-found", err)
	}
}

func TestAutoNoDriver(t *testing.T) {
	t.Parallel()
	p, panel := Auto(context.Background(), Options{NVMLLibrary: "/nonexistent/libnvidia-ml.so.1", NvidiaSMI: "/nonexistent/nvidia-smi"})
	if p != nil || panel.Provider != ProviderNone || panel.Note != NoDriverNote || panel.Simulated {
		t.Fatalf("provider %v panel %+v", p, panel)
	}
}

func TestAutoFallsBackToNvidiaSMI(t *testing.T) {
	t.Parallel()
	p, panel := Auto(context.Background(), Options{NVMLLibrary: "/nonexistent/libnvidia-ml.so.1", SMIRun: cannedSMI(smiTwoH200, smiTwoApps, nil)})
	if p == nil || p.Name() != ProviderSMI || panel.Provider != ProviderSMI {
		t.Fatalf("provider %v panel %+v", p, panel)
	}
}

func TestAutoBrokenNvidiaSMISaysWhy(t *testing.T) {
	t.Parallel()
	broken := errors.New("exit status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
	p, panel := Auto(context.Background(), Options{NVMLLibrary: "/nonexistent/libnvidia-ml.so.1", SMIRun: cannedSMI("", "", broken)})
	if p != nil || panel.Provider != ProviderNone || !strings.HasPrefix(panel.Note, NoDriverNote) || !strings.Contains(panel.Note, "couldn't communicate") {
		t.Fatalf("provider %v panel %+v", p, panel)
	}
}

func TestAutoPrefersFake(t *testing.T) {
	t.Parallel()
	p, panel := Auto(context.Background(), Options{FakeGPUs: 2})
	if p == nil || p.Name() != ProviderFake || panel.Provider != ProviderFake || !panel.Simulated {
		t.Fatalf("provider %v panel %+v", p, panel)
	}
}

// Without the v2 symbol (drivers before 510) memory comes from v1, which
// counts the driver's reservation.
func TestNVMLMemoryV1WhenV2Missing(t *testing.T) {
	t.Parallel()
	f := NewFakeGPUs(1, nil)
	f.srv.LookupSymbolFunc = func(sym string) error {
		if sym == "nvmlDeviceGetMemoryInfo_v2" {
			return errors.New("undefined symbol")
		}
		return nil
	}
	p := f.Provider()
	gpus, err := p.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if gpus[0].MemUsedB != fakeReserved {
		t.Fatalf("idle used = %d, want the reservation %d", gpus[0].MemUsedB, fakeReserved)
	}
}

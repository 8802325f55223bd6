package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlProvider reads GPUs through an nvml.Interface: the real library loaded
// at run time, or a go-nvml mock system (the fake).
type nvmlProvider struct {
	lib     nvml.Interface
	name    string
	devices []nvmlDevice
	// memV2: the driver has nvmlDeviceGetMemoryInfo_v2, whose Used leaves
	// out the driver's reservation, as nvidia-smi's memory.used does; v1
	// counts it (about 600 MiB on an idle H200). Calling a symbol the
	// library lacks would kill the process, so it is looked up first.
	memV2 bool
}

// nvmlDevice caches what never changes while the driver is loaded, so a poll
// only asks for the readings that move.
type nvmlDevice struct {
	dev   nvml.Device
	index int
	uuid  string
	name  string
	total uint64
}

// ErrNVMLUnavailable wraps every reason NVML cannot be used (library missing,
// driver not loaded, no permission).
var ErrNVMLUnavailable = errors.New("NVML unavailable")

// errNoLibrary marks the plain absence of libnvidia-ml (no driver at all).
var errNoLibrary = fmt.Errorf("%w: libnvidia-ml not found", ErrNVMLUnavailable)

// NewNVML initialises lib and enumerates its devices. With a nil lib it loads
// the system's libnvidia-ml (libPath, or the default soname when empty); that
// fails cleanly, wrapping ErrNVMLUnavailable, on hosts without the driver.
func NewNVML(lib nvml.Interface, libPath string) (GPUProvider, error) {
	if lib == nil {
		var opts []nvml.LibraryOption
		if libPath != "" {
			opts = append(opts, nvml.WithLibraryPath(libPath))
		}
		lib = nvml.New(opts...)
	}
	return newNVMLProvider(lib, ProviderNVML)
}

func newNVMLProvider(lib nvml.Interface, name string) (*nvmlProvider, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("init NVML: %w", errNoLibrary)
		}
		return nil, fmt.Errorf("init NVML: %w: %s", ErrNVMLUnavailable, nvmlErr(ret))
	}
	p := &nvmlProvider{lib: lib, name: name}
	p.memV2 = lib.Extensions().LookupSymbol("nvmlDeviceGetMemoryInfo_v2") == nil
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		_ = lib.Shutdown()
		return nil, fmt.Errorf("count NVML devices: %w: %s", ErrNVMLUnavailable, nvmlErr(ret))
	}
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			_ = lib.Shutdown()
			return nil, fmt.Errorf("get NVML device %d: %s", i, nvmlErr(ret))
		}
		d := nvmlDevice{dev: dev, index: i}
		if idx, ret := dev.GetIndex(); ret == nvml.SUCCESS {
			d.index = idx
		}
		if u, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			d.uuid = u
		}
		if nm, ret := dev.GetName(); ret == nvml.SUCCESS {
			d.name = nm
		}
		p.devices = append(p.devices, d)
	}
	return p, nil
}

func (p *nvmlProvider) Name() string { return p.name }

func (p *nvmlProvider) Poll(ctx context.Context) ([]GPUInfo, error) {
	out := make([]GPUInfo, 0, len(p.devices))
	for i := range p.devices {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("poll NVML: %w", err)
		}
		out = append(out, p.pollDevice(&p.devices[i]))
	}
	return out, nil
}

// pollDevice reads one GPU; a reading the device refuses stays zero and the
// first real failure is kept in Err, so one bad sensor never hides the rest.
func (p *nvmlProvider) pollDevice(d *nvmlDevice) GPUInfo {
	g := GPUInfo{Index: d.index, UUID: d.uuid, Name: d.name, MemTotalB: d.total}
	var errs []string
	note := func(what string, ret nvml.Return) {
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_NO_PERMISSION {
			return
		}
		errs = append(errs, what+": "+nvmlErr(ret))
	}
	if u, ret := d.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		g.UtilPct = int(u.Gpu)
	} else {
		note("utilization", ret)
	}
	memRead := false
	if p.memV2 {
		if m, ret := d.dev.GetMemoryInfo_v2(); ret == nvml.SUCCESS {
			g.MemUsedB, g.MemTotalB, d.total = m.Used, m.Total, m.Total
			memRead = true
		}
	}
	if !memRead {
		if m, ret := d.dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemUsedB, g.MemTotalB, d.total = m.Used, m.Total, m.Total
		} else {
			note("memory", ret)
		}
	}
	if mw, ret := d.dev.GetPowerUsage(); ret == nvml.SUCCESS {
		g.PowerW = float64(mw) / 1000
	} else {
		note("power", ret)
	}
	if t, ret := d.dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		g.TempC = int(t)
	} else {
		note("temperature", ret)
	}
	if c, ret := d.dev.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		g.SMClockMHz = int(c)
	} else {
		note("sm clock", ret)
	}
	if procs, ret := d.dev.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		g.Processes = make([]GPUProc, 0, len(procs))
		for _, pr := range procs {
			used := pr.UsedGpuMemory
			// NVML reports "not available" (e.g. under some container
			// setups) as all ones; an absurd number would swamp the sums.
			if used == ^uint64(0) {
				used = 0
			}
			g.Processes = append(g.Processes, GPUProc{PID: int(pr.Pid), UsedB: used})
		}
	} else {
		note("processes", ret)
	}
	if len(errs) > 0 {
		g.Err = strings.Join(errs, "; ")
	}
	return g
}

func (p *nvmlProvider) Close() error {
	if ret := p.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shut down NVML: %s", nvmlErr(ret))
	}
	return nil
}

// nvmlErr names a return code; go-nvml's ErrorString needs the library
// loaded, which is exactly what may have failed.
func nvmlErr(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml not found"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "NVIDIA driver not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission"
	case nvml.ERROR_GPU_IS_LOST:
		return "GPU is lost"
	case nvml.ERROR_NOT_SUPPORTED:
		return "not supported"
	case nvml.ERROR_UNINITIALIZED:
		return "NVML not initialised"
	}
	return fmt.Sprintf("NVML error %d", int32(ret))
}

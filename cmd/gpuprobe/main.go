// Command gpuprobe prints one JSON reading of tsd's telemetry on this host:
// which GPU provider Auto picks and how long it took to start, per-poll
// latency of the GPU provider and the process-tree poller, the GPUs with
// their compute processes, and how given CUDA_VISIBLE_DEVICES values map to
// GPU UUIDs. It is built here (cgo, go-nvml) and carried to a GPU machine.
//
//	gpuprobe -role decode=0,1 -role prefill=GPU-5a1e -pid prefill=1234 -polls 50
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor/telemetry"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, " ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

type latency struct {
	N      int     `json:"n"`
	MinMs  float64 `json:"min_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	MaxMs  float64 `json:"max_ms"`
	CPUMs  float64 `json:"cpu_ms_per_poll"` // whole-process CPU per poll
	ErrStr string  `json:"error,omitempty"`
}

type gpuProcCheck struct {
	GPU     int    `json:"gpu"`
	PID     int    `json:"pid"`
	UsedMiB uint64 `json:"used_mib"`
	Role    string `json:"role,omitempty"`
	// Comm is the PID's name in this PID namespace; empty when the PID is
	// not visible here (NVML reports host PIDs: a container mismatch).
	Comm string `json:"comm"`
}

type report struct {
	Provider     string                         `json:"provider"`
	Panel        snapshot.GPUPanelStatus        `json:"panel"`
	InitMs       float64                        `json:"init_ms"`
	GPUPoll      *latency                       `json:"gpu_poll,omitempty"`
	ProcPoll     *latency                       `json:"proc_poll,omitempty"`
	GPUs         []snapshot.GPUStatus           `json:"gpus"`
	GPUErrors    []string                       `json:"gpu_errors,omitempty"`
	RoleUUIDs    map[string][]string            `json:"role_uuids"`
	MappingNotes []string                       `json:"mapping_notes,omitempty"`
	Procs        map[string]snapshot.ProcStatus `json:"procs,omitempty"`
	RoleGPUMem   map[string]uint64              `json:"role_gpu_mem_bytes,omitempty"`
	GPUProcs     []gpuProcCheck                 `json:"gpu_processes"`
	HoldCheck    *holdCheck                     `json:"hold_check,omitempty"`
	TotalCPUMs   float64                        `json:"probe_cpu_ms"`
}

// holdCheck compares where NVML saw the held child with where its
// CUDA_VISIBLE_DEVICES says it should be.
type holdCheck struct {
	Expected []string `json:"expected_uuids"`
	Seen     []string `json:"seen_uuids"`
	OK       bool     `json:"ok"`
}

func main() {
	exit := 0
	defer func() { os.Exit(exit) }()
	if len(os.Args) > 1 && os.Args[1] == holdArg {
		holdMain()
		return
	}
	var roles, pids multi
	opts := telemetry.Options{}
	flag.Var(&roles, "role", "NAME=CUDA_VISIBLE_DEVICES (repeatable); -cvd is shorthand for one role named probe")
	cvd := flag.String("cvd", "", "CUDA_VISIBLE_DEVICES of a role named probe")
	flag.Var(&pids, "pid", "NAME=ROOTPID: measure that role's process tree and attribute its GPU memory (repeatable)")
	polls := flag.Int("polls", 20, "polls to time for each poller")
	interval := flag.Duration("interval", 50*time.Millisecond, "pause between timed polls")
	flag.IntVar(&opts.FakeGPUs, "fake", 0, "simulate N H200s instead of reading the host")
	flag.StringVar(&opts.NVMLLibrary, "nvml-lib", "", "libnvidia-ml path (default: the soname)")
	flag.BoolVar(&opts.DisableNVML, "no-nvml", false, "skip NVML (test the nvidia-smi fallback)")
	flag.StringVar(&opts.NvidiaSMI, "smi", "", "nvidia-smi binary")
	hold := flag.String("hold", "", "start a child with this CUDA_VISIBLE_DEVICES that holds 1 GiB on each GPU it sees, as role \"held\", and check NVML shows it on exactly those GPUs")
	flag.Parse()
	if *cvd != "" {
		roles = append(roles, "probe="+*cvd)
	}
	if *hold != "" {
		h, err := startHolder(*hold)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpuprobe:", err)
			os.Exit(1)
		}
		defer h.stop()
		roles = append(roles, "held="+*hold)
		pids = append(pids, "held="+strconv.Itoa(h.PID()))
	}
	if err := run(opts, roles, pids, *polls, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "gpuprobe:", err)
		exit = 1
	}
}

func run(opts telemetry.Options, roleFlags, pidFlags []string, polls int, interval time.Duration) error {
	c0 := cpu()
	var infos []telemetry.RoleInfo
	idx := map[string]int{}
	for _, r := range roleFlags {
		name, v, ok := strings.Cut(r, "=")
		if !ok {
			return fmt.Errorf("parse -role %q: want NAME=CUDA_VISIBLE_DEVICES", r)
		}
		idx[name] = len(infos)
		infos = append(infos, telemetry.RoleInfo{Name: name, CudaVisibleDevices: v})
	}
	for _, p := range pidFlags {
		name, v, ok := strings.Cut(p, "=")
		pid, err := strconv.Atoi(v)
		if !ok || err != nil {
			return fmt.Errorf("parse -pid %q: want NAME=PID", p)
		}
		i, ok := idx[name]
		if !ok {
			idx[name] = len(infos)
			infos = append(infos, telemetry.RoleInfo{Name: name})
			i = len(infos) - 1
		}
		infos[i].RootPID = pid
	}

	ctx := context.Background()
	t0 := time.Now()
	prov, panel := telemetry.Auto(ctx, opts)
	rep := report{Provider: panel.Provider, Panel: panel, InitMs: ms(time.Since(t0)), RoleUUIDs: map[string][]string{}, GPUProcs: []gpuProcCheck{}}

	var gpus []telemetry.GPUInfo
	if prov != nil {
		defer func() { _ = prov.Close() }()
		rep.GPUPoll = timePolls(polls, interval, func() error {
			g, err := prov.Poll(ctx)
			if err == nil {
				gpus = g
			}
			return err
		})
	}
	pp := telemetry.NewProcPoller("")
	var procs map[string]snapshot.ProcStatus
	pidRole := map[int]string{}
	rep.ProcPoll = timePolls(polls, interval, func() error {
		p, pr, err := pp.Poll(infos)
		if err == nil {
			procs, pidRole = p, pr
		}
		return err
	})
	rg := make([]telemetry.RoleGPUs, len(infos))
	for i, r := range infos {
		rg[i] = telemetry.RoleGPUs{Role: r.Name, CudaVisibleDevices: r.CudaVisibleDevices}
	}
	m := telemetry.MapRoles(gpus, rg)
	rep.GPUs, rep.RoleGPUMem = telemetry.Join(gpus, m, pidRole)
	rep.RoleUUIDs, rep.MappingNotes, rep.Procs = m.RoleUUIDs, m.Notes, procs
	for _, g := range gpus {
		if g.Err != "" {
			rep.GPUErrors = append(rep.GPUErrors, fmt.Sprintf("GPU %d: %s", g.Index, g.Err))
		}
	}
	for _, g := range rep.GPUs {
		for _, p := range g.Processes {
			rep.GPUProcs = append(rep.GPUProcs, gpuProcCheck{GPU: g.Index, PID: p.PID, UsedMiB: p.UsedB >> 20, Role: p.Role, Comm: comm(p.PID)})
		}
	}
	if _, ok := idx["held"]; ok {
		hc := &holdCheck{Expected: m.RoleUUIDs["held"]}
		for _, g := range rep.GPUs {
			for _, p := range g.Processes {
				if p.Role == "held" {
					hc.Seen = append(hc.Seen, g.UUID)
					break
				}
			}
		}
		exp := append([]string(nil), hc.Expected...)
		sort.Strings(exp)
		sort.Strings(hc.Seen)
		hc.OK = len(exp) > 0 && strings.Join(exp, ",") == strings.Join(hc.Seen, ",")
		rep.HoldCheck = hc
	}
	rep.TotalCPUMs = ms(cpu() - c0)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func timePolls(n int, pause time.Duration, poll func() error) *latency {
	l := &latency{}
	var ds []time.Duration
	c0 := cpu()
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(pause)
		}
		t := time.Now()
		err := poll()
		ds = append(ds, time.Since(t))
		if err != nil {
			l.ErrStr = err.Error()
			break
		}
	}
	l.CPUMs = ms(cpu()-c0) / float64(len(ds))
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	l.N = len(ds)
	l.MinMs, l.MaxMs = ms(ds[0]), ms(ds[len(ds)-1])
	l.P50Ms, l.P90Ms = ms(percentile.NearestRank(ds, 50)), ms(percentile.NearestRank(ds, 90))
	return l
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Package telemetry reads per-GPU load (NVML, nvidia-smi, or a simulated
// DGX H200) and per-role process trees (internal/procfs), joins GPUs to roles by
// UUID and GPU processes to roles by PID, and publishes immutable Readings.
//
// Two pollers run off the UI path, each a goroutine owning its own state: the
// GPU poller (default every 1 s) and the process-tree poller (default every
// 2 s, one /proc scan per tick for all roles). A third goroutine joins their
// latest results with the current roles and publishes.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// Readings is one published picture. Never mutate a Readings you received:
// it is shared with every other subscriber.
type Readings struct {
	Seq   uint64
	Time  time.Time
	GPUs  []snapshot.GPUStatus
	Panel snapshot.GPUPanelStatus
	// Procs holds the roles whose root process is running.
	Procs map[string]snapshot.ProcStatus
	// RoleGPUMem is each role's GPU memory summed over its processes.
	RoleGPUMem map[string]uint64
	// RoleGPUUUIDs is each role's CUDA_VISIBLE_DEVICES resolved to UUIDs
	// (for RoleStatus.GPUUUIDs).
	RoleGPUUUIDs map[string][]string
	// Notes are mapping problems and provider errors, also folded into
	// Panel.Note.
	Notes []string
	// GPUPolledAt is when the poll behind GPUs began (wall clock, zero
	// before the first poll): a reader that must not trust a reading taken
	// before some moment (WaitReleased) compares against it.
	GPUPolledAt time.Time
}

// Options configures New. The zero value polls the real host.
type Options struct {
	// FakeGPUs > 0 simulates that many H200s (Panel.Simulated = true).
	FakeGPUs int
	// FakeNPUs > 0 simulates that many Ascend 910B NPUs through the
	// npu-smi parser (Panel.Simulated = true).
	FakeNPUs int
	// Accelerator "ascend" reads npu-smi instead of NVML/nvidia-smi.
	Accelerator string
	// NPUSMI is the npu-smi binary ("" = look up "npu-smi").
	NPUSMI string
	// FakeManualProcesses stops the fake from putting each role's processes
	// on its GPUs by itself; tests then inject them through Fake().
	FakeManualProcesses bool
	// GPUInterval and ProcInterval are the poll cadences (1 s and 2 s).
	GPUInterval  time.Duration
	ProcInterval time.Duration
	// NVMLLibrary is the libnvidia-ml path ("" = the default soname).
	NVMLLibrary string
	// DisableNVML skips NVML (to use or test the nvidia-smi fallback).
	DisableNVML bool
	// NvidiaSMI is the nvidia-smi binary ("" = look up "nvidia-smi").
	NvidiaSMI string
	// SMIRun replaces running nvidia-smi (tests).
	SMIRun RunFunc
	// ProcRoot is the process table ("" = /proc).
	ProcRoot string
	// Now is the clock for timestamps and fake readings (nil = time.Now).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.GPUInterval <= 0 {
		o.GPUInterval = time.Second
	}
	if o.ProcInterval <= 0 {
		o.ProcInterval = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Auto picks the GPU provider: the fake when FakeGPUs > 0, else NVML, else
// nvidia-smi, else none (nil provider). The panel says which and, when it is
// none or a fallback, why. It may take a while (NVML init on a large machine),
// so call it off the UI path; Telemetry.Run does.
func Auto(ctx context.Context, opts Options) (GPUProvider, snapshot.GPUPanelStatus) {
	opts.defaults()
	if opts.FakeNPUs > 0 {
		return NewFakeNPUs(opts.FakeNPUs, opts.Now).Provider(), fakeNPUPanel()
	}
	if opts.FakeGPUs > 0 {
		return NewFakeGPUs(opts.FakeGPUs, opts.Now).Provider(), fakePanel()
	}
	if opts.Accelerator == "ascend" {
		return autoNPU(ctx, opts)
	}
	var why []string
	missing := true // nothing of the driver is installed, as on a laptop
	if !opts.DisableNVML {
		p, err := NewNVML(nil, opts.NVMLLibrary)
		if err == nil {
			return p, snapshot.GPUPanelStatus{Provider: ProviderNVML}
		}
		missing = errors.Is(err, errNoLibrary)
		why = append(why, err.Error())
	}
	sctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	p, err := NewSMI(sctx, opts.NvidiaSMI, opts.SMIRun)
	if err == nil {
		return p, snapshot.GPUPanelStatus{Provider: ProviderSMI, Note: "NVML unavailable; reading nvidia-smi"}
	}
	missing = missing && (errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist))
	why = append(why, err.Error())
	if missing {
		return nil, snapshot.GPUPanelStatus{Provider: ProviderNone, Note: NoDriverNote}
	}
	// A driver that is there but broken deserves its own words.
	return nil, snapshot.GPUPanelStatus{Provider: ProviderNone, Note: NoDriverNote + " (" + strings.Join(why, "; ") + ")"}
}

// autoNPU is Auto for Ascend hosts: npu-smi or nothing.
func autoNPU(ctx context.Context, opts Options) (GPUProvider, snapshot.GPUPanelStatus) {
	sctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	p, err := NewNPUSMI(sctx, opts.NPUSMI, opts.SMIRun)
	if err == nil {
		return p, snapshot.GPUPanelStatus{Provider: ProviderNPUSMI}
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return nil, snapshot.GPUPanelStatus{Provider: ProviderNone, Note: NoNPUNote}
	}
	return nil, snapshot.GPUPanelStatus{Provider: ProviderNone, Note: NoNPUNote + " (" + err.Error() + ")"}
}

func fakePanel() snapshot.GPUPanelStatus {
	return snapshot.GPUPanelStatus{Provider: ProviderFake, Simulated: true, Note: "simulated GPUs"}
}

// Telemetry runs the pollers and publishes Readings.
type Telemetry struct {
	opts    Options
	fake    *FakeGPUs
	fakeNPU *FakeNPUs

	roles    chan []RoleInfo // to the hub, latest wins
	procRole chan []RoleInfo // to the process poller, latest wins

	latest atomic.Pointer[Readings]

	mu   sync.Mutex
	subs map[chan Readings]struct{}
	// alive is, per role, its hold as of the last reading that showed its
	// process tree: the baseline for a role that crashed, whose tree the
	// latest reading may already have lost (its dying ranks then look like
	// someone else's processes).
	alive map[string]aliveHold

	started atomic.Bool
}

// New prepares telemetry; nothing is polled until Run. With FakeGPUs > 0 the
// simulated GPUs exist at once (see Fake).
func New(opts Options) *Telemetry {
	opts.defaults()
	t := &Telemetry{
		opts:     opts,
		roles:    make(chan []RoleInfo, 1),
		procRole: make(chan []RoleInfo, 1),
		subs:     map[chan Readings]struct{}{},
		alive:    map[string]aliveHold{},
	}
	panel := snapshot.GPUPanelStatus{Provider: ProviderNone, Note: ProbingNote}
	switch {
	case opts.FakeNPUs > 0:
		t.fakeNPU = NewFakeNPUs(opts.FakeNPUs, opts.Now)
		panel = fakeNPUPanel()
	case opts.FakeGPUs > 0:
		t.fake = NewFakeGPUs(opts.FakeGPUs, opts.Now)
		panel = fakePanel()
	}
	t.latest.Store(&Readings{Time: opts.Now(), Panel: panel, Procs: map[string]snapshot.ProcStatus{}, RoleGPUMem: map[string]uint64{}, RoleGPUUUIDs: map[string][]string{}})
	return t
}

// Fake is the simulated GPU system, or nil when the GPUs are real.
func (t *Telemetry) Fake() *FakeGPUs { return t.fake }

// FakeNPU is the simulated NPU system, or nil.
func (t *Telemetry) FakeNPU() *FakeNPUs { return t.fakeNPU }

// SetRoles replaces the set of roles to watch. Call it whenever a role's
// root PID changes (start, restart, exit: RootPID 0). It never blocks.
func (t *Telemetry) SetRoles(roles []RoleInfo) {
	cp := append([]RoleInfo(nil), roles...)
	offer(t.roles, cp)
	offer(t.procRole, cp)
}

// Latest returns the most recent Readings; its maps are never nil. Before
// the first poll the panel says ProbingNote (or "simulated GPUs").
func (t *Telemetry) Latest() Readings { return *t.latest.Load() }

// Subscribe returns a channel that holds the current Readings at once and
// then each newer one; a slow reader only ever misses intermediate values,
// never blocks the pollers. cancel stops delivery. The channel is never
// closed (not even when Run returns): stop reading when your own context ends.
func (t *Telemetry) Subscribe() (<-chan Readings, func()) {
	ch := make(chan Readings, 1)
	t.mu.Lock()
	ch <- *t.latest.Load()
	t.subs[ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		delete(t.subs, ch)
		t.mu.Unlock()
	}
}

// offer puts v in a one-slot channel, replacing any value still unread.
// Safe with several senders: the loop retries until v lands.
func offer[T any](ch chan T, v T) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

type gpuResult struct {
	provider string
	panel    snapshot.GPUPanelStatus
	gpus     []GPUInfo
	err      error
	at       time.Time // the poll's start
}

type procResult struct {
	procs   map[string]snapshot.ProcStatus
	pidRole map[int]string
	err     error
}

// Run polls until ctx is done, then releases the GPU library. Call it once.
func (t *Telemetry) Run(ctx context.Context) error {
	if !t.started.CompareAndSwap(false, true) {
		return errors.New("telemetry: Run called twice")
	}
	gpuCh := make(chan gpuResult, 1)
	procCh := make(chan procResult, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); t.gpuLoop(ctx, gpuCh) }()
	go func() { defer wg.Done(); t.procLoop(ctx, procCh) }()
	t.hub(ctx, gpuCh, procCh)
	wg.Wait()
	return nil
}

func (t *Telemetry) gpuLoop(ctx context.Context, out chan gpuResult) {
	var prov GPUProvider
	var panel snapshot.GPUPanelStatus
	if t.fakeNPU != nil {
		prov, panel = t.fakeNPU.Provider(), fakeNPUPanel()
	} else if t.fake != nil {
		prov, panel = t.fake.Provider(), fakePanel()
	} else {
		prov, panel = Auto(ctx, t.opts)
	}
	if prov == nil {
		offer(out, gpuResult{provider: ProviderNone, panel: panel})
		return
	}
	defer func() { _ = prov.Close() }()
	tick := time.NewTicker(t.opts.GPUInterval)
	defer tick.Stop()
	for {
		at := time.Now() // real time even under a test clock: it orders polls against events
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		gpus, err := prov.Poll(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		offer(out, gpuResult{provider: prov.Name(), panel: panel, gpus: gpus, err: err, at: at})
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (t *Telemetry) procLoop(ctx context.Context, out chan procResult) {
	if err := procAvailable(t.opts.ProcRoot); err != nil {
		offer(out, procResult{err: err})
		return
	}
	pp := NewProcPoller(t.opts.ProcRoot)
	var roles []RoleInfo
	tick := time.NewTicker(t.opts.ProcInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case roles = <-t.procRole:
			// A new or restarted role shows up now, not a tick later.
		case <-tick.C:
		}
		procs, pidRole, err := pp.Poll(roles)
		offer(out, procResult{procs: procs, pidRole: pidRole, err: err})
	}
}

// hub owns the roles and the latest results of both pollers and publishes a
// joined Readings whenever any of them changes.
func (t *Telemetry) hub(ctx context.Context, gpuCh chan gpuResult, procCh chan procResult) {
	var (
		roles []RoleInfo
		gpu   gpuResult
		proc  procResult
		seq   uint64
	)
	gpu.panel = t.latest.Load().Panel
	for {
		select {
		case <-ctx.Done():
			return
		case roles = <-t.roles:
		case gpu = <-gpuCh:
		case proc = <-procCh:
		}
		seq++
		r := t.join(seq, roles, gpu, proc)
		t.publish(r)
	}
}

func (t *Telemetry) join(seq uint64, roles []RoleInfo, gpu gpuResult, proc procResult) *Readings {
	rg := make([]RoleGPUs, len(roles))
	for i, r := range roles {
		rg[i] = RoleGPUs{Role: r.Name, CudaVisibleDevices: r.CudaVisibleDevices}
	}
	var m Mapping
	var notes []string
	if len(gpu.gpus) > 0 {
		m = MapRoles(gpu.gpus, rg)
		notes = append(notes, m.Notes...)
	}
	if !t.opts.FakeManualProcesses {
		if t.fake != nil {
			t.fake.autoAttach(m.RoleUUIDs, proc.procs)
		}
		if t.fakeNPU != nil {
			t.fakeNPU.autoAttach(m.RoleUUIDs, proc.procs)
		}
	}
	gpus, mem := Join(gpu.gpus, m, proc.pidRole)
	if gpu.err != nil {
		notes = append(notes, "GPU poll: "+gpu.err.Error())
	}
	for _, g := range gpu.gpus {
		if g.Err != "" {
			notes = append(notes, fmt.Sprintf("GPU %d: %s", g.Index, g.Err))
		}
	}
	if proc.err != nil {
		notes = append(notes, "process poll: "+proc.err.Error())
	}
	panel := gpu.panel
	if len(notes) > 0 {
		parts := notes
		if panel.Note != "" {
			parts = append([]string{panel.Note}, notes...)
		}
		panel.Note = strings.Join(parts, "; ")
	}
	procs := proc.procs
	if procs == nil {
		procs = map[string]snapshot.ProcStatus{}
	}
	uuids := m.RoleUUIDs
	if uuids == nil {
		uuids = map[string][]string{}
	}
	return &Readings{
		Seq: seq, Time: t.opts.Now(),
		GPUs: gpus, Panel: panel, Procs: procs,
		RoleGPUMem: mem, RoleGPUUUIDs: uuids, Notes: notes,
		GPUPolledAt: gpu.at,
	}
}

func (t *Telemetry) publish(r *Readings) {
	t.latest.Store(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	for role, ps := range r.Procs {
		if len(ps.PIDs) == 0 {
			continue
		}
		if h, ok := r.Hold(role); ok {
			prev, found := t.alive[role]
			if found && prev.root == ps.PIDs[0] {
				// A tree dying rank by rank shows fewer pids each poll; what
				// the run ever held stays its own.
				h = h.merge(prev.h)
			}
			t.alive[role] = aliveHold{root: ps.PIDs[0], h: h}
		}
	}
	for ch := range t.subs {
		offer(ch, *r)
	}
}

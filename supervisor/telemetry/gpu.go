package telemetry

import (
	"context"
	"time"
)

// Provider names as shown in snapshot.GPUPanelStatus.Provider.
const (
	ProviderNVML = "nvml"
	ProviderSMI  = "nvidia-smi"
	ProviderFake = "fake"
	ProviderNone = "none"
)

// NoDriverNote is the panel note when neither NVML nor nvidia-smi works.
const NoDriverNote = "no NVIDIA driver found; GPU panel off"

// ProbingNote is the panel's note until the first GPU probe answers.
const ProbingNote = "probing GPUs"

// GPUInfo is one GPU as a provider reads it, before any role is joined in.
// Readings a device does not support stay zero.
type GPUInfo struct {
	Index      int
	UUID       string // "GPU-..." as NVML and nvidia-smi print it
	Name       string
	UtilPct    int
	MemUsedB   uint64
	MemTotalB  uint64
	PowerW     float64
	TempC      int
	SMClockMHz int
	Processes  []GPUProc
	// Err says why some reading of this GPU failed (e.g. "GPU is lost"); the
	// other fields still hold what could be read.
	Err string
}

// GPUProc is one compute process on a GPU.
type GPUProc struct {
	PID   int
	UsedB uint64
}

// GPUProvider reads every GPU of the host. Poll is called from one goroutine
// only; implementations need no locking of their own.
type GPUProvider interface {
	// Name is one of the Provider* constants.
	Name() string
	// Poll reads all GPUs, ordered by index.
	Poll(ctx context.Context) ([]GPUInfo, error)
	// Close releases the library or handles; Poll must not be called after.
	Close() error
}

// pollTimeout bounds one provider poll so that a hung driver call or a
// stuck nvidia-smi cannot stop the poller for good.
const pollTimeout = 5 * time.Second

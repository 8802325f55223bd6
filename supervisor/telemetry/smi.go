package telemetry

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
)

// The exact queries; keep the field order in step with parseSMIGPUs and
// parseSMIApps.
var (
	smiGPUArgs = []string{
		"--query-gpu=index,uuid,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm",
		"--format=csv,noheader,nounits",
	}
	smiAppArgs = []string{
		"--query-compute-apps=gpu_uuid,pid,used_memory",
		"--format=csv,noheader,nounits",
	}
)

const smiGPUFields = 9

const mib = 1 << 20

// RunFunc runs a command and returns its standard output; the seam that lets
// tests feed captured nvidia-smi output.
type RunFunc func(ctx context.Context, name string, args ...string) ([]byte, error)

func execRun(ctx context.Context, name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// nvidia-smi prints its reason ("couldn't communicate with the
		// NVIDIA driver") on stdout, so keep both.
		msg := strings.TrimSpace(stderr.String() + " " + string(out))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, fmt.Errorf("run %s: %w: %s", name, err, msg)
	}
	return out, nil
}

type smiProvider struct {
	path string
	run  RunFunc
}

// NewSMI returns the nvidia-smi fallback provider. path is the binary (a name
// is looked up in PATH); run nil means really execute it. It polls once to
// prove the driver answers, so a broken install reports itself here.
func NewSMI(ctx context.Context, path string, run RunFunc) (GPUProvider, error) {
	if path == "" {
		path = "nvidia-smi"
	}
	if run == nil {
		full, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("find nvidia-smi: %w", err)
		}
		path, run = full, execRun
	}
	p := &smiProvider{path: path, run: run}
	if _, err := p.Poll(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *smiProvider) Name() string { return ProviderSMI }
func (p *smiProvider) Close() error { return nil }

func (p *smiProvider) Poll(ctx context.Context) ([]GPUInfo, error) {
	out, err := p.run(ctx, p.path, smiGPUArgs...)
	if err != nil {
		return nil, fmt.Errorf("query GPUs: %w", err)
	}
	gpus, err := parseSMIGPUs(out)
	if err != nil {
		return nil, err
	}
	out, err = p.run(ctx, p.path, smiAppArgs...)
	if err != nil {
		// GPU readings without processes still beat no panel at all.
		for i := range gpus {
			gpus[i].Err = "processes: " + err.Error()
		}
		return gpus, nil
	}
	apps, err := parseSMIApps(out)
	if err != nil {
		for i := range gpus {
			gpus[i].Err = err.Error()
		}
	}
	byUUID := make(map[string]int, len(gpus))
	for i, g := range gpus {
		byUUID[g.UUID] = i
	}
	for _, a := range apps {
		if i, ok := byUUID[a.uuid]; ok {
			gpus[i].Processes = append(gpus[i].Processes, a.proc)
		}
	}
	return gpus, nil
}

// smiCSV reads nvidia-smi's "a, b, c" lines. nvidia-smi never quotes, so a
// lone '"' in a name must not start a quoted field.
func smiCSV(out []byte) ([][]string, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	var recs [][]string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return recs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read nvidia-smi csv: %w", err)
		}
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		recs = append(recs, rec)
	}
}

// parseSMIGPUs parses the --query-gpu output. A field nvidia-smi cannot read
// ("[N/A]", "[Not Supported]", ...) stays zero.
func parseSMIGPUs(out []byte) ([]GPUInfo, error) {
	recs, err := smiCSV(out)
	if err != nil {
		return nil, err
	}
	gpus := make([]GPUInfo, 0, len(recs))
	for n, rec := range recs {
		if len(rec) < smiGPUFields {
			return nil, fmt.Errorf("parse nvidia-smi GPU line %d: want %d fields, got %d: %q", n+1, smiGPUFields, len(rec), strings.Join(rec, ", "))
		}
		// A name with commas in it splits into extra fields; glue them back.
		extra := len(rec) - smiGPUFields
		name := strings.Join(rec[2:3+extra], ", ")
		f := append([]string{rec[0], rec[1], name}, rec[3+extra:]...)
		idx, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi GPU line %d: index %q: %w", n+1, f[0], err)
		}
		g := GPUInfo{Index: idx, UUID: f[1], Name: f[2]}
		g.UtilPct = int(smiNum(f[3]))
		g.MemUsedB = uint64(smiNum(f[4]) * mib)
		g.MemTotalB = uint64(smiNum(f[5]) * mib)
		g.PowerW = smiNum(f[6])
		g.TempC = int(smiNum(f[7]))
		g.SMClockMHz = int(smiNum(f[8]))
		gpus = append(gpus, g)
	}
	return gpus, nil
}

type smiApp struct {
	uuid string
	proc GPUProc
}

// parseSMIApps parses --query-compute-apps output; no processes is empty
// output (older drivers print a "No running processes found" line instead).
func parseSMIApps(out []byte) ([]smiApp, error) {
	recs, err := smiCSV(out)
	if err != nil {
		return nil, err
	}
	apps := make([]smiApp, 0, len(recs))
	var bad []string
	for _, rec := range recs {
		if len(rec) == 1 && strings.HasPrefix(strings.ToLower(rec[0]), "no running") {
			continue
		}
		if len(rec) != 3 {
			bad = append(bad, strings.Join(rec, ", "))
			continue
		}
		pid, err := strconv.Atoi(rec[1])
		if err != nil {
			bad = append(bad, strings.Join(rec, ", "))
			continue
		}
		apps = append(apps, smiApp{uuid: rec[0], proc: GPUProc{PID: pid, UsedB: uint64(smiNum(rec[2]) * mib)}})
	}
	if len(bad) > 0 {
		return apps, fmt.Errorf("parse nvidia-smi compute apps: skipped %d bad line(s): %q", len(bad), bad[0])
	}
	return apps, nil
}

// smiNum reads a number, zero for "[N/A]" and friends.
func smiNum(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	// NaN and the infinities parse too, and a number past 1e12 (MiB, W,
	// MHz...) is garbage that would overflow the integer conversions.
	if err != nil || !(v >= 0) || v > 1e12 {
		return 0
	}
	return v
}

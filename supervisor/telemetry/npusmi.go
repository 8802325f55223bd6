package telemetry

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// Provider names of the Ascend NPU providers. The dashboard labels devices
// "NPU" for any provider whose name starts with "npu".
const (
	ProviderNPUSMI  = "npu-smi"
	ProviderFakeNPU = "npu-fake"
)

// NoNPUNote is the panel note when the profile is for Ascend NPUs but
// npu-smi does not answer.
const NoNPUNote = "no npu-smi found; NPU panel off"

// npuSMIArgs is the query: the human table, the only view that lists
// every NPU, its HBM and its processes in one run.
var npuSMIArgs = []string{"info"}

type npuSMIProvider struct {
	path string
	run  RunFunc
	name string
}

// NewNPUSMI returns the Ascend provider, which parses `npu-smi info`. path
// is the binary (a name is looked up in PATH); run nil means really
// execute it. It polls once so a broken install reports itself here.
func NewNPUSMI(ctx context.Context, path string, run RunFunc) (GPUProvider, error) {
	if path == "" {
		path = "npu-smi"
	}
	if run == nil {
		full, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("find npu-smi: %w", err)
		}
		path, run = full, execRun
	}
	p := &npuSMIProvider{path: path, run: run, name: ProviderNPUSMI}
	if _, err := p.Poll(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *npuSMIProvider) Name() string { return p.name }
func (p *npuSMIProvider) Close() error { return nil }

func (p *npuSMIProvider) Poll(ctx context.Context) ([]GPUInfo, error) {
	out, err := p.run(ctx, p.path, npuSMIArgs...)
	if err != nil {
		return nil, fmt.Errorf("query NPUs: %w", err)
	}
	return parseNPUSMI(out)
}

// NPUUUID is the stable id tsd gives an NPU (npu-smi prints no UUID): its
// PCI bus id, which is what survives a reboot and a driver reload.
func NPUUUID(busID string) string { return "NPU-" + strings.ToLower(busID) }

var slashRun = regexp.MustCompile(`\s*/\s*`)

// parseNPUSMI reads `npu-smi info`'s table. Its documented layout is two
// boxes of "|"-separated rows: the devices, each NPU a pair of rows
//
//	| NPU   Name   | Health | Power(W)  Temp(C)  Hugepages-Usage(page) |
//	| Chip         | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB) |
//
// (a card with several chips prints one Chip row per chip), then the
// processes, one row per process: NPU and Chip, Process id, Process name,
// Process memory(MB). Devices are indexed in the order their chip rows
// appear, which is the logical order ASCEND_RT_VISIBLE_DEVICES uses.
// Memory is the HBM pair when the chip has HBM, else Memory-Usage.
// Unreadable values ("NA") stay zero.
func parseNPUSMI(out []byte) ([]GPUInfo, error) {
	type key struct{ npu, chip int }
	var (
		gpus    = []GPUInfo{}
		keys    []key
		procs   bool // in the process box
		npu     = -1
		name    string
		health  string
		powerW  float64
		tempC   int
		sawHead bool
		bad     []string
	)
	for _, raw := range strings.Split(string(out), "\n") {
		line := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		if !strings.HasPrefix(line, "|") {
			continue // box borders, blank lines
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(slashRun.ReplaceAllString(cells[i], "/"))
		}
		first := strings.Fields(cells[0])
		switch {
		case len(first) == 0:
			continue
		case strings.HasPrefix(cells[0], "npu-smi"):
			continue // the version line
		case first[0] == "NPU" && len(cells) > 1 && strings.HasPrefix(cells[1], "Process"):
			procs = true
			continue
		case first[0] == "NPU" || first[0] == "Chip":
			sawHead = true
			continue
		case strings.HasPrefix(strings.ToLower(cells[0]), "no running processes"):
			continue
		}
		if procs {
			if len(cells) < 4 || len(first) < 2 {
				bad = append(bad, line)
				continue
			}
			n, err1 := strconv.Atoi(first[0])
			c, err2 := strconv.Atoi(first[1])
			pid, err3 := strconv.Atoi(cells[1])
			if err1 != nil || err2 != nil || err3 != nil {
				bad = append(bad, line)
				continue
			}
			for i, k := range keys {
				if k == (key{n, c}) {
					gpus[i].Processes = append(gpus[i].Processes, GPUProc{PID: pid, UsedB: uint64(smiNum(cells[3]) * mib)})
				}
			}
			continue
		}
		if len(cells) < 3 {
			bad = append(bad, line)
			continue
		}
		if len(first) >= 2 && !isNumber(first[1]) {
			// The device row: NPU id and name, health, power and temperature.
			n, err := strconv.Atoi(first[0])
			if err != nil {
				bad = append(bad, line)
				continue
			}
			npu, name, health = n, strings.Join(first[1:], " "), cells[1]
			f := strings.Fields(cells[2])
			powerW, tempC = 0, 0
			if len(f) > 0 {
				powerW = smiNum(f[0])
			}
			if len(f) > 1 {
				tempC = int(smiNum(f[1]))
			}
			continue
		}
		// A chip row: chip id, bus id, AICore and the memory pairs.
		c, err := strconv.Atoi(first[0])
		if err != nil || npu < 0 {
			bad = append(bad, line)
			continue
		}
		g := GPUInfo{Index: len(gpus), Name: name, PowerW: powerW, TempC: tempC, UUID: NPUUUID(cells[1])}
		if cells[1] == "" {
			g.UUID = fmt.Sprintf("NPU-%d-%d", npu, c)
		}
		for _, o := range gpus {
			if o.UUID == g.UUID {
				g.UUID = fmt.Sprintf("%s/%d", g.UUID, c) // chips that print one bus id
			}
		}
		if health != "" && !strings.EqualFold(health, "OK") {
			g.Err = "health " + health
		}
		f := strings.Fields(cells[2])
		if len(f) > 0 {
			g.UtilPct = int(smiNum(f[0]))
		}
		for _, pair := range f[min(1, len(f)):] {
			used, total, ok := strings.Cut(pair, "/")
			if ok && smiNum(total) > 0 {
				g.MemUsedB, g.MemTotalB = uint64(smiNum(used)*mib), uint64(smiNum(total)*mib)
			}
		}
		gpus = append(gpus, g)
		keys = append(keys, key{npu, c})
	}
	if !sawHead && len(gpus) == 0 {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, fmt.Errorf("parse npu-smi info: no NPU table in the output: %q", msg)
	}
	if len(bad) > 0 {
		return gpus, fmt.Errorf("parse npu-smi info: skipped %d line(s) it could not read: %q", len(bad), bad[0])
	}
	return gpus, nil
}

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

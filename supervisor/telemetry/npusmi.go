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
	p := npuParse{gpus: []GPUInfo{}, npu: -1}
	for _, raw := range strings.Split(string(out), "\n") {
		p.line(raw)
	}
	if !p.sawHead && len(p.gpus) == 0 {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, fmt.Errorf("parse npu-smi info: no NPU table in the output: %q", msg)
	}
	if len(p.bad) > 0 {
		return p.gpus, fmt.Errorf("parse npu-smi info: skipped %d line(s) it could not read: %q", len(p.bad), p.bad[0])
	}
	return p.gpus, nil
}

// npuKey names a chip as the process box does.
type npuKey struct{ npu, chip int }

// npuParse is parseNPUSMI's state: the devices so far and the device row
// whose chip rows follow.
type npuParse struct {
	gpus    []GPUInfo
	keys    []npuKey // per entry of gpus
	procs   bool     // in the process box
	sawHead bool
	bad     []string
	// The current device row.
	npu          int
	name, health string
	powerW       float64
	tempC        int
}

// line sorts one line of output into its box and row kind.
func (p *npuParse) line(raw string) {
	line := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
	if !strings.HasPrefix(line, "|") {
		return // box borders, blank lines
	}
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(slashRun.ReplaceAllString(cells[i], "/"))
	}
	first := strings.Fields(cells[0])
	switch {
	case len(first) == 0, strings.HasPrefix(cells[0], "npu-smi"),
		strings.HasPrefix(strings.ToLower(cells[0]), "no running processes"):
		return // the version line, "no running processes" rows
	case first[0] == "NPU" && len(cells) > 1 && strings.HasPrefix(cells[1], "Process"):
		p.procs = true
		return
	case first[0] == "NPU" || first[0] == "Chip":
		p.sawHead = true
		return
	}
	var ok bool
	switch {
	case p.procs:
		ok = p.procRow(cells, first)
	case len(cells) < 3:
	case len(first) >= 2 && !isNumber(first[1]):
		ok = p.deviceRow(cells, first)
	default:
		ok = p.chipRow(cells, first)
	}
	if !ok {
		p.bad = append(p.bad, line)
	}
}

// deviceRow reads "| NPU Name | Health | Power Temp Hugepages |".
func (p *npuParse) deviceRow(cells, first []string) bool {
	n, err := strconv.Atoi(first[0])
	if err != nil {
		return false
	}
	p.npu, p.name, p.health = n, strings.Join(first[1:], " "), cells[1]
	f := strings.Fields(cells[2])
	p.powerW, p.tempC = 0, 0
	if len(f) > 0 {
		p.powerW = smiNum(f[0])
	}
	if len(f) > 1 {
		p.tempC = int(smiNum(f[1]))
	}
	return true
}

// chipRow reads "| Chip | Bus-Id | AICore used/total used/total |" into one
// device.
func (p *npuParse) chipRow(cells, first []string) bool {
	c, err := strconv.Atoi(first[0])
	if err != nil || p.npu < 0 {
		return false
	}
	g := GPUInfo{Index: len(p.gpus), Name: p.name, PowerW: p.powerW, TempC: p.tempC, UUID: NPUUUID(cells[1])}
	if cells[1] == "" {
		g.UUID = fmt.Sprintf("NPU-%d-%d", p.npu, c)
	}
	for _, o := range p.gpus {
		if o.UUID == g.UUID {
			g.UUID = fmt.Sprintf("%s/%d", g.UUID, c) // chips that print one bus id
		}
	}
	if p.health != "" && !strings.EqualFold(p.health, "OK") {
		g.Err = "health " + p.health
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
	p.gpus = append(p.gpus, g)
	p.keys = append(p.keys, npuKey{p.npu, c})
	return true
}

// procRow reads "| NPU Chip | Process id | Process name | Process memory |".
func (p *npuParse) procRow(cells, first []string) bool {
	if len(cells) < 4 || len(first) < 2 {
		return false
	}
	n, err1 := strconv.Atoi(first[0])
	c, err2 := strconv.Atoi(first[1])
	pid, err3 := strconv.Atoi(cells[1])
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	for i, k := range p.keys {
		if k == (npuKey{n, c}) {
			p.gpus[i].Processes = append(p.gpus[i].Processes, GPUProc{PID: pid, UsedB: uint64(smiNum(cells[3]) * mib)})
		}
	}
	return true
}

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

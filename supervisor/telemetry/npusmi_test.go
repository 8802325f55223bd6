package telemetry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func npuFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "npu-smi", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Pins: npu-smi info's documented table parses into one GPUInfo per chip,
// in logical order, HBM preferred over Memory-Usage, processes on their
// NPU and chip, NA readings zero, a non-OK health kept as the device error.
func TestParseNPUSMI(t *testing.T) {
	t.Parallel()
	gpus, err := parseNPUSMI(npuFixture(t, "910b-4.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []GPUInfo{
		{Index: 0, UUID: "NPU-0000:c1:00.0", Name: "910B3", UtilPct: 0, MemUsedB: 3398 * mib, MemTotalB: 65536 * mib, PowerW: 98.4, TempC: 38},
		{Index: 1, UUID: "NPU-0000:c2:00.0", Name: "910B3", UtilPct: 87, MemUsedB: 61204 * mib, MemTotalB: 65536 * mib, PowerW: 301.7, TempC: 47,
			Processes: []GPUProc{{PID: 41207, UsedB: 57802 * mib}, {PID: 41233, UsedB: 120 * mib}}},
		{Index: 2, UUID: "NPU-0000:81:00.0", Name: "910B3", MemUsedB: 3398 * mib, MemTotalB: 65536 * mib, TempC: 41, Err: "health Warning"},
		{Index: 3, UUID: "NPU-0000:82:00.0", Name: "910B3", MemUsedB: 3398 * mib, MemTotalB: 65536 * mib, PowerW: 95, TempC: 37},
	}
	if !reflect.DeepEqual(gpus, want) {
		t.Errorf("910B:\n got %+v\nwant %+v", gpus, want)
	}

	gpus, err = parseNPUSMI(npuFixture(t, "310p-duo.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want = []GPUInfo{
		{Index: 0, UUID: "NPU-0000:01:00.0", Name: "310P3", MemUsedB: 1782 * mib, MemTotalB: 44280 * mib, TempC: 45},
		{Index: 1, UUID: "NPU-0000:02:00.0", Name: "310P3", UtilPct: 12, MemUsedB: 9250 * mib, MemTotalB: 43693 * mib, TempC: 45,
			Processes: []GPUProc{{PID: 7001, UsedB: 7400 * mib}}},
	}
	if !reflect.DeepEqual(gpus, want) {
		t.Errorf("310P duo:\n got %+v\nwant %+v", gpus, want)
	}

	for _, c := range []struct{ name, in, err string }{
		{"driver error", "dcmi module initialize failed. ret is -8005\n", "no NPU table in the output"},
		{"garbled process row", string(npuFixture(t, "910b-4.txt")) + "| x y | z | w | v |\n", "skipped 1 line(s)"},
	} {
		if _, err := parseNPUSMI([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.err)
		}
	}
}

// Pins: the fake NPUs print what the parser reads back, injected and
// attached processes included, and telemetry maps roles to NPUs by their
// ASCEND_RT_VISIBLE_DEVICES indices.
func TestFakeNPUsThroughTelemetry(t *testing.T) {
	t.Parallel()
	f := NewFakeNPUs(4, nil)
	if err := f.AttachProcess(2, 4242, 1000*mib); err != nil {
		t.Fatal(err)
	}
	if err := f.AttachProcess(9, 1, 1); err == nil {
		t.Error("attach to NPU 9 of 4 worked")
	}
	gpus, err := f.Provider().Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 4 || gpus[2].UUID != f.UUID(2) || gpus[3].MemTotalB != fakeNPUHBMMB*mib ||
		!reflect.DeepEqual(gpus[2].Processes, []GPUProc{{PID: 4242, UsedB: 1000 * mib}}) || gpus[2].MemUsedB != (3398+1000)*mib {
		t.Fatalf("fake NPUs read back as %+v", gpus)
	}

	tel := New(Options{FakeNPUs: 4, GPUInterval: 20 * time.Millisecond, ProcInterval: 20 * time.Millisecond})
	pre := startTree(t, `sleep 60 & wait`)
	ch, cancel := tel.Subscribe()
	defer cancel()
	if first := <-ch; first.Panel.Provider != ProviderFakeNPU || !first.Panel.Simulated {
		t.Fatalf("first panel %+v", first.Panel)
	}
	runTelemetry(t, tel)
	tel.SetRoles([]RoleInfo{{Name: "prefill", RootPID: pre, CudaVisibleDevices: "1,2"}})
	r := waitReadings(t, ch, func(r Readings) bool { return r.RoleGPUMem["prefill"] > 0 })
	if got := r.RoleGPUUUIDs["prefill"]; !reflect.DeepEqual(got, []string{tel.FakeNPU().UUID(1), tel.FakeNPU().UUID(2)}) {
		t.Errorf("prefill NPUs %v", got)
	}
	if len(r.GPUs) != 4 || !reflect.DeepEqual(r.GPUs[1].Roles, []string{"prefill"}) || r.GPUs[1].Name != "910B3" {
		t.Errorf("NPU rows %+v", r.GPUs)
	}
}

// Pins: with accelerator ascend, Auto reads npu-smi and never NVML; a host
// without npu-smi gets a panel that says so.
func TestAutoAscend(t *testing.T) {
	t.Parallel()
	fixture := npuFixture(t, "910b-4.txt")
	var asked []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		asked = append(asked, name+" "+strings.Join(args, " "))
		return fixture, nil
	}
	p, panel := Auto(context.Background(), Options{Accelerator: "ascend", SMIRun: run, NPUSMI: "/opt/npu-smi"})
	if p == nil || p.Name() != ProviderNPUSMI || panel.Provider != ProviderNPUSMI {
		t.Fatalf("provider %v panel %+v", p, panel)
	}
	if !reflect.DeepEqual(asked, []string{"/opt/npu-smi info"}) {
		t.Errorf("ran %q", asked)
	}
	missing := func(context.Context, string, ...string) ([]byte, error) {
		return nil, errors.New("boom: " + os.ErrNotExist.Error())
	}
	_, panel = Auto(context.Background(), Options{Accelerator: "ascend", SMIRun: missing})
	if panel.Provider != ProviderNone || !strings.HasPrefix(panel.Note, NoNPUNote) {
		t.Errorf("panel %+v", panel)
	}
	_, panel = Auto(context.Background(), Options{Accelerator: "ascend", NPUSMI: filepath.Join(t.TempDir(), "npu-smi")})
	if panel.Provider != ProviderNone || panel.Note != NoNPUNote {
		t.Errorf("no binary: panel %+v", panel)
	}
}

// npu-smi output is another program's text: no line of it may crash the
// poller.
func FuzzParseNPUSMI(f *testing.F) {
	for _, n := range []string{"910b-4.txt", "310p-duo.txt"} {
		if b, err := os.ReadFile(filepath.Join("testdata", "npu-smi", n)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("| 0 x | OK | NA NA |\n| 0 | | 1 2/0 3/-1 |\n| NPU Chip | Process id |\n| 0 0 | 1 | p | NaN |\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, _ := parseNPUSMI(b)
		for i, g := range gpus {
			if g.Index != i || g.PowerW < 0 || g.UtilPct < 0 || g.TempC < 0 {
				t.Fatalf("bad reading from %q: %+v", b, g)
			}
		}
	})
}

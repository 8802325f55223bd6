package telemetry

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// Shaped like real nvidia-smi output (csv,noheader,nounits): ", " separated,
// memory in MiB, bracketed words for unreadable fields.
const smiTwoH200 = `0, GPU-5a1e43b4-2d6c-8f3e-97d1-0c4bfa0e2a11, NVIDIA H200, 97, 131072, 143771, 612.48, 63, 1980
1, GPU-c0ffee00-1111-2222-3333-444455556666, NVIDIA H200, 0, 4, 143771, [N/A], 31, [N/A]
`

const smiTwoApps = `GPU-5a1e43b4-2d6c-8f3e-97d1-0c4bfa0e2a11, 31337, 129000
GPU-5a1e43b4-2d6c-8f3e-97d1-0c4bfa0e2a11, 31338, [N/A]
`

func cannedSMI(gpus, apps string, err error) RunFunc {
	return func(_ context.Context, _ string, args ...string) ([]byte, error) {
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(args[0], "--query-gpu") {
			return []byte(gpus), nil
		}
		return []byte(apps), nil
	}
}

func TestParseSMIGPUs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		in      string
		want    []GPUInfo
		wantErr string
	}{
		{"empty", "", []GPUInfo{}, ""},
		{"two H200, one with N/A", smiTwoH200, []GPUInfo{
			{Index: 0, UUID: "GPU-5a1e43b4-2d6c-8f3e-97d1-0c4bfa0e2a11", Name: "NVIDIA H200", UtilPct: 97, MemUsedB: 131072 * mib, MemTotalB: 143771 * mib, PowerW: 612.48, TempC: 63, SMClockMHz: 1980},
			{Index: 1, UUID: "GPU-c0ffee00-1111-2222-3333-444455556666", Name: "NVIDIA H200", MemUsedB: 4 * mib, MemTotalB: 143771 * mib, TempC: 31},
		}, ""},
		{"captured on an idle H200", "0, GPU-1473ee24-0797-98a5-bc39-a0dced1045f6, NVIDIA H200, 0, 0, 143771, 126.18, 36, 1980\n", []GPUInfo{
			{Index: 0, UUID: "GPU-1473ee24-0797-98a5-bc39-a0dced1045f6", Name: "NVIDIA H200", MemTotalB: 143771 * mib, PowerW: 126.18, TempC: 36, SMClockMHz: 1980},
		}, ""},
		{"not supported and permissions", "3, GPU-x, Tesla T4, [Not Supported], 0, 15360, [Unknown Error], [Insufficient Permissions], 585\n", []GPUInfo{
			{Index: 3, UUID: "GPU-x", Name: "Tesla T4", MemTotalB: 15360 * mib, SMClockMHz: 585},
		}, ""},
		{"name with a comma", "0, GPU-y, NVIDIA Foo, Rev 2, 5, 1, 2, 3.5, 40, 1000\n", []GPUInfo{
			{Index: 0, UUID: "GPU-y", Name: "NVIDIA Foo, Rev 2", UtilPct: 5, MemUsedB: mib, MemTotalB: 2 * mib, PowerW: 3.5, TempC: 40, SMClockMHz: 1000},
		}, ""},
		{"CRLF and blank lines", "\r\n0, GPU-z, N, 1, 2, 3, 4, 5, 6\r\n\r\n", []GPUInfo{
			{Index: 0, UUID: "GPU-z", Name: "N", UtilPct: 1, MemUsedB: 2 * mib, MemTotalB: 3 * mib, PowerW: 4, TempC: 5, SMClockMHz: 6},
		}, ""},
		{"too few fields", "0, GPU-a, N, 1\n", nil, "want 9 fields, got 4"},
		{"driver error text", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", nil, "want 9 fields"},
		{"bad index", "x, GPU-a, N, 1, 2, 3, 4, 5, 6\n", nil, `index "x"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseSMIGPUs([]byte(c.in))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestParseSMIApps(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		in      string
		want    []smiApp
		wantErr string
	}{
		{"none", "", []smiApp{}, ""},
		{"old driver says none", "No running processes found\n", []smiApp{}, ""},
		{"two with N/A memory", smiTwoApps, []smiApp{
			{"GPU-5a1e43b4-2d6c-8f3e-97d1-0c4bfa0e2a11", GPUProc{PID: 31337, UsedB: 129000 * mib}},
			{"GPU-5a1e43b4-2d6c-8f3e-97d1-0c4bfa0e2a11", GPUProc{PID: 31338}},
		}, ""},
		{"bad pid kept apart", "GPU-a, 12, 5\nGPU-a, [N/A], 7\n", []smiApp{{"GPU-a", GPUProc{PID: 12, UsedB: 5 * mib}}}, "skipped 1 bad line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseSMIApps([]byte(c.in))
			if (err != nil) != (c.wantErr != "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestSMIProviderJoinsAppsByUUID(t *testing.T) {
	t.Parallel()
	p, err := NewSMI(context.Background(), "nvidia-smi", cannedSMI(smiTwoH200, smiTwoApps, nil))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := p.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus[0].Processes) != 2 || gpus[0].Processes[0].PID != 31337 || len(gpus[1].Processes) != 0 {
		t.Fatalf("processes = %+v / %+v", gpus[0].Processes, gpus[1].Processes)
	}
	m := MapRoles(gpus, []RoleGPUs{{Role: "decode", CudaVisibleDevices: "GPU-c0ffee00"}})
	if got := m.RoleUUIDs["decode"]; len(got) != 1 || got[0] != gpus[1].UUID {
		t.Fatalf("mapping = %v", got)
	}
}

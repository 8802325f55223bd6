package telemetry

import (
	"reflect"
	"strings"
	"testing"
)

// Hand-written UUIDs so prefixes can be made to collide on purpose.
var mapGPUs = []GPUInfo{
	{Index: 0, UUID: "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"},
	{Index: 1, UUID: "GPU-8932aaaa-0000-4000-8000-000000000001"},
	{Index: 2, UUID: "GPU-11112222-0000-4000-8000-000000000002"},
	{Index: 3, UUID: "GPU-33334444-0000-4000-8000-000000000003"},
}

func TestMapRoles(t *testing.T) {
	t.Parallel()
	u := func(i int) string { return mapGPUs[i].UUID }
	cases := []struct {
		name  string
		cvd   string
		want  []string
		notes []string // substrings, one per expected note
	}{
		{"indices", "0,1", []string{u(0), u(1)}, nil},
		{"indices keep CUDA order", "3,1", []string{u(3), u(1)}, nil},
		{"spaces around entries", " 2 , 3 ", []string{u(2), u(3)}, nil},
		{"full UUIDs", u(2) + "," + u(0), []string{u(2), u(0)}, nil},
		{"unique prefix with GPU-", "GPU-1111,GPU-8932f", []string{u(2), u(0)}, nil},
		{"unique prefix without GPU-", "8932f9", []string{u(0)}, nil},
		// CUDA reads an all-digit entry as an index, so must we.
		{"all-digit UUID prefix is an index", "33334444", nil, []string{`entry "33334444" is not a GPU index here`}},
		{"upper-case UUID", strings.ToUpper(u(3)), []string{u(3)}, nil},
		{"mixed index and UUID", "1," + u(3), []string{u(1), u(3)}, nil},
		{"unset means no GPUs", "", nil, nil},
		{"invalid index hides the rest", "0,7,1", []string{u(0)}, []string{`entry "7" is not a GPU index here (4 GPUs); CUDA also ignores the 1 entry after it`}},
		{"invalid first entry hides all", "x,0,1", nil, []string{`entry "x" matches no GPU UUID; CUDA also ignores the 2 entries after it`}},
		{"ambiguous prefix", "GPU-8932", nil, []string{"is ambiguous: prefix of 2 GPU UUIDs"}},
		{"negative index", "-1", nil, []string{`entry "-1" is not a GPU index`}},
		{"empty entry", "0,,1", []string{u(0)}, []string{`entry "" is empty`}},
		{"MIG device", "MIG-4f2ba6f9-0000", nil, []string{"is a MIG device"}},
		{"duplicate", "0,0,1", []string{u(0), u(1)}, []string{"names " + u(0) + " twice"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := MapRoles(mapGPUs, []RoleGPUs{{Role: "decode", CudaVisibleDevices: c.cvd}})
			if got := m.RoleUUIDs["decode"]; !reflect.DeepEqual(got, c.want) {
				t.Errorf("RoleUUIDs = %v, want %v", got, c.want)
			}
			for _, uu := range c.want {
				if got := m.GPURoles[uu]; !reflect.DeepEqual(got, []string{"decode"}) {
					t.Errorf("GPURoles[%s] = %v, want [decode]", uu, got)
				}
			}
			if len(m.Notes) != len(c.notes) {
				t.Fatalf("notes = %q, want %d note(s) like %q", m.Notes, len(c.notes), c.notes)
			}
			for i, n := range c.notes {
				if !strings.Contains(m.Notes[i], n) || !strings.Contains(m.Notes[i], "role decode") {
					t.Errorf("note %q does not name the role and say %q", m.Notes[i], n)
				}
			}
		})
	}
}

// Indices are NVML's, which need not be the position in the provider's list.
func TestMapRolesIndexIsNVMLIndexNotPosition(t *testing.T) {
	t.Parallel()
	gpus := []GPUInfo{{Index: 1, UUID: "GPU-b"}, {Index: 0, UUID: "GPU-a"}}
	m := MapRoles(gpus, []RoleGPUs{{Role: "p", CudaVisibleDevices: "0"}})
	if got := m.RoleUUIDs["p"]; !reflect.DeepEqual(got, []string{"GPU-a"}) {
		t.Fatalf("RoleUUIDs = %v, want [GPU-a]", got)
	}
}

func TestMapRolesSharedGPUListsRolesInGivenOrder(t *testing.T) {
	t.Parallel()
	m := MapRoles(mapGPUs, []RoleGPUs{
		{Role: "prefill", CudaVisibleDevices: "0"},
		{Role: "encode", CudaVisibleDevices: mapGPUs[0].UUID},
		{Role: "decode", CudaVisibleDevices: "1"},
	})
	if got := m.GPURoles[mapGPUs[0].UUID]; !reflect.DeepEqual(got, []string{"prefill", "encode"}) {
		t.Fatalf("GPURoles[0] = %v", got)
	}
	if len(m.Notes) != 0 {
		t.Fatalf("unexpected notes %q", m.Notes)
	}
}

func TestMapRolesNoGPUs(t *testing.T) {
	t.Parallel()
	m := MapRoles(nil, []RoleGPUs{{Role: "d", CudaVisibleDevices: "0"}})
	if len(m.RoleUUIDs) != 0 || len(m.Notes) != 1 {
		t.Fatalf("got %+v; want no mapping and one note", m)
	}
}

func TestJoinAttributesProcessMemoryToRoles(t *testing.T) {
	t.Parallel()
	gpus := []GPUInfo{
		{Index: 1, UUID: "GPU-b", Processes: []GPUProc{{PID: 30, UsedB: 300}, {PID: 99, UsedB: 7}}},
		{Index: 0, UUID: "GPU-a", Processes: []GPUProc{{PID: 20, UsedB: 200}, {PID: 10, UsedB: 100}}},
	}
	m := MapRoles(gpus, []RoleGPUs{{Role: "prefill", CudaVisibleDevices: "0"}, {Role: "decode", CudaVisibleDevices: "1"}})
	pidRole := map[int]string{10: "prefill", 20: "prefill", 30: "decode", 31: "decode"}
	rows, mem := Join(gpus, m, pidRole)
	if want := map[string]uint64{"prefill": 300, "decode": 300}; !reflect.DeepEqual(mem, want) {
		t.Errorf("role memory = %v, want %v", mem, want)
	}
	if rows[0].UUID != "GPU-a" || rows[1].UUID != "GPU-b" {
		t.Fatalf("rows not ordered by index: %+v", rows)
	}
	if got := rows[0].Processes; got[0].PID != 10 || got[0].Role != "prefill" || got[1].Role != "prefill" {
		t.Errorf("GPU 0 processes = %+v", got)
	}
	// PID 99 is nobody's: shown, not attributed.
	if got := rows[1].Processes; got[0].Role != "decode" || got[1].PID != 99 || got[1].Role != "" {
		t.Errorf("GPU 1 processes = %+v", got)
	}
	if !reflect.DeepEqual(rows[0].Roles, []string{"prefill"}) || !reflect.DeepEqual(rows[1].Roles, []string{"decode"}) {
		t.Errorf("roles per GPU = %v, %v", rows[0].Roles, rows[1].Roles)
	}
	// Join must not alias the provider's slices.
	rows[0].Processes[0].PID = -1
	if gpus[1].Processes[1].PID != 10 {
		t.Error("Join aliased its input")
	}
}

// A process a role starts on a GPU outside its CUDA_VISIBLE_DEVICES still
// counts for it: attribution is by PID, the GPU list only says who should be there.
func TestJoinAttributionIgnoresGPUAssignment(t *testing.T) {
	t.Parallel()
	gpus := []GPUInfo{{Index: 0, UUID: "GPU-a", Processes: []GPUProc{{PID: 5, UsedB: 42}}}}
	_, mem := Join(gpus, Mapping{}, map[int]string{5: "decode"})
	if mem["decode"] != 42 {
		t.Fatalf("mem = %v", mem)
	}
}

func TestStrayProcessesAreUnattributedOnTheRolesGPUs(t *testing.T) {
	t.Parallel()
	gpus := []GPUInfo{
		{Index: 0, UUID: "GPU-a", Processes: []GPUProc{{PID: 10, UsedB: 1}, {PID: 66, UsedB: 9}}},
		{Index: 1, UUID: "GPU-b", Processes: []GPUProc{{PID: 77, UsedB: 5}}},
	}
	m := MapRoles(gpus, []RoleGPUs{{Role: "decode", CudaVisibleDevices: "0"}, {Role: "prefill", CudaVisibleDevices: "1"}})
	rows, _ := Join(gpus, m, map[int]string{10: "decode"})
	r := Readings{GPUs: rows}
	if got := r.StrayProcesses("decode"); !reflect.DeepEqual(got, []StrayProcess{{GPU: 0, UUID: "GPU-a", PID: 66, UsedB: 9}}) {
		t.Errorf("decode strays = %+v", got)
	}
	if got := r.StrayProcesses("prefill"); len(got) != 1 || got[0].PID != 77 {
		t.Errorf("prefill strays = %+v", got)
	}
	if got := r.StrayProcesses("encode"); got != nil {
		t.Errorf("unmapped role strays = %+v", got)
	}
}

package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestPhysicalGPUs(t *testing.T) {
	for _, c := range []struct {
		name, step, cvd string
		want            []string
	}{
		{"no device cgroups: the step's own indices", "2,3", "2,3", []string{"2", "3"}},
		{"ConstrainDevices: CUDA counts from 0 over the step's GPUs", "4,6", "0,1", []string{"4", "6"}},
		{"ConstrainDevices, CUDA order differs", "4,6", "1,0", []string{"6", "4"}},
		{"one GPU", "0", "0", []string{"0"}},
		{"older Slurm: no SLURM_STEP_GPUS", "", "1", []string{"1"}},
		{"no CUDA_VISIBLE_DEVICES", "5", "", []string{"5"}},
		{"no GPUs", "", "", nil},
		{"UUIDs are left as written", "0", "GPU-abc", []string{"GPU-abc"}},
		{"index past the step's GPUs: as written", "4", "0,1", []string{"0", "1"}},
	} {
		if got := PhysicalGPUs(c.step, c.cvd); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: PhysicalGPUs(%q, %q) = %v, want %v", c.name, c.step, c.cvd, got, c.want)
		}
	}
}

func TestParseTaskLine(t *testing.T) {
	for _, c := range []struct {
		line string
		want Task
		ok   bool
	}{
		{"tsd-step: node=n2 rank=1 step_gpus=4,6 cuda_visible_devices=0,1",
			Task{Node: "n2", Rank: 1, StepGPUs: "4,6", CudaVisibleDevices: "0,1", GPUs: []string{"4", "6"}}, true},
		{"0: tsd-step: node=n1 rank=0 step_gpus= cuda_visible_devices=",
			Task{Node: "n1", Rank: 0}, true},
		{"tsd-step: node= rank=0", Task{}, false},
		{"tsd-step: node=n1 rank=x", Task{}, false},
		{"INFO engine.py:402 headless server_args=...", Task{}, false},
	} {
		got, ok := ParseTaskLine(c.line)
		if ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseTaskLine(%q) = %+v %v, want %+v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// The shim's line, as sh prints it from a step's environment, is what
// ParseTaskLine reads; on several nodes the engine gets --node-rank.
func TestStepShim(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	env := append(os.Environ(), "SLURMD_NODENAME=n2", "SLURM_NODEID=1", "SLURM_STEP_GPUS=2,3", "CUDA_VISIBLE_DEVICES=2,3")
	for _, multi := range []bool{false, true} {
		argv := append(StepShim(multi), "echo", "engine", "--nnodes", "2")
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 {
			t.Fatalf("shim output %q", out)
		}
		task, ok := ParseTaskLine(lines[0])
		if !ok || task.Node != "n2" || task.Rank != 1 || !reflect.DeepEqual(task.GPUs, []string{"2", "3"}) {
			t.Errorf("task line %q: %+v %v", lines[0], task, ok)
		}
		want := "engine --nnodes 2"
		if multi {
			want += " --node-rank 1"
		}
		if lines[1] != want {
			t.Errorf("multi %v: engine argv %q, want %q", multi, lines[1], want)
		}
	}
}

func TestTaskLines(t *testing.T) {
	var l taskLines
	var got []Task
	// The mark split across reads, an overlong line, and a line without
	// its newline yet.
	for _, chunk := range []string{"log a\ntsd-st", "ep: node=n1 rank=0 step_gpus=0 cuda_visible_devices=0\n",
		strings.Repeat("x", 5000) + " tsd-step: node=n9 rank=0\n", "tsd-step: node=n2 rank=1"} {
		got = append(got, l.feed([]byte(chunk))...)
	}
	if len(got) != 1 || got[0].Node != "n1" {
		t.Fatalf("tasks %+v", got)
	}
	got = l.feed([]byte(" step_gpus=1 cuda_visible_devices=1\n"))
	if len(got) != 1 || got[0].Node != "n2" || got[0].Rank != 1 {
		t.Fatalf("tasks %+v", got)
	}
}

func TestStepInfoFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decode.slurm.json")
	info := StepInfo{Step: "9.3"}
	info.addTask(Task{Node: "n2", Rank: 1, GPUs: []string{"0"}})
	info.addTask(Task{Node: "n1", Rank: 0, GPUs: []string{"1", "0"}})
	info.addTask(Task{Node: "n2", Rank: 1, GPUs: []string{"1"}}) // a rank reports again: the latest counts
	if err := WriteStepInfo(path, info); err != nil {
		t.Fatal(err)
	}
	got, err := ReadStepInfo(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Step != "9.3" || !reflect.DeepEqual(got.GPUList(), []string{"n1:1", "n1:0", "n2:1"}) || !reflect.DeepEqual(got.Nodes(), []string{"n1", "n2"}) {
		t.Errorf("read back %+v: gpus %v nodes %v", got, got.GPUList(), got.Nodes())
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if _, err := ReadStepInfo(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("no error for a missing file")
	}
}

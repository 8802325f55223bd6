package slurm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// TaskMark starts the line the step shim prints on each task's node
// before it runs the engine: what Slurm gave that task. Only Slurm knows
// which GPUs a step got, and only inside the step (scontrol show step
// lists the count, not the devices), so the step says it itself.
const TaskMark = "tsd-step: "

// shimScript reports the task, then runs the engine. The names are
// lower case so the line does not read as tsd setting the variables.
const shimScript = `echo "` + TaskMark + `node=$SLURMD_NODENAME rank=$SLURM_NODEID step_gpus=$SLURM_STEP_GPUS cuda_visible_devices=$CUDA_VISIBLE_DEVICES"; exec "$@"`

// StepShim is what each task of a role's step runs in front of the engine
// argv: a POSIX shell that prints the TaskMark line, then execs the
// engine. On a step of several nodes it appends --node-rank with the
// task's node index in the step (SLURM_NODEID counts the step's nodes,
// from 0 on the first, where the role's --dist-init-addr is); --nnodes is
// in the engine argv already.
func StepShim(multiNode bool) []string {
	script := shimScript
	if multiNode {
		script += ` --node-rank "$SLURM_NODEID"`
	}
	return []string{"sh", "-c", script, "tsd-step"}
}

// Task is what one task of a step reported through the shim.
type Task struct {
	Node               string   `json:"node"`
	Rank               int      `json:"rank"` // node index in the step
	StepGPUs           string   `json:"step_gpus,omitempty"`
	CudaVisibleDevices string   `json:"cuda_visible_devices,omitempty"`
	GPUs               []string `json:"gpus"` // physical indices on Node (PhysicalGPUs)
}

// ParseTaskLine reads one TaskMark line (the mark may follow other text
// on the line, e.g. srun's label); ok is false for any other line.
func ParseTaskLine(line string) (Task, bool) {
	i := strings.Index(line, TaskMark)
	if i < 0 {
		return Task{}, false
	}
	t := Task{Rank: -1}
	for _, f := range strings.Fields(line[i+len(TaskMark):]) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "node":
			t.Node = v
		case "rank":
			if n, err := strconv.Atoi(v); err == nil {
				t.Rank = n
			}
		case "step_gpus":
			t.StepGPUs = v
		case "cuda_visible_devices":
			t.CudaVisibleDevices = v
		}
	}
	if t.Node == "" || t.Rank < 0 {
		return Task{}, false
	}
	t.GPUs = PhysicalGPUs(t.StepGPUs, t.CudaVisibleDevices)
	return t, true
}

// PhysicalGPUs maps a step's CUDA_VISIBLE_DEVICES to the node's physical
// GPU indices, in CUDA's order. SLURM_STEP_GPUS holds the indices of the
// node's GPUs Slurm gave the step. Without device cgroups the step sees
// every GPU and Slurm sets CUDA_VISIBLE_DEVICES to those same indices;
// with ConstrainDevices the step sees only its GPUs, numbered from 0, so
// CUDA device k is the k-th of SLURM_STEP_GPUS (Slurm lists both in
// ascending order). Without SLURM_STEP_GPUS (older Slurm) the visible
// devices are all there is.
func PhysicalGPUs(stepGPUs, visible string) []string {
	split := func(s string) []string {
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	step, cvd := split(stepGPUs), split(visible)
	if len(cvd) == 0 {
		return step
	}
	if len(step) == 0 {
		return cvd
	}
	inStep := map[string]bool{}
	for _, g := range step {
		inStep[g] = true
	}
	same := true
	for _, c := range cvd {
		same = same && inStep[c]
	}
	if same {
		return cvd
	}
	out := make([]string, 0, len(cvd))
	for _, c := range cvd {
		k, err := strconv.Atoi(c)
		if err != nil || k < 0 || k >= len(step) {
			return cvd // not an index into the step's GPUs: leave it as Slurm wrote it
		}
		out = append(out, step[k])
	}
	return out
}

// StepInfo is what tsd knows of a role's current step: its id and what
// each task reported. `tsd _srun` writes it (WriteStepInfo) for the
// daemon, which shows it for the role.
type StepInfo struct {
	Step  string `json:"step"` // JOB.STEP, "" until squeue lists it
	Tasks []Task `json:"tasks"`
}

// GPUList is every task's GPUs as NODE:INDEX, in node-rank order.
func (s StepInfo) GPUList() []string {
	tasks := append([]Task(nil), s.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Rank < tasks[j].Rank })
	var out []string
	for _, t := range tasks {
		for _, g := range t.GPUs {
			out = append(out, t.Node+":"+g)
		}
	}
	return out
}

// Nodes is the tasks' nodes in node-rank order.
func (s StepInfo) Nodes() []string {
	tasks := append([]Task(nil), s.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Rank < tasks[j].Rank })
	out := make([]string, 0, len(tasks))
	for _, t := range tasks {
		out = append(out, t.Node)
	}
	return out
}

// addTask records t, replacing an earlier report of the same rank.
func (s *StepInfo) addTask(t Task) {
	for i := range s.Tasks {
		if s.Tasks[i].Rank == t.Rank {
			s.Tasks[i] = t
			return
		}
	}
	s.Tasks = append(s.Tasks, t)
}

// WriteStepInfo replaces path with info, atomically (a reader never sees
// half a file).
func WriteStepInfo(path string, info StepInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("encode step info: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write step info: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write step info %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write step info %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write step info %s: %w", path, err)
	}
	return nil
}

// ReadStepInfo reads what WriteStepInfo wrote.
func ReadStepInfo(path string) (StepInfo, error) {
	var info StepInfo
	b, err := os.ReadFile(path)
	if err != nil {
		return info, fmt.Errorf("read step info: %w", err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("read step info %s: %w", path, err)
	}
	return info, nil
}

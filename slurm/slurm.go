// Package slurm runs tsd's role instances as Slurm job steps: it reads the
// allocation tsd runs in, builds each step's srun command line, finds a
// step's id by its name, and cancels or signals steps. The text-handling
// parts are pure functions with table tests; the few commands it runs
// (scontrol, squeue, scancel) go through a Runner so tests can fake them.
package slurm

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// Job is the allocation tsd runs in.
type Job struct {
	ID    string   // SLURM_JOB_ID
	Nodes []string // node names in the job's order (scontrol show hostnames)
	Addrs []string // each node's address (NodeAddr), same order
	// GPUsPerNode is the GPU count each node of the job holds (0: unknown).
	GPUsPerNode int
	// firstHost is the first node's NodeHostName ("" when unknown).
	firstHost string
}

// Env is the part of a step's environment tsd reads to find its job.
type Env struct {
	JobID    string // SLURM_JOB_ID (or SLURM_JOBID)
	NodeList string // SLURM_JOB_NODELIST (or SLURM_NODELIST)
	GPUs     string // SLURM_GPUS_ON_NODE
}

// ReadEnv reads the allocation variables through getenv.
func ReadEnv(getenv func(string) string) Env {
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := getenv(k); v != "" {
				return v
			}
		}
		return ""
	}
	return Env{
		JobID:    first("SLURM_JOB_ID", "SLURM_JOBID"),
		NodeList: first("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
		GPUs:     first("SLURM_GPUS_ON_NODE"),
	}
}

// ExpandNodelist expands a Slurm hostlist expression ("n[1-3,7],gpu-a01")
// into node names. It is the fallback for when scontrol is not on PATH;
// scontrol's own expansion is preferred because it knows every form.
func ExpandNodelist(s string) ([]string, error) {
	var out []string
	for _, part := range splitTop(s) {
		if part == "" {
			continue
		}
		names, err := expandOne(part)
		if err != nil {
			return nil, fmt.Errorf("expand nodelist %q: %w", s, err)
		}
		out = append(out, names...)
		if len(out) > maxNodes {
			return nil, fmt.Errorf("expand nodelist: more than %d nodes", maxNodes)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("expand nodelist %q: no node names", s)
	}
	return out, nil
}

// maxNodes bounds an expansion: no job has more nodes, and a hostile
// list like a[1-99999]b[1-99999] must not eat the memory.
const maxNodes = 100000

// splitTop splits at commas outside brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

// expandOne expands one name with zero or more bracket groups, left to
// right (n[1-2]-[a] style groups multiply).
func expandOne(p string) ([]string, error) {
	open := strings.IndexByte(p, '[')
	if open < 0 {
		if strings.ContainsAny(p, "]") {
			return nil, fmt.Errorf("%q: unbalanced ]", p)
		}
		return []string{p}, nil
	}
	end := strings.IndexByte(p[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: unbalanced [", p)
	}
	end += open
	prefix, body, rest := p[:open], p[open+1:end], p[end+1:]
	if strings.ContainsAny(prefix, "]") {
		return nil, fmt.Errorf("%q: unbalanced ]", p)
	}
	tails, err := expandOne(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, found := strings.Cut(r, "-")
		if !found {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a > b || lo == "" {
			return nil, fmt.Errorf("%q: bad range %q", p, r)
		}
		if b-a > 100000 {
			return nil, fmt.Errorf("%q: range %q is too large", p, r)
		}
		width := 0
		if len(lo) > 1 && lo[0] == '0' {
			width = len(lo) // zero padding is kept: gpu[01-03]
		}
		for n := a; n <= b; n++ {
			num := strconv.Itoa(n)
			for len(num) < width {
				num = "0" + num
			}
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
			if len(out) > maxNodes {
				return nil, fmt.Errorf("%q: more than %d nodes", p, maxNodes)
			}
		}
	}
	return out, nil
}

// ParseHostnames reads `scontrol show hostnames` output: one name a line.
func ParseHostnames(out string) []string {
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			names = append(names, l)
		}
	}
	return names
}

// ParseNodeAddr finds NodeAddr= in `scontrol show node -o NAME` output;
// "" when it is absent.
func ParseNodeAddr(out string) string { return nodeField(out, "NodeAddr=") }

// ParseNodeHostname finds NodeHostName= in `scontrol show node -o NAME`
// output; "" when it is absent.
func ParseNodeHostname(out string) string { return nodeField(out, "NodeHostName=") }

func nodeField(out, key string) string {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, key); ok {
			return v
		}
	}
	return ""
}

// OnFirstNode reports whether host (os.Hostname) is the job's first node,
// where tsd must run: its gateway binds there and every worker dials it.
// True when it cannot tell (no node names).
func OnFirstNode(job *Job, host string) bool {
	if job == nil || len(job.Nodes) == 0 || host == "" {
		return true
	}
	short := func(h string) string { h, _, _ = strings.Cut(h, "."); return h }
	for _, n := range []string{job.Nodes[0], job.firstHost} {
		if n != "" && (n == host || short(n) == short(host)) {
			return true
		}
	}
	return false
}

// Step is one job step as squeue lists it.
type Step struct {
	ID   string // JOBID.STEPID
	Job  string
	Num  int // the step number (-1 for batch/extern steps)
	Name string
}

// ParseSteps reads `squeue --steps -h -o '%i %j'` output. Lines that are
// not "JOB.STEP NAME" are skipped; batch and extern steps get Num -1.
func ParseSteps(out string) []Step {
	var steps []Step
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		job, num, ok := strings.Cut(f[0], ".")
		if !ok || job == "" {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil {
			n = -1
		}
		steps = append(steps, Step{ID: f[0], Job: job, Num: n, Name: strings.Join(f[1:], " ")})
	}
	return steps
}

// FindStep is the newest step of job with the given name: a restarted
// role's new step has a higher number than the one it replaces.
func FindStep(steps []Step, job, name string) (Step, bool) {
	var best Step
	found := false
	for _, s := range steps {
		if s.Job == job && s.Name == name && s.Num >= 0 && (!found || s.Num > best.Num) {
			best, found = s, true
		}
	}
	return best, found
}

// StepSpec is what one role instance's step needs.
type StepSpec struct {
	JobID string
	Name  string // --job-name: squeue --steps shows it
	// Nodes is the --nodelist: one node, or every node of a role that
	// spans several (one task on each); empty lets Slurm pick one.
	Nodes []string
	GPUs  int    // --gres gpu:N on each node; 0 asks for none
	Time  string // --time for the step; "" inherits the job's
}

// StepName is the job-step name of a role instance: the deployment and
// the role, so `squeue --steps` tells the roles apart.
func StepName(deployment, role string) string {
	return "tsd." + deployment + "." + role
}

// SrunArgv is the srun command line that runs argv as one step: one task
// on each of its nodes, only the resources it asks for (--exact), sharing
// the nodes with the other roles' steps (--overlap), the whole step killed
// if a task fails (--kill-on-bad-exit). Each task starts through the step
// shim (StepShim), which reports what Slurm gave it and, on a step of
// several nodes, appends the task's --node-rank.
func SrunArgv(s StepSpec, argv []string) []string {
	n := strconv.Itoa(max(1, len(s.Nodes)))
	out := []string{"srun", "--jobid", s.JobID, "--job-name", s.Name, "--exact", "--overlap",
		"--nodes", n, "--ntasks", n}
	if len(s.Nodes) > 1 {
		out = append(out, "--ntasks-per-node", "1")
	}
	out = append(out, "--kill-on-bad-exit=1")
	if s.GPUs > 0 {
		out = append(out, "--gres", "gpu:"+strconv.Itoa(s.GPUs))
	}
	if len(s.Nodes) > 0 {
		out = append(out, "--nodelist", strings.Join(s.Nodes, ","))
	}
	if s.Time != "" {
		out = append(out, "--time", s.Time)
	}
	out = append(out, "--")
	out = append(out, StepShim(len(s.Nodes) > 1)...)
	return append(out, argv...)
}

// ScancelArgv signals a step (signal "" cancels it: Slurm's own TERM,
// then KILL after its KillWait).
func ScancelArgv(stepID, signal string) []string {
	if signal == "" {
		return []string{"scancel", stepID}
	}
	return []string{"scancel", "--signal=" + signal, stepID}
}

// SqueueStepsArgv lists a job's steps in the form ParseSteps reads.
func SqueueStepsArgv(job string) []string {
	return []string{"squeue", "--steps", "-h", "-j", job, "-o", "%i %j"}
}

// Runner runs one command and returns its standard output.
type Runner func(ctx context.Context, argv []string) (string, error)

// Exec is the Runner that runs real commands.
func Exec(ctx context.Context, argv []string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return string(out), fmt.Errorf("run %s: %w %s", strings.Join(argv, " "), err, msg)
	}
	return string(out), nil
}

// Detect reads the allocation from env and completes it through run:
// the node list expanded by `scontrol show hostnames` (ExpandNodelist when
// scontrol fails) and each node's address from `scontrol show node`
// (the name itself when none is listed).
func Detect(ctx context.Context, env Env, run Runner) (*Job, error) {
	if env.JobID == "" {
		return nil, fmt.Errorf("--launcher slurm: SLURM_JOB_ID is not set; run tsd inside an allocation (salloc, sbatch, or `tsd export slurm`)")
	}
	if env.NodeList == "" {
		return nil, fmt.Errorf("--launcher slurm: SLURM_JOB_NODELIST is not set for job %s", env.JobID)
	}
	job := &Job{ID: env.JobID}
	if out, err := run(ctx, []string{"scontrol", "show", "hostnames", env.NodeList}); err == nil && len(ParseHostnames(out)) > 0 {
		job.Nodes = ParseHostnames(out)
	} else {
		nodes, perr := ExpandNodelist(env.NodeList)
		if perr != nil {
			return nil, fmt.Errorf("--launcher slurm: %w", perr)
		}
		job.Nodes = nodes
	}
	for i, n := range job.Nodes {
		addr := n
		if out, err := run(ctx, []string{"scontrol", "show", "node", "-o", n}); err == nil {
			if a := ParseNodeAddr(out); a != "" {
				addr = a
			}
			if i == 0 {
				job.firstHost = ParseNodeHostname(out)
			}
		}
		job.Addrs = append(job.Addrs, addr)
	}
	if g, err := strconv.Atoi(strings.TrimSpace(env.GPUs)); err == nil && g > 0 {
		job.GPUsPerNode = g
	}
	return job, nil
}

// Place puts each role instance on nodes of the job. gpus[i] is the GPU
// count instance i needs on each of its nodes; fixed[i] the node indices
// its role names (node: or nodes:), or nil to let Place pack it onto one
// node: first fit by GPU count, in profile order, when the per-node GPU
// count is known; the first node otherwise. It returns the node indices
// of each instance (fixed ones as given).
func Place(gpus []int, fixed [][]int, nodes, perNode int) ([][]int, error) {
	used := make([]int, nodes)
	out := make([][]int, len(gpus))
	for i, ns := range fixed {
		for _, n := range ns {
			if n < 0 || n >= nodes {
				return nil, fmt.Errorf("node %d is out of range: the job has %d node(s) (0-%d)", n, nodes, nodes-1)
			}
			used[n] += gpus[i]
		}
		if len(ns) > 0 {
			out[i] = append([]int(nil), ns...)
		}
	}
	if perNode > 0 {
		// srun would wait for GPUs the job does not have, forever: a
		// step over capacity is an error now, not a hang later.
		for k, u := range used {
			if u > perNode {
				return nil, fmt.Errorf("the roles placed on node %d need %d GPU(s); the job has %d per node", k, u, perNode)
			}
		}
	}
	for i, ns := range fixed {
		if len(ns) > 0 {
			continue
		}
		out[i] = []int{0}
		if perNode <= 0 {
			continue
		}
		placed := false
		for k := 0; k < nodes; k++ {
			if used[k]+gpus[i] <= perNode {
				out[i], placed = []int{k}, true
				used[k] += gpus[i]
				break
			}
		}
		if !placed {
			return nil, fmt.Errorf("instance %d needs %d GPU(s) and no node of the job has that many left (%d per node)", i, gpus[i], perNode)
		}
	}
	return out, nil
}

// NodesNeeded is how many nodes and GPUs per node a batch job needs for
// instances placed at the given node indices (gpus[i] on each node of
// placed[i]).
func NodesNeeded(gpus []int, placed [][]int) (nodes, perNode int) {
	per := map[int]int{}
	for i, ns := range placed {
		for _, n := range ns {
			per[n] += gpus[i]
			nodes = max(nodes, n+1)
		}
	}
	keys := make([]int, 0, len(per))
	for k := range per {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		perNode = max(perNode, per[k])
	}
	return nodes, perNode
}

// JobEnded reads `squeue -h -j JOB -o %T` (out, and err from running it):
// true once the job is no longer running, or Slurm no longer knows it.
// Other errors (the controller briefly unreachable) are not an end.
func JobEnded(out string, err error) bool {
	if err != nil {
		return strings.Contains(err.Error(), "Invalid job id")
	}
	st := strings.TrimSpace(out)
	switch st {
	case "RUNNING", "CONFIGURING", "PENDING", "SUSPENDED":
		return false
	}
	return true // COMPLETING, CANCELLED, TIMEOUT, NODE_FAIL, …, or gone ("")
}

// JobStateArgv asks squeue for a job's state, as JobEnded reads it.
func JobStateArgv(job string) []string {
	return []string{"squeue", "-h", "-j", job, "-o", "%T"}
}

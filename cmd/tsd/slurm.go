package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/slurm"
	"github.com/tsd-project/tsd/snapshot"
)

// Launchers `--launcher` accepts.
const (
	launcherLocal = "local"
	launcherSlurm = "slurm"
)

// hostFacts are the planning facts for --launcher: this host alone, or the
// Slurm allocation tsd runs in (SLURM_JOB_ID, SLURM_JOB_NODELIST). With
// placeholder true and no allocation, plan against a stand-in job (JOBID,
// node0…) so `tsd plan --launcher slurm` shows the srun lines anywhere.
func hostFacts(launcher, profile string, base profiles.HostFacts, placeholder bool) (profiles.HostFacts, error) {
	if launcher != launcherSlurm {
		return base, nil
	}
	env := slurm.ReadEnv(os.Getenv)
	if env.JobID == "" && placeholder {
		base.Slurm = placeholderJob(profile)
		return base, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := slurm.Detect(ctx, env, slurm.Exec)
	if err != nil {
		return base, err
	}
	if host, err := os.Hostname(); err == nil && !slurm.OnFirstNode(job, host) {
		// The plan puts the gateway on the first node; from anywhere else
		// no engine could reach it.
		fmt.Fprintf(os.Stderr, "tsd: warning: this host (%s) is not job %s's first node %s, where the gateway and every worker are planned; run tsd there (sbatch, or srun --overlap -N1 -w %s)\n", host, job.ID, job.Nodes[0], job.Nodes[0])
	}
	base.Slurm = job
	return base, nil
}

// roleNodes are the node indices a role names (node: or nodes:); nil
// when the planner packs it.
func roleNodes(r *profiles.Role) []int {
	if r.Node >= 0 {
		return []int{r.Node}
	}
	return r.Nodes
}

// placeholderJob has as many nodes as the profile's node: and nodes: keys
// name.
func placeholderJob(profile string) *slurm.Job {
	n := 1
	if p, errs := profiles.Load(profile); p != nil && len(errs) == 0 {
		for _, r := range p.Roles {
			for _, k := range roleNodes(&r) {
				n = max(n, k+1)
			}
		}
	}
	job := &slurm.Job{ID: "JOBID"}
	for i := 0; i < n; i++ {
		job.Nodes = append(job.Nodes, "node"+strconv.Itoa(i))
		job.Addrs = append(job.Addrs, "NODE"+strconv.Itoa(i)+"_ADDR")
	}
	return job
}

// srunCmd is the srun side of a Slurm role: it runs under the guardian in
// place of the engine (supervisor/launcher.go) and stops the step through
// scancel (slurm.RunStep).
type srunCmd struct {
	Job   string        `required:"" help:"Slurm job id."`
	Name  string        `required:"" help:"The step's --job-name."`
	Grace time.Duration `default:"30s" help:"scancel --signal=TERM, then KILL after this long."`
	Info  string        `help:"Keep the step's id and what each task got from Slurm (GPUs) in this JSON file."`
	Argv  []string      `arg:"" passthrough:"" help:"srun command line."`
}

func (c srunCmd) Run() error {
	argv := c.Argv
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	os.Exit(slurm.RunStep(slurm.StepConfig{JobID: c.Job, Name: c.Name, Srun: argv, Grace: c.Grace, Info: c.Info}))
	return nil
}

// exportCmd groups the `tsd export` formats.
type exportCmd struct {
	Slurm exportSlurmCmd `cmd:"" help:"Write a Slurm batch script that runs the profile across the job's nodes."`
}

type exportSlurmCmd struct {
	Profile string `arg:"" help:"Profile YAML file."`
	Output  string `short:"o" help:"Write the script here instead of stdout."`
	TSD     string `name:"tsd" help:"tsd binary the job runs (default: this one)."`
}

func (c exportSlurmCmd) Run() error {
	p, errs := profiles.Load(c.Profile)
	if len(errs) > 0 {
		return profileErrors(errs)
	}
	exe := c.TSD
	if exe == "" {
		if e, err := os.Executable(); err == nil {
			exe = e
		} else {
			exe = "tsd"
		}
	}
	var w io.Writer = os.Stdout
	if c.Output != "" {
		f, err := os.Create(c.Output)
		if err != nil {
			return fmt.Errorf("export slurm: %w", err)
		}
		defer f.Close()
		w = f
	}
	script, err := batchScript(p, exe)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, script); err != nil {
		return fmt.Errorf("export slurm: write script: %w", err)
	}
	if c.Output != "" {
		if err := os.Chmod(c.Output, 0o755); err != nil {
			return fmt.Errorf("export slurm: %w", err)
		}
	}
	return nil
}

// batchScript is the sbatch script for a profile: as many nodes as its
// node: and nodes: keys name (one when none does) and, per node, the most
// GPUs any node's roles need, so every placement fits. The job starts tsd
// detached on its first node, says where to attach, and lasts as long as
// the deployment does.
func batchScript(p *profiles.Profile, exe string) (string, error) {
	var gpus []int
	var fixed [][]int
	nodes := 1
	for _, r := range p.Roles {
		ns := roleNodes(&r)
		for k := 0; k < r.Replicas; k++ {
			gpus = append(gpus, r.TP*r.DP/max(1, len(ns)))
			fixed = append(fixed, ns)
			for _, n := range ns {
				nodes = max(nodes, n+1)
			}
		}
	}
	placed, err := slurm.Place(gpus, fixed, nodes, 0)
	if err != nil {
		return "", fmt.Errorf("export slurm %s: %w", p.Path, err)
	}
	_, perNode := slurm.NodesNeeded(gpus, placed)
	abs := p.Abs
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	fmt.Fprintf(&b, "# Written by `tsd export slurm %s`: runs the profile as one Slurm job,\n", filepath.Base(p.Path))
	b.WriteString("# tsd and its gateway on the first node, every role a job step.\n")
	fmt.Fprintf(&b, "#SBATCH --job-name=tsd-%s\n", p.Name)
	fmt.Fprintf(&b, "#SBATCH --nodes=%d\n", nodes)
	fmt.Fprintf(&b, "#SBATCH --ntasks-per-node=%d\n", max(1, len(gpus)))
	if perNode > 0 {
		fmt.Fprintf(&b, "#SBATCH --gres=gpu:%d\n", perNode)
	}
	fmt.Fprintf(&b, "#SBATCH --time=%s\n", p.Slurm.Time)
	if p.Slurm.Partition != "" {
		fmt.Fprintf(&b, "#SBATCH --partition=%s\n", p.Slurm.Partition)
	}
	if p.Slurm.Account != "" {
		fmt.Fprintf(&b, "#SBATCH --account=%s\n", p.Slurm.Account)
	}
	fmt.Fprintf(&b, "#SBATCH --output=tsd-%s-%%j.out\n", p.Name)
	b.WriteString("set -euo pipefail\n")
	b.WriteString("echo \"tsd: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST; gateway and control socket on $(hostname)\"\n")
	q, qp := profiles.ShellQuote(exe), profiles.ShellQuote(abs)
	// tsd up -d returns once every role is ready, or exits 1 naming the
	// role that failed (set -e then ends the job).
	fmt.Fprintf(&b, "%s up -d --launcher slurm %s\n", q, qp)
	b.WriteString("echo \"tsd: ready; attach with: ssh $(hostname) " + q + " attach " + qp + " (or: " + q + " status " + qp + ")\"\n")
	// The job lasts as long as the deployment: tsd status exits 3 once
	// none runs (tsd stop). The job's end (scancel, --time) stops the
	// deployment: the daemon watches the job (watchSlurmJob).
	b.WriteString("while :; do\n\trc=0\n")
	fmt.Fprintf(&b, "\t%s status %s >/dev/null 2>&1 || rc=$?\n", q, qp)
	b.WriteString("\t[[ $rc == 3 ]] && break\n\tsleep 15\ndone\n")
	b.WriteString("echo \"tsd: the deployment stopped; the job ends\"\n")
	return b.String(), nil
}

// watchSlurmJob stops the deployment when its Slurm job ends (scancel,
// --time, node failure): its steps are gone and no new step can start,
// so restarting them would only burn the budget. Slurm has no job-end
// event for a process outside the job, so squeue is asked every few
// seconds.
func watchSlurmJob(ctx context.Context, job string, stop func()) {
	defer func() { _ = recover() }() // never take the daemon down
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := slurm.Exec(qctx, slurm.JobStateArgv(job))
		cancel()
		if ctx.Err() == nil && slurm.JobEnded(out, err) {
			fmt.Fprintf(os.Stderr, "tsd: Slurm job %s ended (%s): stopping every role\n", job, strings.TrimSpace(out))
			stop()
			return
		}
	}
}

// noTelemetryRemote labels the GPU and process columns of a role whose
// step runs on another node than tsd: this node's NVML and /proc know
// nothing of it, and showing their numbers would be showing wrong ones.
const noTelemetryRemote = "remote, no telemetry"

// slurmSteps keeps what each Slurm role's `tsd _srun` last wrote of its
// step (slurm.StepInfo in RolePlan.SlurmInfo). One goroutine (run)
// reads the files; the publisher reads the latest map it stored.
type slurmSteps struct {
	files  map[string]string // role → info file
	latest atomic.Pointer[map[string]slurm.StepInfo]
}

func newSlurmSteps(plan *profiles.Plan) *slurmSteps {
	s := &slurmSteps{files: map[string]string{}}
	for _, r := range plan.Roles {
		if r.Launcher == profiles.LauncherSlurm && r.SlurmInfo != "" {
			s.files[r.Name] = r.SlurmInfo
		}
	}
	return s
}

// run rereads the info files every second until ctx ends: a step's id and
// GPUs change only when the role starts a new step.
func (s *slurmSteps) run(ctx context.Context) {
	defer func() { _ = recover() }() // never take the daemon down
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		m := make(map[string]slurm.StepInfo, len(s.files))
		for role, path := range s.files {
			if info, err := slurm.ReadStepInfo(path); err == nil {
				m[role] = info
			}
		}
		s.latest.Store(&m)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// get is the latest map run stored (nil before the first read).
func (s *slurmSteps) get() map[string]slurm.StepInfo {
	if s == nil {
		return nil
	}
	if m := s.latest.Load(); m != nil {
		return *m
	}
	return nil
}

// slurmRoleView fills a Slurm role's status from its plan and its step's
// info: the step, its nodes, the GPUs Slurm gave it (NODE:INDEX), and the
// remote label when a node of it is not tsd's. It returns the devices for
// this node's telemetry: the step's physical GPUs when the whole step runs
// on tsd's node (Slurm's GPU index is the node's device index), "" otherwise.
func slurmRoleView(rp *profiles.RolePlan, info slurm.StepInfo, have bool, r *snapshot.RoleStatus) string {
	r.Nodes = rp.Nodes
	if len(r.Nodes) == 0 && rp.Node != "" {
		r.Nodes = []string{rp.Node}
	}
	if rp.NodeRemote {
		r.NoTelemetry = noTelemetryRemote
	}
	if !have || r.PID == 0 {
		return "" // not running: the file is the last step's
	}
	r.SlurmStep = info.Step
	if g := info.GPUList(); len(g) > 0 {
		r.SlurmGPUs = g
	}
	if rp.NodeRemote || len(info.Tasks) == 0 {
		return ""
	}
	var gpus []string
	for _, t := range info.Tasks {
		if t.Node != rp.Node {
			return ""
		}
		gpus = append(gpus, t.GPUs...)
	}
	return strings.Join(gpus, ",")
}

// slurmWhere names the node(s) of a Slurm role for `tsd plan`: its node,
// or every node of a role that spans several, one task on each (its
// address is the first's, where node rank 0 and its dist-init are).
func slurmWhere(r *profiles.RolePlan) string {
	if len(r.Nodes) > 1 {
		return strings.Join(r.Nodes, ",") + ", one task per node, node rank 0 on " + r.Node
	}
	return r.Node
}

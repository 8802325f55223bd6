package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/slurm"
	"github.com/tsd-project/tsd/snapshot"
)

var seedSlurm = filepath.Join("..", "..", "profiles", "examples", "seed-pd-slurm.yaml")

// `tsd plan --launcher slurm` prints each role's srun line, its node and
// Slurm's GPU count; outside an allocation a stand-in job names them.
func TestPlanSlurmPrintsSrun(t *testing.T) {
	facts := testFacts()
	facts.Slurm = placeholderJob(seedSlurm)
	var out, errOut bytes.Buffer
	if err := (planCmd{Profile: seedSlurm}).run(&out, &errOut, facts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"role prefill (prefill, gres gpu:2) a step of Slurm job JOBID on node0 (NODE0_ADDR)",
		"role decode (decode, gres gpu:2) a step of Slurm job JOBID on node1 (NODE1_ADDR)",
		"srun --jobid JOBID --job-name tsd.seed-pd.decode --exact --overlap --nodes 1 --ntasks 1 --kill-on-bad-exit=1 --gres gpu:2 --nodelist node1 -- sh -c ",
		"' tsd-step ts serve --headless",
		"--dist-init-addr NODE1_ADDR:13580 --data-parallel-address NODE0_ADDR",
		"worker:     tcp://NODE0_ADDR:",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "CUDA_VISIBLE_DEVICES=") {
		t.Errorf("slurm plan sets CUDA_VISIBLE_DEVICES:\n%s", out.String())
	}
}

func TestHostFactsSlurmOutsideJob(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "")
	t.Setenv("SLURM_JOBID", "")
	if _, err := hostFacts(launcherSlurm, seedSlurm, testFacts(), false); err == nil || !strings.Contains(err.Error(), "SLURM_JOB_ID is not set") {
		t.Fatalf("tsd up --launcher slurm outside a job: %v", err)
	}
	f, err := hostFacts(launcherSlurm, seedSlurm, testFacts(), true)
	if err != nil || f.Slurm == nil || len(f.Slurm.Nodes) != 2 {
		t.Fatalf("plan outside a job: %+v %v", f.Slurm, err)
	}
	if f, _ := hostFacts(launcherLocal, seedSlurm, testFacts(), true); f.Slurm != nil {
		t.Fatal("local launcher got a Slurm job")
	}
}

func TestBatchScript(t *testing.T) {
	p, errs := profiles.Load(seedSlurm)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got, err := batchScript(p, "/opt/tsd/bin/tsd")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#!/bin/bash\n",
		"#SBATCH --job-name=tsd-seed-pd\n",
		"#SBATCH --nodes=2\n",
		"#SBATCH --gres=gpu:2\n",
		"#SBATCH --time=4:00:00\n",
		"/opt/tsd/bin/tsd up -d --launcher slurm " + p.Abs + "\n",
		"attach with: ssh $(hostname) /opt/tsd/bin/tsd attach " + p.Abs,
		"\t/opt/tsd/bin/tsd status " + p.Abs + " >/dev/null 2>&1 || rc=$?\n",
		"[[ $rc == 3 ]] && break",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("script lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "--partition") || strings.Contains(got, "--account") {
		t.Errorf("unset partition/account written:\n%s", got)
	}
	// What the script asks for must hold what the plan places.
	nodes, per := slurm.NodesNeeded([]int{2, 2}, [][]int{{0}, {1}})
	if nodes != 2 || per != 2 {
		t.Fatal(nodes, per)
	}
}

// A role spanning nodes: the batch job and the stand-in job have every
// node it names, and each node the GPUs of its share.
func TestBatchScriptNodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	y := "model: m\nroles:\n  - {name: prefill, gpus: [0, 1, 2, 3], tp: 4, nodes: [1, 2]}\n  - {name: decode, gpus: [0], node: 0}\n"
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	p, errs := profiles.Load(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got, err := batchScript(p, "tsd")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#SBATCH --nodes=3\n", "#SBATCH --gres=gpu:2\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("script lacks %q:\n%s", want, got)
		}
	}
	job := placeholderJob(path)
	if len(job.Nodes) != 3 {
		t.Errorf("stand-in job %v, want 3 nodes", job.Nodes)
	}
	// tsd plan names every node of the spanning role.
	facts := testFacts()
	facts.Slurm = job
	var out, errOut bytes.Buffer
	if err := (planCmd{Profile: path}).run(&out, &errOut, facts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"role prefill (prefill, gres gpu:2) a step of Slurm job JOBID on node1,node2, one task per node, node rank 0 on node1 (NODE1_ADDR)",
		"--nodes 2 --ntasks 2 --ntasks-per-node 1 --kill-on-bad-exit=1 --gres gpu:2 --nodelist node1,node2 -- sh -c ",
		"--nnodes 2\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, out.String())
		}
	}
}

// What the dashboard and `tsd status` show of a Slurm role: Slurm's GPUs
// as NODE:INDEX once the step reported them, the remote label for a step
// on another node (and no devices for this node's telemetry), this node's
// physical GPUs for telemetry only when the whole step runs here.
func TestSlurmRoleView(t *testing.T) {
	local := &profiles.RolePlan{Name: "prefill", Launcher: profiles.LauncherSlurm, Node: "n1"}
	remote := &profiles.RolePlan{Name: "decode", Launcher: profiles.LauncherSlurm, Node: "n2", NodeRemote: true}
	span := &profiles.RolePlan{Name: "big", Launcher: profiles.LauncherSlurm, Node: "n1", Nodes: []string{"n1", "n2"}, NodeRemote: true}
	task := func(node string, rank int, gpus ...string) slurm.Task {
		return slurm.Task{Node: node, Rank: rank, GPUs: gpus}
	}
	for _, c := range []struct {
		name      string
		rp        *profiles.RolePlan
		info      slurm.StepInfo
		have      bool
		pid       int
		wantCVD   string
		wantGPUs  []string
		wantNodes []string
		wantStep  string
		wantLabel string
	}{
		{"local step", local, slurm.StepInfo{Step: "5.0", Tasks: []slurm.Task{task("n1", 0, "1", "0")}}, true, 10,
			"1,0", []string{"n1:1", "n1:0"}, []string{"n1"}, "5.0", ""},
		{"remote step", remote, slurm.StepInfo{Step: "5.1", Tasks: []slurm.Task{task("n2", 0, "0")}}, true, 11,
			"", []string{"n2:0"}, []string{"n2"}, "5.1", noTelemetryRemote},
		{"spanning step", span, slurm.StepInfo{Step: "5.2", Tasks: []slurm.Task{task("n2", 1, "0"), task("n1", 0, "1")}}, true, 12,
			"", []string{"n1:1", "n2:0"}, []string{"n1", "n2"}, "5.2", noTelemetryRemote},
		{"step not listed yet", local, slurm.StepInfo{}, true, 10, "", nil, []string{"n1"}, "", ""},
		{"no info file yet", remote, slurm.StepInfo{}, false, 11, "", nil, []string{"n2"}, "", noTelemetryRemote},
		{"stopped: the file is the last step's", remote, slurm.StepInfo{Step: "5.1", Tasks: []slurm.Task{task("n2", 0, "0")}}, true, 0,
			"", nil, []string{"n2"}, "", noTelemetryRemote},
	} {
		r := snapshot.RoleStatus{Name: c.rp.Name, PID: c.pid}
		cvd := slurmRoleView(c.rp, c.info, c.have, &r)
		if cvd != c.wantCVD || !reflect.DeepEqual(r.SlurmGPUs, c.wantGPUs) || !reflect.DeepEqual(r.Nodes, c.wantNodes) ||
			r.SlurmStep != c.wantStep || r.NoTelemetry != c.wantLabel {
			t.Errorf("%s: cvd %q gpus %v nodes %v step %q label %q; want %q %v %v %q %q", c.name, cvd, r.SlurmGPUs, r.Nodes, r.SlurmStep, r.NoTelemetry,
				c.wantCVD, c.wantGPUs, c.wantNodes, c.wantStep, c.wantLabel)
		}
	}
}

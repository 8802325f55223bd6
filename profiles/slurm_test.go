package profiles

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/slurm"
)

func slurmFacts() HostFacts {
	f := fixedFacts()
	f.Slurm = &slurm.Job{ID: "42", Nodes: []string{"gpu-a01", "gpu-a02"}, Addrs: []string{"10.0.0.5", "10.0.0.6"}, GPUsPerNode: 2}
	return f
}

// The two-node seed example as a Slurm job: prefill a step on the first
// node (where the gateway is), decode a step on the second; workers dial
// the first node, each engine's dist-init and bootstrap are its own node's.
func TestSlurmPlanGolden(t *testing.T) {
	t.Parallel()
	plan, errs := MakePlan(loadExample(t, "seed-pd-slurm.yaml"), slurmFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var buf bytes.Buffer
	if err := plan.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "seed-pd-slurm.plan.json")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("plan JSON differs from %s:\n%s", golden, buf.Bytes())
	}
	p, d := plan.Roles[0], plan.Roles[1]
	for _, c := range []struct{ what, got, want string }{
		{"prefill node", p.Node, "gpu-a01"},
		{"decode node", d.Node, "gpu-a02"},
		{"decode worker", d.Worker, "tcp://10.0.0.5:" + strings.TrimPrefix(d.Handshake, "tcp://10.0.0.5:")},
		{"decode dist-init", d.DistInitAddr, "10.0.0.6:13580"},
		{"prefill bootstrap", p.Bootstrap, "10.0.0.5:8998"},
		{"decode command", d.CommandLine(), "CUDA_DEVICE_ORDER=PCI_BUS_ID NO_PROXY='*' PYTHONUNBUFFERED=1 no_proxy='*' srun --jobid 42 --job-name tsd.seed-pd.decode --exact --overlap --nodes 1 --ntasks 1 --kill-on-bad-exit=1 --gres gpu:2 --nodelist gpu-a02 -- sh -c "},
		{"decode shim then engine", d.CommandLine(), "' tsd-step ts serve --headless"},
	} {
		if !strings.HasPrefix(c.got, c.want) && !strings.Contains(c.got, c.want) {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if p.OnOtherNode() || !d.OnOtherNode() {
		t.Errorf("OnOtherNode: prefill %v decode %v, want false true", p.OnOtherNode(), d.OnOtherNode())
	}
	if _, ok := d.Env["CUDA_VISIBLE_DEVICES"]; ok {
		t.Error("slurm mode must leave CUDA_VISIBLE_DEVICES to Slurm")
	}
}

func TestSlurmPlanErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, yaml, want string }{
		{"node out of range", "model: m\nroles:\n  - {name: prefill, gpus: [0], node: 2}\n  - {name: decode, gpus: [1]}\n",
			"roles[0].node: node 2 is out of range: Slurm job 42 has 2 node(s)"},
		{"host and slurm", "model: m\nroles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1], host: other, worker: \"tcp://10.0.0.5:31001\"}\n",
			"roles[1].host: host: other and --launcher slurm do not mix"},
		{"nodes out of range", "model: m\nroles:\n  - {name: prefill, gpus: [0, 1], tp: 2, nodes: [0, 2]}\n  - {name: decode, gpus: [1]}\n",
			"roles[0].nodes: node 2 is out of range: Slurm job 42 has 2 node(s)"},
		{"node over capacity", "model: m\nroles:\n  - {name: prefill, gpus: [0, 1], tp: 2, node: 0}\n  - {name: decode, gpus: [2], node: 0}\n",
			"the roles placed on node 0 need 3 GPU(s); the job has 2 per node"},
		{"too many GPUs to pack", "model: m\nroles:\n  - {name: prefill, gpus: [0, 1, 2], tp: 3}\n  - {name: decode, gpus: [3]}\n",
			"no node of the job has that many left"},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "p.yaml")
		if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, errs := LoadPlan(path, slurmFacts())
		if !strings.Contains(errs.Error(), c.want) {
			t.Errorf("%s: errors %q, want %q", c.name, errs.Error(), c.want)
		}
	}
}

// Packing without node: fills the first node's GPUs, then the next.
func TestSlurmPacking(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	y := "model: m\nroles:\n  - {name: prefill, gpus: [0, 1], tp: 2}\n  - {name: decode, gpus: [2]}\n  - {name: decode2, kind: decode, gpus: [3]}\n"
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	_, plan, errs := LoadPlan(path, slurmFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var got []string
	for _, r := range plan.Roles {
		got = append(got, r.Name+"@"+r.Node)
	}
	if s := strings.Join(got, " "); s != "prefill@gpu-a01 decode@gpu-a02 decode2@gpu-a02" {
		t.Error(s)
	}
}

// Preflight binds ports on this host only: a Slurm role on another node
// has its dist-init cluster there, so a busy port here is not its problem.
func TestSlurmPreflightSkipsOtherNodes(t *testing.T) {
	t.Parallel()
	plan, errs := MakePlan(loadExample(t, "seed-pd-slurm.yaml"), slurmFacts())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	busy := PreflightEnv{PortFree: func(int) bool { return false }, LookPath: func(s string) (string, error) { return s, nil }}
	text := problemsText(Preflight(plan, busy))
	if !strings.Contains(text, "port 12579 (dist-init cluster port) is in use") {
		t.Errorf("prefill (this node) not checked:\n%s", text)
	}
	if strings.Contains(text, "13580") {
		t.Errorf("decode (other node) checked here:\n%s", text)
	}
}

// A role spanning nodes is one step with a task on each: --gres per node,
// the nodes in the job's order, --nnodes in the argv (the shim adds each
// task's --node-rank), dist-init and bootstrap on its first node, and the
// packed role fits around it.
func TestSlurmMultiNode(t *testing.T) {
	t.Parallel()
	f := slurmFacts()
	f.Slurm.Nodes = append(f.Slurm.Nodes, "gpu-a03")
	f.Slurm.Addrs = append(f.Slurm.Addrs, "10.0.0.7")
	f.Slurm.GPUsPerNode = 4
	path := filepath.Join(t.TempDir(), "p.yaml")
	y := "model: m\nroles:\n  - {name: prefill, gpus: [0, 1, 2, 3], tp: 4, nodes: [2, 1], bootstrap_port: 8998, dist_init_port: 12579}\n  - {name: decode, gpus: [0, 1, 2, 3], tp: 4}\n"
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	_, plan, errs := LoadPlan(path, f)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	p, d := plan.Roles[0], plan.Roles[1]
	srun := strings.Join(p.Srun, " ")
	for _, c := range []struct{ what, got, want string }{
		{"srun", srun, "srun --jobid 42 --job-name tsd.p.prefill --exact --overlap --nodes 2 --ntasks 2 --ntasks-per-node 1 --kill-on-bad-exit=1 --gres gpu:2 --nodelist gpu-a02,gpu-a03 -- sh -c "},
		{"node rank from the shim", srun, `--node-rank "$SLURM_NODEID" tsd-step`},
		{"argv", strings.Join(p.Argv, " "), "--dist-init-addr 10.0.0.6:12579 --data-parallel-address 10.0.0.5 "},
		{"nnodes", strings.Join(p.Argv, " "), " --nnodes 2"},
		{"first node", p.Node, "gpu-a02"},
		{"nodes", strings.Join(p.Nodes, ","), "gpu-a02,gpu-a03"},
		{"bootstrap", p.Bootstrap, "10.0.0.6:8998"},
		{"worker", p.Worker, "tcp://10.0.0.5:"},
		{"decode packed on the free node", d.Node, "gpu-a01"},
		{"info", p.SlurmInfo, filepath.Join(plan.RunDir, "prefill.slurm.json")},
	} {
		if !strings.Contains(c.got, c.want) {
			t.Errorf("%s = %q, want %q in it", c.what, c.got, c.want)
		}
	}
	if !strings.HasSuffix(strings.Join(p.Argv, " "), "--nnodes 2") {
		t.Errorf("--nnodes not last (the shim appends --node-rank after it): %v", p.Argv)
	}
	if p.SlurmGPUs != 2 || !p.NodeRemote || d.NodeRemote || len(d.Nodes) != 0 {
		t.Errorf("prefill gpus %d remote %v; decode remote %v nodes %v", p.SlurmGPUs, p.NodeRemote, d.NodeRemote, d.Nodes)
	}
	if strings.Contains(strings.Join(d.Command(), " "), "--node-rank") || strings.Contains(strings.Join(d.Argv, " "), "--nnodes") {
		t.Errorf("a one-node role got node flags: %v", d.Command())
	}
}

// nodes: is checked where it is written: file, line and key.
func TestNodesKeyErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, role, want string }{
		{"with node", "{name: prefill, gpus: [0, 1], tp: 2, node: 0, nodes: [0, 1]}", "p.yaml:3:51: roles[0].nodes: node and nodes are exclusive"},
		{"uneven split", "{name: prefill, gpus: [0, 1, 2], tp: 3, nodes: [0, 1]}", "roles[0].nodes: 2 node(s) cannot split tp × dp = 3 × 1 = 3 GPUs evenly"},
		{"twice", "{name: prefill, gpus: [0, 1], tp: 2, nodes: [1, 1]}", "roles[0].nodes[1]: node 1 is listed twice"},
		{"not a list", "{name: prefill, gpus: [0, 1], tp: 2, nodes: 1}", "roles[0].nodes: must be a non-empty list of node indices"},
		{"empty", "{name: prefill, gpus: [0, 1], tp: 2, nodes: []}", "roles[0].nodes: must be a non-empty list"},
		{"negative", "{name: prefill, gpus: [0, 1], tp: 2, nodes: [0, -1]}", "roles[0].nodes[1]: must be between 0 and 4095"},
	} {
		path := filepath.Join(t.TempDir(), "p.yaml")
		y := "model: m\nroles:\n  - " + c.role + "\n  - {name: decode, gpus: [3]}\n"
		if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errs := Load(path)
		if !strings.Contains(errs.Error(), c.want) {
			t.Errorf("%s: errors %q, want %q", c.name, errs.Error(), c.want)
		}
	}
}

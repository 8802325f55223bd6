package profiles

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/launch/slurm"
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
		{"decode command", d.CommandLine(), "CUDA_DEVICE_ORDER=PCI_BUS_ID NO_PROXY='*' PYTHONUNBUFFERED=1 no_proxy='*' srun --jobid 42 --job-name tsd.seed-pd.decode --exact --overlap --nodes 1 --ntasks 1 --kill-on-bad-exit=1 --gres gpu:2 --nodelist gpu-a02 -- ts serve"},
	} {
		if !strings.HasPrefix(c.got, c.want) && c.got != c.want {
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

package slurmtest

import (
	"os/exec"
	"strings"
	"testing"
)

// Pins: the test cluster has two nodes, and a step with --gres=gpu:N on
// either gets N devices in CUDA_VISIBLE_DEVICES from Slurm itself.
func TestClusterGivesGPUs(t *testing.T) {
	conf := Start(t)
	for _, c := range []struct{ node, gres, want string }{
		{"n1", "gpu:2", "n1 0,1"},
		{"n2", "gpu:1", "n2 0"},
	} {
		cmd := exec.Command("srun", "--nodes=1", "--ntasks=1", "-w", c.node, "--gres="+c.gres, "--time=1",
			"bash", "-c", `echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES"`)
		cmd.Env = Env(conf)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Fatalf("srun on %s: %v: %q, want %q", c.node, err, out, c.want)
		}
	}
}

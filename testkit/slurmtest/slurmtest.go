// Package slurmtest starts the repo's real two-node Slurm cluster
// (scripts/slurm/up.sh: slurmctld and slurmd n1, n2 on this machine, fake
// GPUs in gres.conf) for tests of tsd's multi-node paths, or skips the test
// saying why when Slurm cannot run here.
package slurmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	once    sync.Once
	conf    string
	skipWhy string
)

// Start brings the cluster up once per test binary (a cluster left by an
// earlier run is reused) and returns the SLURM_CONF path to put in the
// environment of every Slurm command.
func Start(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		for _, c := range []string{"slurmctld", "slurmd", "munged", "srun"} {
			if _, err := exec.LookPath(c); err != nil {
				skipWhy = c + " not installed (apt-get install slurm-wlm munge): the Slurm tests did not run"
				return
			}
		}
		if os.Getuid() != 0 {
			skipWhy = "not root: slurmd must run jobs as their users, so the Slurm tests did not run"
			return
		}
		out, err := exec.Command("bash", filepath.Join(repoRoot(), "scripts", "slurm", "up.sh")).CombinedOutput()
		if err != nil {
			skipWhy = ""
			conf = "error: " + err.Error() + "\n" + string(out)
			return
		}
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "export SLURM_CONF="); ok {
				conf = v
			}
		}
	})
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	if conf == "" || strings.HasPrefix(conf, "error: ") {
		t.Fatalf("scripts/slurm/up.sh: %s", conf)
	}
	return conf
}

// Env is the environment for Slurm commands run by a test.
func Env(conf string) []string {
	return append(os.Environ(), "SLURM_CONF="+conf)
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

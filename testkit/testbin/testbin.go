// Package testbin builds the project's commands once per test binary, for
// end-to-end tests that run them as child processes (tsd, ts-fake).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"testing"

	"github.com/tsd-project/tsd/daemons"
)

// Module is the project's module path; Build takes packages relative to it.
const Module = "github.com/tsd-project/tsd"

// Main runs a package's tests with a fresh directory for binaries: setup
// builds into it, and it is removed when the tests end. A setup error
// stops the tests before any runs. The tests' daemons register in a
// registry of this run's own (daemons.EnvDir under the same directory), so
// `tsd ls` in one test package never lists another's deployments or the
// user's, and nothing the tests register outlives them.
func Main(m *testing.M, setup func(dir string) error) {
	dir, err := os.MkdirTemp("", "tsd-testbin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create test binary dir:", err)
		os.Exit(1)
	}
	if err := os.Setenv(daemons.EnvDir, filepath.Join(dir, "registry")); err != nil {
		fmt.Fprintln(os.Stderr, "set the test registry:", err)
		os.Exit(1)
	}
	if err := setup(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// PrebuiltEnv names a folder of binaries built beforehand (e.g.
// bin/race), used instead of building: test binaries made with
// `go test -c` can then run on a machine without Go. The folder's
// binaries must have been built with the flags Build would pass.
const PrebuiltEnv = "TSD_TEST_PREBUILT"

// Build compiles the package at rel (e.g. "cmd/ts-fake") into dir, named
// after its last element, with extra go build flags (e.g. -race).
func Build(dir, rel string, flags ...string) (string, error) {
	if pre := os.Getenv(PrebuiltEnv); pre != "" {
		bin := filepath.Join(pre, path.Base(rel))
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("prebuilt %s: %w", rel, err)
		}
		return bin, nil
	}
	out := filepath.Join(dir, path.Base(rel))
	args := append(append([]string{"build", "-o", out}, flags...), Module+"/"+rel)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", rel, err, b)
	}
	return out, nil
}

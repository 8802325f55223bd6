package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// The driver reads each deployment's gateway log and control socket from
// stateDir; the plan `tsd up --name benchName` makes of the driver's
// profile must put them there (they once sat in a folder named for the
// profile, and the share and tracing rows read no log line at all).
func TestStateDirIsWhereUpPutsIt(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "model"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte(profileText("pd", dir, "/bin/ts-fake", layout{}, 8123, 1, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	facts := profiles.StaticHostFacts()
	facts.Name = benchName
	_, plan, errs := profiles.LoadPlan(path, facts)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	state := stateDir(dir)
	if plan.LogDir != filepath.Join(state, "logs") || plan.ControlSocket != filepath.Join(state, "run", "tsd.sock") {
		t.Fatalf("plan logs %s, socket %s; the driver reads %s", plan.LogDir, plan.ControlSocket, state)
	}
	if argv := upArgv("tsd", "p.yaml"); !slices.Contains(argv, "--name") || argv[slices.Index(argv, "--name")+1] != benchName {
		t.Fatalf("upArgv %v does not name the deployment %s", argv, benchName)
	}
}

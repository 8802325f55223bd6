package main

import (
	"fmt"
	"path/filepath"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
)

// Each deployment keeps its state (control socket, ipc sockets, group
// records, logs) in a folder of its own beside its profile,
// .tsd/NAME/{run,logs} (profiles.StateDir), so any number of profiles of
// one folder run side by side. An earlier tsd put every profile of a
// folder in one shared .tsd/{run,logs}: a daemon it started that still
// runs is found there (stateFacts), and two deployments that would still
// share a folder (a run_dir or log_dir set by hand) are refused by name
// (stateClash).

// stateFacts completes facts for planning the profile at path (as the
// registry records it: absolute, symlinks resolved) under name (tsd up
// --name; "" the profile's): the name, and the shared folder of an
// earlier tsd while a daemon of this profile it started still runs there,
// so plan, apply, scale and stop find that daemon's sockets and logs.
func stateFacts(facts profiles.HostFacts, path, name string, live []daemons.Entry) profiles.HostFacts {
	facts.Name = name
	if legacyHeld(path, live) {
		facts.StateDir = profiles.LegacyState(filepath.Dir(path))
	}
	return facts
}

// legacyHeld reports whether a live daemon of the profile at path keeps
// its control socket in the profile folder's shared .tsd/run (the
// default of tsd before each deployment had its own state folder).
func legacyHeld(path string, live []daemons.Entry) bool {
	sock := filepath.Join(filepath.Dir(path), profiles.LegacyRunDir, "tsd.sock")
	for _, e := range live {
		if e.Socket == sock && e.Profile == path {
			return true
		}
	}
	return false
}

// stateClash refuses to start plan (from the profile at path) where
// another running deployment already keeps its state: the same control
// socket (run_dir) or the same log folder. It names the other deployment
// and the profile key to change. Pure: the table test is in
// state_test.go.
func stateClash(plan *profiles.Plan, path string, live []daemons.Entry) error {
	if path == "" {
		path = "this deployment's profile"
	}
	for _, e := range live {
		if e.Name == plan.Name {
			continue // the registry refuses a second one of a name itself
		}
		key, dir := "", ""
		switch {
		case e.Socket != "" && e.Socket == plan.ControlSocket:
			key, dir = "run_dir", plan.RunDir
		case e.LogFile != "" && filepath.Dir(e.LogFile) == plan.LogDir:
			key, dir = "log_dir", plan.LogDir
		default:
			continue
		}
		return &exitError{code: 1, msg: fmt.Sprintf(
			"tsd: another tsd is running there: %s is the %s of deployment %s (profile %s); two deployments cannot share it.\n"+
				"  Give %s a %s of its own (or remove %s: and each deployment gets .tsd/NAME/ by its name), or stop %s first (tsd stop %s).",
			dir, key, e.Name, e.Profile, path, key, key, e.Name, e.Name)}
	}
	return nil
}

// resolvedPath is path made absolute with symlinks resolved, as the
// registry records profiles (path itself when that fails).
func resolvedPath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

// liveEntries are the running deployments of the registry (nil without
// one).
func liveEntries() []daemons.Entry {
	reg, err := daemons.Open("")
	if err != nil {
		return nil
	}
	live, _ := reg.List()
	return live
}

// ownPorts are the ports the running deployment of the profile at path
// claims (under name, when given): tsd plan of a running profile counts
// them free, so it neither warns that its own deployment holds them nor
// plans around them.
func ownPorts(path, name string, live []daemons.Entry) map[int]bool {
	own := map[int]bool{}
	for _, e := range live {
		if e.Profile == path && (name == "" || e.Name == name) {
			for _, p := range e.Ports {
				own[p] = true
			}
		}
	}
	return own
}

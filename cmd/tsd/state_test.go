package main

import (
	"strings"
	"testing"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
)

// A daemon an earlier tsd started in the folder's shared .tsd/run is
// found there (its profile plans into .tsd/run and .tsd/logs while it
// runs); any other profile, or the same one once that daemon is gone,
// gets its own state folder by name.
func TestStateFactsLegacy(t *testing.T) {
	old := daemons.Entry{Name: "demo", Profile: "/w/demo.yaml", Socket: "/w/.tsd/run/tsd.sock", LogFile: "/w/.tsd/logs/tsd.log"}
	mine := daemons.Entry{Name: "asc", Profile: "/w/asc.yaml", Socket: "/w/.tsd/asc/run/tsd.sock"}
	for _, tc := range []struct {
		what, path, name string
		live             []daemons.Entry
		state            string
	}{
		{what: "the earlier tsd's daemon of this profile runs", path: "/w/demo.yaml", live: []daemons.Entry{mine, old}, state: "/w/.tsd"},
		{what: "another profile of the folder", path: "/w/asc.yaml", live: []daemons.Entry{mine, old}, state: ""},
		{what: "nothing runs", path: "/w/demo.yaml", state: ""},
		{what: "a daemon of this profile in its own folder", path: "/w/asc.yaml", live: []daemons.Entry{mine}, state: ""},
	} {
		f := stateFacts(profiles.HostFacts{}, tc.path, tc.name, tc.live)
		if f.StateDir != tc.state {
			t.Errorf("%s: StateDir %q, want %q", tc.what, f.StateDir, tc.state)
		}
	}
	if f := stateFacts(profiles.HostFacts{}, "/w/demo.yaml", "demo2", nil); f.Name != "demo2" {
		t.Errorf("--name not carried: %+v", f)
	}
}

// Two deployments never share a state folder: a run_dir or log_dir set
// by hand to another running deployment's is refused, naming that
// deployment, its profile and the key to change; distinct folders pass.
func TestStateClash(t *testing.T) {
	demo := daemons.Entry{Name: "demo", Profile: "/w/demo.yaml", Socket: "/w/.tsd/demo/run/tsd.sock", LogFile: "/w/.tsd/demo/logs/tsd.log"}
	plan := func(name, run, logs string) *profiles.Plan {
		return &profiles.Plan{Name: name, RunDir: run, LogDir: logs, ControlSocket: run + "/tsd.sock"}
	}
	for _, tc := range []struct {
		what string
		plan *profiles.Plan
		msg  []string // "" : no refusal
	}{
		{what: "own folders", plan: plan("asc", "/w/.tsd/asc/run", "/w/.tsd/asc/logs")},
		{what: "run_dir by hand onto demo's", plan: plan("asc", "/w/.tsd/demo/run", "/w/logs"),
			msg: []string{"/w/.tsd/demo/run is the run_dir of deployment demo (profile /w/demo.yaml)", "Give /w/asc.yaml a run_dir of its own", "tsd stop demo"}},
		{what: "log_dir by hand onto demo's", plan: plan("asc", "/w/run", "/w/.tsd/demo/logs"),
			msg: []string{"/w/.tsd/demo/logs is the log_dir of deployment demo", "a log_dir of its own"}},
		{what: "the same name is the registry's refusal", plan: plan("demo", "/w/.tsd/demo/run", "/w/.tsd/demo/logs")},
	} {
		err := stateClash(tc.plan, "/w/asc.yaml", []daemons.Entry{demo})
		if len(tc.msg) == 0 {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.what, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: not refused", tc.what)
			continue
		}
		for _, m := range tc.msg {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: refusal lacks %q:\n%v", tc.what, m, err)
			}
		}
	}
}

// tsd plan of a running profile counts the ports its own deployment
// claims as free: of that profile (and name, when given), no other's.
func TestOwnPorts(t *testing.T) {
	live := []daemons.Entry{
		{Name: "demo", Profile: "/w/demo.yaml", Ports: []int{8000, 12200}},
		{Name: "demo2", Profile: "/w/demo.yaml", Ports: []int{8002}},
		{Name: "asc", Profile: "/w/asc.yaml", Ports: []int{8001}},
	}
	if got := ownPorts("/w/demo.yaml", "", live); len(got) != 3 || !got[8000] || !got[12200] || !got[8002] || got[8001] {
		t.Errorf("the profile's: %v", got)
	}
	if got := ownPorts("/w/demo.yaml", "demo2", live); len(got) != 1 || !got[8002] {
		t.Errorf("by name: %v", got)
	}
	if got := ownPorts("/w/other.yaml", "", live); len(got) != 0 {
		t.Errorf("another profile: %v", got)
	}
}

package main

import (
	"strings"
	"testing"
)

// fakeSource is a deployment "mine" with replicas, beside "other".
type fakeSource struct{ roles, profile []string }

func (f fakeSource) Names() []string                   { return []string{"mine", "other"} }
func (f fakeSource) Roles() []string                   { return f.roles }
func (f fakeSource) ProfileRoles(path string) []string { return f.profile }

// TestCompleteArgs pins what each positional completes to: role names
// where a ROLE goes (from the running deployment, else the profile
// beside us), deployment names only where a NAME goes, both where either
// may ([ROLE] [NAME]), the gateway's log for logs, subcommands and enums
// from the CLI model (export slurm, completion bash), files for profiles.
func TestCompleteArgs(t *testing.T) {
	var c cli
	k, err := newParser(&c)
	if err != nil {
		t.Fatal(err)
	}
	running := fakeSource{roles: []string{"prefill", "decode-0", "decode-1", "decode"}}
	notRunning := fakeSource{profile: []string{"prefill", "decode"}}
	rows := []struct {
		words string
		src   fakeSource
		want  string
		files bool
	}{
		{"restart", running, "prefill decode-0 decode-1 decode", false},
		{"restart --now", running, "prefill decode-0 decode-1 decode", false},
		{"restart --timeout 5m", running, "prefill decode-0 decode-1 decode", false},
		{"restart --timeout = 5m", running, "prefill decode-0 decode-1 decode", false}, // bash splits at '='
		{"restart", notRunning, "prefill decode", false},
		{"restart decode", running, "mine other", true},
		{"restart decode mine", running, "", false},
		{"start", running, "prefill decode-0 decode-1 decode", false},
		{"stop", running, "prefill decode-0 decode-1 decode mine other", false},
		{"stop decode", running, "mine other", true},
		{"logs", running, "prefill decode-0 decode-1 decode gateway mine other", false},
		{"logs -n 5 -f", running, "prefill decode-0 decode-1 decode gateway mine other", false},
		{"status", running, "mine other", false},
		{"attach", running, "mine other", false},
		{"attach mine", running, "", false},
		{"ls", running, "", false},
		{"export", running, "slurm", false},
		{"export slurm", running, "", true},
		{"planner", running, "pause resume", false},
		{"planner pause", running, "mine other", true},
		{"planner resume mine", running, "", false},
		{"completion", running, "bash zsh fish", false},
		{"up", running, "", true},
		{"plan --json", running, "", true},
		{"", running, "", false},
	}
	for _, r := range rows {
		got, files := completeArgs(k.Model.Node, strings.Fields(r.words), r.src)
		if strings.Join(got, " ") != r.want || files != r.files {
			t.Errorf("tsd %s <Tab>: %q files=%v, want %q files=%v", r.words, got, files, r.want, r.files)
		}
	}
}

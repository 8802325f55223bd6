package main

import (
	"reflect"
	"testing"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// tsd apply warns, as the r and s keys do, when a restart or stop takes
// the last serving instance of a kind out of service; replicas restarted
// one at a time cover each other, and a kind another instance still
// serves is no outage.
func TestApplyOutages(t *testing.T) {
	ready := func(name, kind string) snapshot.RoleStatus {
		return snapshot.RoleStatus{Name: name, Kind: kind, State: snapshot.StateReady, Routed: true}
	}
	change := func(action, name, kind string) profiles.RoleChange {
		return profiles.RoleChange{Action: action, Name: name, Kind: kind}
	}
	pd := snapshot.Snapshot{Roles: []snapshot.RoleStatus{ready("prefill", "prefill"), ready("decode-0", "decode"), ready("decode-1", "decode")}}
	for _, tc := range []struct {
		what string
		diff []profiles.RoleChange
		snap snapshot.Snapshot
		want []string
	}{
		{"the only prefill restarts", []profiles.RoleChange{change(profiles.ActionRestart, "prefill", "prefill"), change(profiles.ActionUnchanged, "decode-0", "decode")}, pd,
			[]string{"prefill restarts and no other prefill serves: its requests fail until it is ready again"}},
		{"one decode of two restarts", []profiles.RoleChange{change(profiles.ActionRestart, "decode-0", "decode")}, pd, nil},
		{"both decodes restart, one at a time", []profiles.RoleChange{change(profiles.ActionRestart, "decode-0", "decode"), change(profiles.ActionRestart, "decode-1", "decode")}, pd, nil},
		{"a decode restarts while the other stops", []profiles.RoleChange{change(profiles.ActionRestart, "decode-0", "decode"), change(profiles.ActionStop, "decode-1", "decode")}, pd,
			[]string{"decode-0 restarts and no other decode serves: its requests fail until it is ready again"}},
		{"a decode restarts while the other is down", []profiles.RoleChange{change(profiles.ActionRestart, "decode-0", "decode")},
			snapshot.Snapshot{Roles: []snapshot.RoleStatus{ready("prefill", "prefill"), ready("decode-0", "decode"), {Name: "decode-1", Kind: "decode", State: snapshot.StateFailed}}},
			[]string{"decode-0 restarts and no other decode serves: its requests fail until it is ready again"}},
		{"a renamed prefill restarts", []profiles.RoleChange{{Action: profiles.ActionRestart, Name: "prefill-0", Was: "prefill", Kind: "prefill"}}, pd,
			[]string{"prefill restarts and no other prefill serves: its requests fail until it is ready again"}},
		{"only updates and starts", []profiles.RoleChange{change(profiles.ActionUpdate, "prefill", "prefill"), change(profiles.ActionStart, "decode-2", "decode")}, pd, nil},
	} {
		if got := applyOutages(profiles.PlanDiff{Roles: tc.diff}, tc.snap); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.what, got, tc.want)
		}
	}
}

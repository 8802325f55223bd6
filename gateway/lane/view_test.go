package lane

import (
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// A local role is alive only while its view says so and ended once a view
// says it is not; before any view it is neither (tsd gateway alone). A
// remote role, whose process tsd cannot see, is alive and never ended.
func TestLiveness(t *testing.T) {
	t.Parallel()
	up, down := &snapshot.RoleView{Alive: true, Routed: true}, &snapshot.RoleView{Reason: "stopped"}
	for _, c := range []struct {
		name         string
		v            *snapshot.RoleView
		remote       bool
		alive, ended bool
	}{
		{"local, no view", nil, false, false, false},
		{"local, alive", up, false, true, false},
		{"local, not alive", down, false, false, true},
		{"remote, no view", nil, true, true, false},
		{"remote, view never alive", &snapshot.RoleView{Routed: true}, true, true, false},
		{"remote, not routed", down, true, true, false},
	} {
		alive, ended := liveness(c.v, c.remote)
		if alive != c.alive || ended != c.ended {
			t.Errorf("%s: liveness = alive %v ended %v, want %v %v", c.name, alive, ended, c.alive, c.ended)
		}
	}
}

// What a new view changes: a stall verdict that begins or ends, a process
// that is newly known ended, and whether routing may have moved; the same
// view again changes nothing.
func TestStepView(t *testing.T) {
	t.Parallel()
	up := snapshot.RoleView{Alive: true, Routed: true}
	drain := snapshot.RoleView{Alive: true, Reason: "restart requested"}
	stall := snapshot.RoleView{Alive: true, Stalled: true, Reason: "role d stalled: stopped"}
	dead := snapshot.RoleView{Reason: "exited"}
	p := func(v snapshot.RoleView) *snapshot.RoleView { return &v }
	for _, c := range []struct {
		name   string
		prev   *snapshot.RoleView
		next   snapshot.RoleView
		remote bool
		want   ViewChange
	}{
		{"first view, up", nil, up, false, ViewChange{}},
		{"first view, starting", nil, snapshot.RoleView{Alive: true, Reason: "starting"}, false, ViewChange{Routing: true}},
		{"first view, planned", nil, snapshot.RoleView{Reason: "planned"}, false, ViewChange{Ended: true, Routing: true}},
		{"same view", p(up), up, false, ViewChange{}},
		{"same stalled view", p(stall), stall, false, ViewChange{}},
		{"drain", p(up), drain, false, ViewChange{Routing: true}},
		{"routed again", p(drain), up, false, ViewChange{Routing: true}},
		{"stall begins", p(up), stall, false, ViewChange{StallBegins: true, Routing: true}},
		{"stall lifted", p(stall), up, false, ViewChange{StallEnds: true, Routing: true}},
		{"stall lifted, still out", p(stall), drain, false, ViewChange{StallEnds: true, Routing: true}},
		{"stall while routed", p(up), snapshot.RoleView{Alive: true, Routed: true, Stalled: true}, false, ViewChange{StallBegins: true, Routing: true}},
		{"exit after drain", p(drain), dead, false, ViewChange{Ended: true}},
		{"exit while stalled", p(stall), dead, false, ViewChange{StallEnds: true, Ended: true, Routing: true}},
		{"dead again", p(dead), snapshot.RoleView{Reason: "backing off"}, false, ViewChange{}},
		{"restart spawns", p(dead), drain, false, ViewChange{}},
		{"remote, dialling in", nil, snapshot.RoleView{Reason: "dialling in"}, true, ViewChange{Routing: true}},
		{"remote, all ranks in", p(snapshot.RoleView{Reason: "dialling in"}), snapshot.RoleView{Routed: true}, true, ViewChange{Routing: true}},
	} {
		if got := stepView(c.prev, c.next, c.remote); got != c.want {
			t.Errorf("%s: stepView = %+v, want %+v", c.name, got, c.want)
		}
	}
}

package snapshot

import "testing"

// A role is routable only when routed and not judged stalled: a stall
// keeps it out of routing even in a view that still says routed.
func TestRoleViewRoutable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		v    RoleView
		want bool
	}{
		{"zero", RoleView{}, false},
		{"routed", RoleView{Alive: true, Routed: true}, true},
		{"routed, not alive (remote)", RoleView{Routed: true}, true},
		{"draining", RoleView{Alive: true, Reason: "restart requested"}, false},
		{"stalled", RoleView{Alive: true, Stalled: true, Reason: "stopped"}, false},
		{"stalled but routed", RoleView{Alive: true, Routed: true, Stalled: true}, false},
	} {
		if got := c.v.Routable(); got != c.want {
			t.Errorf("%s: Routable(%+v) = %v, want %v", c.name, c.v, got, c.want)
		}
	}
}

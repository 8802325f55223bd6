package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// SetRole hands the supervisor's view of a role to its worker, which
// routing reads: a stalled view ends the role's requests with its reason
// and takes it out of routing, the next view lifts the verdict and routes
// it again, a view that is not routed keeps it out, and the same view
// again changes nothing.
func TestSetRoleAppliesTheView(t *testing.T) {
	t.Parallel()
	g, pr, dr := rawPD(t, Options{StallTimeout: -1})
	w, _ := g.Lane().Worker("d")
	up := snapshot.RoleView{Alive: true, Routed: true}
	g.SetRole("d", up)
	evs, err := g.Generate(context.Background(), genRequest(1, 8))
	if err != nil {
		t.Fatal(err)
	}
	pr.next(t)
	dr.next(t)

	g.SetRole("d", snapshot.RoleView{Alive: true, Stalled: true, Reason: "role d stalled: process stopped (state T)"})
	var got error
	for e := range evs {
		if e.Err != nil {
			got = e.Err
		}
	}
	if got == nil || !strings.Contains(got.Error(), "role d stalled: process stopped (state T)") {
		t.Fatalf("request ended with %v", got)
	}
	if rs := w.Ranks(); rs[0].State != snapshot.RankStalled || g.Ready() || w.Routed() {
		t.Fatalf("stalled: rank %s, ready %v, routed %v", rs[0].State, g.Ready(), w.Routed())
	}

	g.SetRole("d", up)
	if !g.Ready() || !w.Routed() || w.View() != up {
		t.Fatalf("recovered: ready %v, routed %v, view %+v", g.Ready(), w.Routed(), w.View())
	}

	g.SetRole("d", snapshot.RoleView{Alive: true, Reason: "restart requested"})
	if w.Routed() || g.Ready() {
		t.Fatalf("draining view: routed %v, ready %v", w.Routed(), g.Ready())
	}

	// The view is one value, not a log of changes: the same view again
	// leaves the role as it is, and the view read back is the last sent.
	drain := snapshot.RoleView{Alive: true, Reason: "restart requested"}
	g.SetRole("d", drain)
	if w.Routed() || g.Ready() || w.View() != drain {
		t.Fatalf("repeated view: routed %v, ready %v, view %+v", w.Routed(), g.Ready(), w.View())
	}
}

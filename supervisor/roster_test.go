package supervisor

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// newTestRoster is a roster owner whose loop runs, making bare actors.
func newTestRoster(t *testing.T, names ...string) *rosterOwner {
	t.Helper()
	o := newRosterOwner(func(id int, rp profiles.RolePlan) (*actor, error) {
		return &actor{id: id, done: make(chan struct{})}, nil
	}, func(int) {})
	var roles []profiles.RolePlan
	for _, n := range names {
		roles = append(roles, profiles.RolePlan{Name: n, Group: "decode", Kind: profiles.KindDecode, Local: true})
	}
	if err := o.init(roles); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go o.loop(stop)
	t.Cleanup(func() { close(stop); <-o.done })
	return o
}

// TestRosterRenameIsOneMapChange: a rename changes the roster's name map
// and nothing keyed by the id; the operator no longer finds the old name,
// while the gateway's late calls by it still reach the instance until
// another takes the name.
func TestRosterRenameIsOneMapChange(t *testing.T) {
	t.Parallel()
	o := newTestRoster(t, "prefill", "decode")
	dec, _ := o.current().find("decode")
	if err := o.rename(dec.id, "decode-0"); err != nil {
		t.Fatal(err)
	}
	r := o.current()
	if m, ok := r.find("decode-0"); !ok || m.id != dec.id || m.a != dec.a {
		t.Fatalf("find(decode-0) = %+v %v", m, ok)
	}
	if _, ok := r.find("decode"); ok {
		t.Fatal("the operator still finds the old name")
	}
	if m, ok := r.route("decode"); !ok || m.id != dec.id {
		t.Fatalf("the gateway's old name routes to %+v %v, want instance %d", m, ok, dec.id)
	}
	if got := o.nameOf(dec.id); got != "decode-0" {
		t.Fatalf("nameOf = %q", got)
	}
	if got := r.list(); !reflect.DeepEqual(got, []string{"prefill", "decode-0"}) {
		t.Fatalf("names %v", got)
	}

	// A new instance that takes the old name owns it from then on.
	a, err := o.change(rosterCmd{op: opAdd, rp: profiles.RolePlan{Name: "decode", Group: "decode", Local: true}})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := o.current().route("decode"); !ok || m.a != a || m.id == dec.id {
		t.Fatalf("route(decode) after a new instance took it: %+v %v", m, ok)
	}

	// Names are refused where they are taken; ids are never reused.
	if err := o.rename(dec.id, "prefill"); err == nil {
		t.Fatal("renamed onto a running name")
	}
	pre, _ := o.current().find("prefill")
	if _, err := o.change(rosterCmd{op: opRemove, id: pre.id}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.change(rosterCmd{op: opRemove, id: pre.id}); !errors.Is(err, ErrUnknownRole) {
		t.Fatalf("second remove: %v", err)
	}
	b, err := o.change(rosterCmd{op: opAdd, rp: profiles.RolePlan{Name: "prefill", Local: true}})
	if err != nil {
		t.Fatal(err)
	}
	if b.id == pre.id {
		t.Fatalf("id %d reused", b.id)
	}
	if _, err := o.change(rosterCmd{op: opOrder, order: []string{"prefill", "decode", "decode-0"}}); err != nil {
		t.Fatal(err)
	}
	if got := o.current().list(); !reflect.DeepEqual(got, []string{"prefill", "decode", "decode-0"}) {
		t.Fatalf("order %v", got)
	}
}

// TestRunsByIDNamedByRoster: the runs table keeps pids by instance id and
// answers the gateway's names through the roster, so a rename moves
// nothing in it.
func TestRunsByIDNamedByRoster(t *testing.T) {
	t.Parallel()
	runs := NewRuns()
	if got := runs.PIDs("decode"); got != nil {
		t.Fatalf("before a roster: %v", got)
	}
	o := newTestRoster(t, "decode")
	runs.lookup(func(role string) (int, bool) {
		m, ok := o.current().route(role)
		return m.id, ok
	})
	dec, _ := o.current().find("decode")
	runs.set(dec.id, 4242)
	if got := runs.PIDs("decode"); !reflect.DeepEqual(got, []int{4242}) {
		t.Fatalf("PIDs(decode) = %v", got)
	}
	if err := o.rename(dec.id, "decode-0"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"decode-0", "decode"} {
		if got := runs.PIDs(name); !reflect.DeepEqual(got, []int{4242}) {
			t.Fatalf("after the rename PIDs(%s) = %v", name, got)
		}
	}
	runs.set(dec.id, 0)
	if got := runs.PIDs("decode-0"); got != nil {
		t.Fatalf("no run: %v", got)
	}
	if got := runs.PIDs("prefill"); got != nil {
		t.Fatalf("unknown role: %v", got)
	}
}

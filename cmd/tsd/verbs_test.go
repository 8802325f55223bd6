package main

import (
	"testing"

	"github.com/alecthomas/kong"

	"github.com/tsd-project/tsd/verbs"
)

// The CLI and the dashboard's `:` line declare their shared verbs once:
// each dashboard verb that the CLI also has takes the CLI's flags for it,
// word for word (the same verbs types), and its first positional the
// same kind of word.
func TestVerbsDeclaredOnce(t *testing.T) {
	var c cli
	k, err := newParser(&c)
	if err != nil {
		t.Fatal(err)
	}
	var g verbs.Dashboard
	d, err := verbs.NewDashboard(&g)
	if err != nil {
		t.Fatal(err)
	}
	shared := 0
	for _, name := range verbs.Verbs(d.Model.Node) {
		dv := verbs.Find(d.Model.Node, name)
		cv := verbs.Find(k.Model.Node, name)
		if cv == nil {
			continue // a dashboard verb (inspect, sort, ctx…)
		}
		shared++
		cli := map[string]*kong.Flag{}
		for _, f := range cv.Flags {
			cli[f.Name] = f
		}
		for _, f := range dv.Flags {
			cf, ok := cli[f.Name]
			if !ok || cf.Help != f.Help || cf.PlaceHolder != f.PlaceHolder {
				t.Errorf("%s --%s: the CLI's is %+v, the dashboard's %q", name, f.Name, cf, f.Help)
			}
		}
		if len(dv.Positional) > 0 && len(cv.Positional) > 0 {
			dk, ck := dv.Positional[0].Tag.Get("complete"), cv.Positional[0].Tag.Get("complete")
			if dk == "" || ck == "" {
				t.Errorf("%s: a first positional without a complete tag (CLI %q, dashboard %q)", name, ck, dk)
			}
		}
	}
	if shared < 5 {
		t.Fatalf("only %d verbs shared between the CLI and the : line", shared)
	}
	for _, name := range []string{"restart", "start"} {
		dv, cv := verbs.Find(d.Model.Node, name), verbs.Find(k.Model.Node, name)
		if dv.Positional[0].Help != cv.Positional[0].Help {
			t.Errorf("%s ROLE: %q vs %q", name, cv.Positional[0].Help, dv.Positional[0].Help)
		}
	}
}

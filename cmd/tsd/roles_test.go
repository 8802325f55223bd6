package main

import (
	"strings"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// TestResolveRole pins what a ROLE argument covers: an instance, a replica
// group (every instance, flagged so restart goes rolling), a kind only
// where the verb takes one, "gateway" only for logs, and an unknown name
// refused with the closest one and the roles listed.
func TestResolveRole(t *testing.T) {
	pd := []snapshot.RoleStatus{
		{Name: "prefill", Kind: "prefill", Group: "prefill"},
		{Name: "decode-0", Kind: "decode", Group: "decode"},
		{Name: "decode-1", Kind: "decode", Group: "decode"},
	}
	kinds := []snapshot.RoleStatus{
		{Name: "decode-a", Kind: "decode", Group: "decode-a"},
		{Name: "decode-b", Kind: "decode", Group: "decode-b"},
	}
	single := []snapshot.RoleStatus{{Name: "decode", Kind: "decode", Group: "decode"}}
	rows := []struct {
		name  string
		roles []snapshot.RoleStatus
		arg   string
		rules roleRules
		want  string // instances joined, "" when refused
		group bool
		kind  bool
		gw    bool
		err   []string
	}{
		{name: "an instance", roles: pd, arg: "decode-1", want: "decode-1"},
		{name: "a replica group", roles: pd, arg: "decode", want: "decode-0,decode-1", group: true},
		{name: "a group of one is not rolling", roles: single, arg: "decode", want: "decode"},
		{name: "an entry without replicas", roles: pd, arg: "prefill", want: "prefill"},
		{name: "gateway for logs", roles: pd, arg: "gateway", rules: roleRules{gateway: true}, want: "gateway", gw: true},
		{name: "gateway elsewhere is unknown", roles: pd, arg: "gateway", err: []string{`unknown role "gateway"`}},
		{name: "a kind with --rolling", roles: kinds, arg: "decode", rules: roleRules{kind: true}, want: "decode-a,decode-b", kind: true},
		{name: "a kind otherwise says what to type", roles: kinds, arg: "decode",
			err: []string{`"decode" is the kind of decode-a, decode-b`, "tsd restart --rolling decode"}},
		{name: "a typo", roles: pd, arg: "decdoe", err: []string{`unknown role "decdoe" (did you mean "decode"?)`, "the roles are prefill, decode (decode-0, decode-1)"}},
		{name: "an instance typo", roles: pd, arg: "decode-2", err: []string{`(did you mean "decode-0"?)`}},
		{name: "nothing close", roles: pd, arg: "encode-9000", err: []string{`unknown role "encode-9000"; the roles are`}},
	}
	for _, r := range rows {
		got, err := resolveRole(r.roles, r.arg, r.rules)
		if len(r.err) > 0 {
			ee, ok := err.(*exitError)
			if !ok || ee.code != 2 {
				t.Errorf("%s: %+v %v, want a refusal (exit 2)", r.name, got, err)
				continue
			}
			for _, m := range r.err {
				if !strings.Contains(ee.msg, m) {
					t.Errorf("%s: %q lacks %q", r.name, ee.msg, m)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", r.name, err)
			continue
		}
		if s := strings.Join(got.instances, ","); s != r.want || got.group != r.group || got.kind != r.kind || got.gateway != r.gw {
			t.Errorf("%s: %+v, want %s group=%v kind=%v gateway=%v", r.name, got, r.want, r.group, r.kind, r.gw)
		}
	}
}

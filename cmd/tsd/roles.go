package main

import (
	"fmt"
	"strings"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

// What a ROLE argument names in a running deployment. With replicas a
// profile entry "decode" runs as decode-0, decode-1: the entry's name is
// a replica group, and `tsd restart decode` restarts the group one
// instance at a time, `stop`/`start decode` act on every instance, `logs
// decode` interleaves them. A name that is none of these is refused with
// the closest one.

// roleArg is a resolved ROLE argument.
type roleArg struct {
	arg       string
	instances []string // role instances it covers, in plan order
	group     bool     // a replica group (the profile entry of several instances)
	kind      bool     // a kind shared by several entries (only --rolling takes it)
	gateway   bool     // the gateway's log (logs only)
}

// roleRules says which names a verb takes beside instances and groups.
type roleRules struct {
	gateway bool // "gateway": the gateway's log
	kind    bool // a kind: every role of it
}

// resolveRole maps arg onto the deployment's roles (pure; the table test
// is in roles_test.go). An instance name wins over a group of the same
// name (a profile entry without replicas is both), a group over a kind.
func resolveRole(roles []snapshot.RoleStatus, arg string, rules roleRules) (roleArg, error) {
	if rules.gateway && arg == supervisor.GatewayLogSource {
		return roleArg{arg: arg, instances: []string{arg}, gateway: true}, nil
	}
	var group, kind []string
	for _, r := range roles {
		if r.Name == arg {
			return roleArg{arg: arg, instances: []string{arg}}, nil
		}
		if r.Group == arg {
			group = append(group, r.Name)
		}
		if r.Kind == arg {
			kind = append(kind, r.Name)
		}
	}
	switch {
	case len(group) > 0:
		return roleArg{arg: arg, instances: group, group: len(group) > 1}, nil
	case len(kind) > 0 && rules.kind:
		return roleArg{arg: arg, instances: kind, kind: true}, nil
	case len(kind) > 0:
		return roleArg{}, &exitError{code: 2, msg: fmt.Sprintf("tsd: %q is the kind of %s, not one role: name one of them, or `tsd restart --rolling %s` for all of them one at a time",
			arg, strings.Join(kind, ", "), arg)}
	}
	var names []string
	for _, r := range roles {
		names = append(names, r.Name)
		if r.Group != "" && r.Group != r.Name && !contains(names, r.Group) {
			names = append(names, r.Group)
		}
	}
	if rules.gateway {
		names = append(names, supervisor.GatewayLogSource)
	}
	return roleArg{}, &exitError{code: 2, msg: fmt.Sprintf("tsd: unknown role %q%s; the roles are %s",
		arg, profiles.DidYouMean(arg, names), describeRoles(roles))}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// describeRoles lists the roles, replicas under their group:
// "prefill, decode (decode-0, decode-1)".
func describeRoles(roles []snapshot.RoleStatus) string {
	var parts []string
	seen := map[string]bool{}
	for _, r := range roles {
		g := r.Group
		if g == "" || g == r.Name {
			parts = append(parts, r.Name)
			continue
		}
		if seen[g] {
			continue
		}
		seen[g] = true
		var members []string
		for _, o := range roles {
			if o.Group == g {
				members = append(members, o.Name)
			}
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", g, strings.Join(members, ", ")))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

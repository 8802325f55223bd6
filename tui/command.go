package tui

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tsd-project/tsd/snapshot"
)

// A `:` command is what has no key, or a key on another page: typed as a
// verb and (for most) a role, like k9s's command line.
type command struct {
	verb string // restart | stop | start | logs | inspect | sort | quit | help
	arg  string // role (or "" / "gateway" for logs, a column for sort)
}

// commandVerbs are the verbs with the argument each takes; aliases map to
// them. One table: the parser, the completion hint and the help page read
// it.
var commandVerbs = []struct {
	verb, arg, help string
	aliases         []string
}{
	{"restart", "ROLE", "restart a role", []string{"r"}},
	{"stop", "ROLE", "stop a role", nil},
	{"start", "ROLE", "start a stopped role", nil},
	{"logs", "[ROLE]", "logs of a role; none: every role merged", []string{"l", "log"}},
	{"inspect", "ROLE", "rank inspector of a role", []string{"i"}},
	{"events", "", "every event the daemon keeps, filterable", []string{"ev"}},
	{"sort", "COLUMN", "sort the roles table: name, kind, state, restarts, inflight, gpumem", nil},
	{"help", "", "the help page", []string{"h", "?"}},
	{"quit", "", "quit the dashboard", []string{"q"}},
}

// GatewaySource is the log source of the embedded gateway's own lines (one
// access line per request), next to the roles' in the logs page.
const GatewaySource = "gateway"

// sortKeys are the roles table's sort orders.
var sortKeys = []string{"name", "kind", "state", "restarts", "inflight", "gpumem"}

// parseCommand reads one command line against the roles that exist; the
// error says what is wrong in words for the message line.
func parseCommand(line string, roles []string) (command, error) {
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), ":"))
	if len(f) == 0 {
		return command{}, fmt.Errorf("empty command (try :restart ROLE, :logs ROLE, :sort state)")
	}
	verb := strings.ToLower(f[0])
	for _, v := range commandVerbs {
		known := v.verb == verb
		for _, a := range v.aliases {
			known = known || a == verb
		}
		if !known {
			continue
		}
		c := command{verb: v.verb}
		switch {
		case v.arg == "" && len(f) > 1:
			return command{}, fmt.Errorf(":%s takes no argument", v.verb)
		case v.arg == "":
			return c, nil
		case len(f) > 2:
			return command{}, fmt.Errorf(":%s takes one %s", v.verb, strings.Trim(v.arg, "[]"))
		case len(f) == 1 && !strings.HasPrefix(v.arg, "["):
			return command{}, fmt.Errorf(":%s needs a %s", v.verb, v.arg)
		case len(f) == 1:
			return c, nil
		}
		c.arg = f[1]
		if v.verb == "sort" {
			if !contains(sortKeys, c.arg) {
				return command{}, fmt.Errorf("cannot sort by %q: one of %s", c.arg, strings.Join(sortKeys, ", "))
			}
			return c, nil
		}
		if v.verb == "logs" && (c.arg == "all" || c.arg == "*") {
			c.arg = ""
			return c, nil
		}
		if v.verb == "logs" && c.arg == GatewaySource {
			return c, nil // the gateway's access log: a source, not a role
		}
		if !contains(roles, c.arg) {
			return command{}, fmt.Errorf("no role %q%s", c.arg, closest(c.arg, roles))
		}
		return c, nil
	}
	return command{}, fmt.Errorf("unknown command %q%s", verb, closest(verb, verbNames()))
}

func verbNames() []string {
	out := make([]string, len(commandVerbs))
	for i, v := range commandVerbs {
		out[i] = v.verb
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// closest suggests the candidate sharing the longest prefix with s.
func closest(s string, cands []string) string {
	best, bestN := "", 0
	for _, c := range cands {
		n := 0
		for n < len(s) && n < len(c) && s[n] == c[n] {
			n++
		}
		if n > bestN {
			best, bestN = c, n
		}
	}
	if bestN == 0 {
		if len(cands) > 0 && len(cands) <= 6 {
			sorted := append([]string(nil), cands...)
			sort.Strings(sorted)
			return " (one of " + strings.Join(sorted, ", ") + ")"
		}
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// sortedRoles returns a sorted copy: by name, or by a column with the
// name breaking ties (most restarts, in flight and GPU memory first).
func sortedRoles(in []snapshot.RoleStatus, by string) []snapshot.RoleStatus {
	out := append([]snapshot.RoleStatus(nil), in...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		switch by {
		case "kind":
			if a.Kind != b.Kind {
				return a.Kind < b.Kind
			}
		case "state":
			if a.State != b.State {
				return a.State < b.State
			}
		case "restarts":
			if a.Restarts != b.Restarts {
				return a.Restarts > b.Restarts
			}
		case "inflight":
			if a.InFlight != b.InFlight {
				return a.InFlight > b.InFlight
			}
		case "gpumem":
			if a.GPUMemB != b.GPUMemB {
				return a.GPUMemB > b.GPUMemB
			}
		}
		return a.Name < b.Name
	})
	return out
}

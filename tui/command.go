package tui

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// A `:` command is what has no key, or a key on another page: typed as a
// verb and (for most) a role, like k9s's command line.
type command struct {
	verb string // restart | stop | start | scale | logs | inspect | describe | sort | split | events | planner | help | quit
	arg  string // role (or "" / "gateway" for logs, a column for sort)
	// now: --now on restart and stop (skip the drain, as the CLI's flag).
	now bool
	// group: arg names a replica group, not one instance.
	group bool
	// desc: the sort direction (sort only; the column's own default
	// unless asc or desc was typed).
	desc    bool
	descSet bool
	// replicas and gpus: scale only (ENTRY=N, --gpus G,G).
	replicas int
	gpus     []string
}

// commandVerbs are the verbs with the argument each takes; aliases map to
// them. One table: the parser, the completion and the help page read it.
var commandVerbs = []struct {
	verb, arg, help string
	aliases         []string
}{
	{"restart", "[--now] ROLE", "restart a role (a replica group: one at a time); --now skips the drain", []string{"r"}},
	{"stop", "[--now] ROLE", "stop a role; --now skips the drain", nil},
	{"start", "ROLE", "start a stopped role", nil},
	{"scale", "ENTRY=N [--gpus G,G]", "replicas of a profile entry, on free GPUs or the ones given (tsd scale; the file is not rewritten)", nil},
	{"logs", "[ROLE]", "logs of a role; none: every role merged", []string{"l", "log"}},
	{"inspect", "ROLE", "rank inspector of a role", []string{"i"}},
	{"describe", "ROLE", "a role's plan: argv, env, ports, GPUs, restart policy", []string{"d", "desc"}},
	{"sort", "[COLUMN [asc|desc]]", "sort the roles table by a column; none: the plan's order", nil},
	{"split", "", "the roles table with the selected role's live log under it (x)", nil},
	{"events", "", "every event the daemon keeps, filterable", []string{"ev"}},
	{"planner", "", "the SLO planner: targets against measured, the proposal and why (P)", []string{"slo"}},
	{"help", "", "the help page", []string{"h", "?"}},
	{"quit", "", "quit the dashboard", []string{"q"}},
}

// GatewaySource is the log source of the embedded gateway's own lines (one
// access line per request), next to the roles' in the logs page.
const GatewaySource = "gateway"

// commandTarget is what a command line may name: role instances and
// replica groups.
type commandTarget struct {
	roles   []string
	groups  []string // replica groups of two or more instances
	entries []string // every profile entry (what :scale takes)
}

// lookupVerb finds a verb or alias.
func lookupVerb(v string) (int, bool) {
	v = strings.ToLower(v)
	for i, c := range commandVerbs {
		if c.verb == v {
			return i, true
		}
		for _, a := range c.aliases {
			if a == v {
				return i, true
			}
		}
	}
	return 0, false
}

// parseCommand reads one command line against the roles that exist; the
// error says what is wrong in words for the message line.
func parseCommand(line string, tg commandTarget) (command, error) {
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), ":"))
	if len(f) == 0 {
		return command{}, fmt.Errorf("empty command (try :restart ROLE, :logs ROLE, :sort state)")
	}
	vi, ok := lookupVerb(f[0])
	if !ok {
		return command{}, fmt.Errorf("unknown command %q%s", f[0], closest(strings.ToLower(f[0]), verbNames()))
	}
	v := commandVerbs[vi]
	c := command{verb: v.verb}
	args := f[1:]
	if c.verb == "restart" || c.verb == "stop" {
		kept := args[:0:0]
		for _, a := range args {
			if a == "--now" || a == "-now" {
				c.now = true
				continue
			}
			kept = append(kept, a)
		}
		args = kept
	}
	switch c.verb {
	case "scale":
		return parseScale(c, args, tg)
	case "sort":
		if len(args) == 0 || len(args) == 1 && args[0] == "plan" {
			return c, nil // the plan's order
		}
		if len(args) > 2 {
			return command{}, fmt.Errorf(":sort takes a COLUMN and asc or desc")
		}
		ci, ok := findColumn(args[0])
		if !ok {
			return command{}, fmt.Errorf("cannot sort by %q: one of %s", args[0], strings.Join(columnIDs(), ", "))
		}
		c.arg, c.desc = tableColumns[ci].id, tableColumns[ci].desc
		if len(args) == 2 {
			switch strings.ToLower(args[1]) {
			case "asc":
				c.desc, c.descSet = false, true
			case "desc":
				c.desc, c.descSet = true, true
			default:
				return command{}, fmt.Errorf(":sort %s: %q is not asc or desc", args[0], args[1])
			}
		}
		return c, nil
	}
	needsArg := v.arg != "" && !strings.HasPrefix(v.arg, "[")
	if c.verb == "restart" || c.verb == "stop" {
		needsArg = true
	}
	switch {
	case v.arg == "" && len(args) > 0:
		return command{}, fmt.Errorf(":%s takes no argument", v.verb)
	case len(args) > 1:
		return command{}, fmt.Errorf(":%s takes one ROLE", v.verb)
	case len(args) == 0 && needsArg:
		return command{}, fmt.Errorf(":%s needs a ROLE", v.verb)
	case len(args) == 0:
		return c, nil
	}
	c.arg = args[0]
	if c.verb == "logs" && (c.arg == "all" || c.arg == "*") {
		c.arg = ""
		return c, nil
	}
	if c.verb == "logs" && c.arg == GatewaySource {
		return c, nil // the gateway's access log: a source, not a role
	}
	if contains(tg.roles, c.arg) {
		return c, nil
	}
	if contains(tg.groups, c.arg) {
		switch c.verb {
		case "restart":
			c.group = true
			return c, nil
		default:
			return command{}, fmt.Errorf("%s is a replica group: name one instance (%s) or :restart %s for all, one at a time",
				c.arg, strings.Join(groupMembers(tg.roles, c.arg), ", "), c.arg)
		}
	}
	return command{}, fmt.Errorf("no role %q%s", c.arg, closest(c.arg, append(append([]string(nil), tg.roles...), tg.groups...)))
}

// parseScale reads :scale ENTRY=N [--gpus G,G].
func parseScale(c command, args []string, tg commandTarget) (command, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--gpus" && i+1 < len(args):
			i++
			c.gpus = strings.Split(args[i], ",")
		case strings.HasPrefix(a, "--gpus="):
			c.gpus = strings.Split(strings.TrimPrefix(a, "--gpus="), ",")
		case strings.Contains(a, "=") && c.arg == "":
			entry, n, _ := strings.Cut(a, "=")
			k, err := strconv.Atoi(n)
			if err != nil || k < 1 {
				return command{}, fmt.Errorf(":scale %s: want ENTRY=N with N of 1 or more, e.g. decode=3", a)
			}
			if !contains(tg.entries, entry) {
				return command{}, fmt.Errorf(":scale: no profile entry %q%s", entry, closest(entry, tg.entries))
			}
			c.arg, c.replicas = entry, k
		default:
			return command{}, fmt.Errorf(":scale takes ENTRY=N and --gpus G,G, not %q", a)
		}
	}
	if c.arg == "" {
		return command{}, fmt.Errorf(":scale needs ENTRY=N (e.g. :scale decode=3)")
	}
	for _, g := range c.gpus {
		if g == "" {
			return command{}, fmt.Errorf(":scale --gpus: an empty GPU")
		}
	}
	return c, nil
}

// groupMembers are the instances of a replica group by the planner's
// naming (GROUP-N).
func groupMembers(roles []string, g string) []string {
	var out []string
	for _, r := range roles {
		if strings.HasPrefix(r, g+"-") {
			out = append(out, r)
		}
	}
	return out
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

// completions are the words that may stand where the last word of line
// is being typed, sorted: verbs first, then each verb's arguments (roles,
// groups, columns, flags).
func completions(line string, tg commandTarget) (prefix string, cands []string) {
	words := strings.Fields(line)
	typing := ""
	if len(words) > 0 && !strings.HasSuffix(line, " ") {
		typing = words[len(words)-1]
		words = words[:len(words)-1]
	}
	var pool []string
	if len(words) == 0 {
		pool = verbNames()
	} else {
		vi, ok := lookupVerb(words[0])
		if !ok {
			return typing, nil
		}
		verb := commandVerbs[vi].verb
		args := words[1:]
		nowGiven := false
		for _, a := range args {
			if a == "--now" {
				nowGiven = true
			}
		}
		named := len(args)
		if nowGiven {
			named--
		}
		switch verb {
		case "restart":
			if named == 0 {
				pool = append(append(pool, tg.roles...), tg.groups...)
				if !nowGiven {
					pool = append(pool, "--now")
				}
			}
		case "stop":
			if named == 0 {
				pool = append(pool, tg.roles...)
				if !nowGiven {
					pool = append(pool, "--now")
				}
			}
		case "scale":
			if named == 0 {
				for _, e := range tg.entries {
					pool = append(pool, e+"=")
				}
			}
		case "start", "inspect", "describe":
			if named == 0 {
				pool = append(pool, tg.roles...)
			}
		case "logs":
			if named == 0 {
				pool = append(append(pool, tg.roles...), GatewaySource, "all")
			}
		case "sort":
			switch named {
			case 0:
				pool = append(columnIDs(), "plan")
			case 1:
				pool = []string{"asc", "desc"}
			}
		}
	}
	for _, c := range pool {
		if strings.HasPrefix(c, typing) {
			cands = append(cands, c)
		}
	}
	return typing, cands
}

// completeLine is what Tab does to a command line: the typed word grows
// to the candidates' longest common prefix (a single candidate is
// completed with a space after it); cands lists them all for the
// footer.
func completeLine(line string, tg commandTarget) (out string, cands []string) {
	typing, cands := completions(line, tg)
	if len(cands) == 0 {
		return line, nil
	}
	base := strings.TrimSuffix(line, typing)
	if len(cands) == 1 {
		return base + cands[0] + " ", cands
	}
	return base + commonPrefix(cands), cands
}

func commonPrefix(ss []string) string {
	p := ss[0]
	for _, s := range ss[1:] {
		for !strings.HasPrefix(s, p) {
			p = p[:len(p)-1]
		}
	}
	return p
}

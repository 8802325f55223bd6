package tui

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/alecthomas/kong"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/verbs"
)

// A `:` command is what has no key, or a key on another page: typed as a
// verb and (for most) a role, like k9s's command line. Its grammar is
// verbs.Dashboard, which shares its verbs' words with the CLI (one
// declaration, parsed by kong on both sides); this file turns a parse into
// a command and checks it against the deployment on screen.
type command struct {
	verb string // a verbs.Dashboard verb: restart | stop | start | scale | apply | signal | logs | …
	arg  string // role (or "" / "gateway" for logs, a column for sort, a profile, a deployment)
	// now: --now on restart and stop (skip the drain, as the CLI's flag).
	now bool
	// group: arg names a replica group, not one instance (a restart then
	// takes its instances one at a time); rolling: --rolling was typed.
	group, rolling bool
	// desc: the sort direction (sort only; the column's own default
	// unless asc or desc was typed).
	desc bool
	// replicas and gpus: scale only (ENTRY=N, --gpus G,G).
	replicas int
	gpus     []string
	// signal: signal only, the name without SIG (TERM).
	signal string
}

// GatewaySource is the log source of the embedded gateway's own lines (one
// access line per request), next to the roles' in the logs page.
const GatewaySource = "gateway"

// commandTarget is what a command line may name: role instances, replica
// groups, profile entries, and the deployments :ctx may switch to.
type commandTarget struct {
	roles       []string
	groups      []string // replica groups of two or more instances
	entries     []string // every profile entry (what :scale takes)
	deployments []string // running deployments (:ctx), as last listed
}

// targetsOf are the names a command line may use on s.
func targetsOf(s *snapshot.Snapshot) commandTarget {
	var tg commandTarget
	size := map[string]int{}
	for _, r := range s.Roles {
		tg.roles = append(tg.roles, r.Name)
		if r.Group != "" {
			size[r.Group]++
		}
	}
	for _, r := range s.Roles {
		if size[r.Group] > 1 && !contains(tg.groups, r.Group) && !contains(tg.roles, r.Group) {
			tg.groups = append(tg.groups, r.Group)
		}
		if r.Group != "" && !r.Remote && !contains(tg.entries, r.Group) {
			tg.entries = append(tg.entries, r.Group)
		}
	}
	sort.Strings(tg.roles)
	sort.Strings(tg.groups)
	sort.Strings(tg.entries)
	return tg
}

// Words implements verbs.Source: the dashboard's words of each kind.
func (tg commandTarget) Words(kind string) []string {
	switch kind {
	case verbs.KindRole:
		return append(append([]string(nil), tg.roles...), tg.groups...)
	case verbs.KindInstance:
		return tg.roles
	case verbs.KindLog:
		return append(append([]string(nil), tg.roles...), GatewaySource, "all")
	case verbs.KindEntry:
		out := make([]string, len(tg.entries))
		for i, e := range tg.entries {
			out[i] = e + "="
		}
		return out
	case verbs.KindDeployment:
		return tg.deployments
	case verbs.KindColumn:
		return append(columnIDs(), "plan")
	case verbs.KindOrder:
		return []string{"asc", "desc"}
	case verbs.KindSignal:
		return verbs.Signals
	}
	return nil
}

// grammar is a fresh parser of the `:` grammar and the value it fills.
// Built per use: a line is parsed on enter and completed on tab, and a
// parser of its own keeps concurrent dashboards (tests) apart.
func grammar() (*kong.Kong, *verbs.Dashboard) {
	var g verbs.Dashboard
	k, err := verbs.NewDashboard(&g)
	if err != nil {
		panic("tui: the : grammar does not build: " + err.Error()) // a programming error, caught by every test
	}
	return k, &g
}

// verbHelp is one `:` verb as the footer and the `?` page show it.
type verbHelp struct {
	name, synopsis, help string
}

// dashboardHelp is every `:` verb, in the grammar's order: read once
// from the grammar (it never changes), not once a frame.
var dashboardHelp = sync.OnceValue(func() []verbHelp {
	k, _ := grammar()
	var out []verbHelp
	for _, name := range verbs.Verbs(k.Model.Node) {
		n := verbs.Find(k.Model.Node, name)
		args := []string{":" + name}
		for _, a := range n.Positional {
			w := verbs.Placeholder(a)
			if !a.Required {
				w = "[" + w + "]"
			}
			args = append(args, w)
		}
		out = append(out, verbHelp{name: name, synopsis: strings.Join(args, " "), help: n.Help})
	}
	return out
})

// dashboardVerbs are the `:` verbs, in the grammar's order.
func dashboardVerbs() []string {
	hs := dashboardHelp()
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.name
	}
	return out
}

// parseCommand reads one command line against the roles that exist; the
// error says what is wrong in words for the message line.
func parseCommand(line string, tg commandTarget) (command, error) {
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), ":"))
	if len(f) == 0 {
		return command{}, fmt.Errorf("empty command (try :restart ROLE, :logs ROLE, :sort state)")
	}
	f[0] = strings.ToLower(f[0])
	k, g := grammar()
	node := verbs.Find(k.Model.Node, f[0])
	if node == nil {
		return command{}, fmt.Errorf("unknown command %q%s", f[0], closest(f[0], verbs.Verbs(k.Model.Node)))
	}
	if _, err := k.Parse(f); err != nil {
		return command{}, usageError(node, err)
	}
	c := command{verb: node.Name}
	switch c.verb {
	case "restart":
		c.arg, c.now, c.rolling = g.Restart.Role, g.Restart.Now, g.Restart.Rolling
		return c.checkRole(tg, true)
	case "stop":
		c.arg, c.now = g.Stop.Role, g.Stop.Now
		return c.checkRole(tg, false)
	case "start":
		c.arg = g.Start.Role
		return c.checkRole(tg, false)
	case "inspect":
		c.arg = g.Inspect.Role
		return c.checkRole(tg, false)
	case "describe":
		c.arg = g.Describe.Role
		return c.checkRole(tg, false)
	case "signal":
		c.arg, c.signal = g.Signal.Role, strings.TrimPrefix(strings.ToUpper(g.Signal.Signal), "SIG")
		if c.signal == "" {
			c.signal = verbs.Signals[0]
		}
		if !contains(verbs.Signals, c.signal) {
			return command{}, fmt.Errorf(":signal: %q is not one of %s", g.Signal.Signal, strings.Join(verbs.Signals, ", "))
		}
		return c.checkRole(tg, false)
	case "logs":
		c.arg = g.Logs.Role
		switch c.arg {
		case "", "all", "*":
			c.arg = ""
			return c, nil
		case GatewaySource:
			return c, nil // the gateway's access log: a source, not a role
		}
		return c.checkRole(tg, false)
	case "scale":
		return parseScale(c, g.Scale, tg)
	case "sort":
		return parseSort(c, g.Sort)
	case "apply":
		c.arg = g.Apply.Profile
	case "ctx":
		c.arg = g.Ctx.Name
	}
	return c, nil
}

// usageError is a parse error in the `:` line's words: what was wrong and
// the verb's synopsis.
func usageError(node *kong.Node, err error) error {
	msg := err.Error()
	var pe *kong.ParseError
	if errors.As(err, &pe) {
		msg = pe.Error()
	}
	usage := verbs.Usage(node)
	switch {
	case len(node.Positional) == 0 && strings.HasPrefix(msg, "unexpected argument"):
		return fmt.Errorf(":%s takes no argument", node.Name)
	case strings.HasPrefix(msg, "expected "):
		missing := usage[strings.LastIndex(usage, " ")+1:]
		for _, a := range node.Positional {
			if a.Required {
				missing = verbs.Placeholder(a)
				break
			}
		}
		return fmt.Errorf(":%s needs %s (:%s)", node.Name, missing, usage)
	case strings.HasPrefix(msg, "unexpected argument "):
		return fmt.Errorf(":%s: unexpected %q (:%s)", node.Name, strings.TrimPrefix(msg, "unexpected argument "), usage)
	}
	return fmt.Errorf(":%s: %s (:%s)", node.Name, msg, usage)
}

// checkRole checks c.arg against the roles on screen; a replica group is
// a role only where groupOK (a restart: one instance at a time).
func (c command) checkRole(tg commandTarget, groupOK bool) (command, error) {
	if contains(tg.roles, c.arg) {
		return c, nil
	}
	if contains(tg.groups, c.arg) {
		if groupOK {
			c.group = true
			return c, nil
		}
		return command{}, fmt.Errorf("%s is a replica group: name one instance (%s) or :restart %s for all, one at a time",
			c.arg, strings.Join(groupMembers(tg.roles, c.arg), ", "), c.arg)
	}
	if c.rolling && c.arg != "" {
		return c, nil // a kind: the daemon says whether it has one
	}
	return command{}, fmt.Errorf("no role %q%s", c.arg, closest(c.arg, append(append([]string(nil), tg.roles...), tg.groups...)))
}

// parseSort reads :sort [COLUMN [asc|desc]].
func parseSort(c command, s verbs.Sort) (command, error) {
	if s.Column == "" || s.Column == "plan" && s.Order == "" {
		return c, nil // the plan's order
	}
	ci, ok := findColumn(s.Column)
	if !ok {
		return command{}, fmt.Errorf("cannot sort by %q: one of %s", s.Column, strings.Join(columnIDs(), ", "))
	}
	c.arg, c.desc = tableColumns[ci].id, tableColumns[ci].desc
	switch strings.ToLower(s.Order) {
	case "":
	case "asc":
		c.desc = false
	case "desc":
		c.desc = true
	default:
		return command{}, fmt.Errorf(":sort %s: %q is not asc or desc", s.Column, s.Order)
	}
	return c, nil
}

// parseScale reads :scale ENTRY=N [--gpus G,G].
func parseScale(c command, s verbs.Scale, tg commandTarget) (command, error) {
	for _, a := range s.Entries {
		entry, n, ok := strings.Cut(a, "=")
		if !ok || c.arg != "" {
			return command{}, fmt.Errorf(":scale takes ENTRY=N and --gpus G,G, not %q", a)
		}
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 {
			return command{}, fmt.Errorf(":scale %s: want ENTRY=N with N of 1 or more, e.g. decode=3", a)
		}
		if !contains(tg.entries, entry) {
			return command{}, fmt.Errorf(":scale: no profile entry %q%s", entry, closest(entry, tg.entries))
		}
		c.arg, c.replicas = entry, k
	}
	if s.GPUs != "" {
		c.gpus = strings.Split(s.GPUs, ",")
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
// is being typed: verbs first, then what the grammar says each verb's
// positional takes (roles, groups, columns, signals…), then its flags
// while no argument is typed or a flag is begun.
func completions(line string, tg commandTarget) (typing string, cands []string) {
	words := strings.Fields(line)
	if len(words) > 0 && !strings.HasSuffix(line, " ") {
		typing = words[len(words)-1]
		words = words[:len(words)-1]
	}
	k, _ := grammar()
	var pool []string
	if len(words) == 0 {
		pool = verbs.Verbs(k.Model.Node)
	} else {
		words[0] = strings.ToLower(words[0])
		if verbs.Find(k.Model.Node, words[0]) == nil {
			return typing, nil
		}
		c := verbs.Complete(k.Model.Node, words, tg)
		pool = c.Words
		if strings.HasPrefix(typing, "-") || !hasPositional(words[1:]) {
			pool = append(pool, c.Flags...)
		}
	}
	for _, c := range pool {
		if strings.HasPrefix(c, typing) {
			cands = append(cands, c)
		}
	}
	return typing, cands
}

// hasPositional: a word that is no flag was typed.
func hasPositional(words []string) bool {
	for _, w := range words {
		if !strings.HasPrefix(w, "-") {
			return true
		}
	}
	return false
}

// completeLine is what Tab does to a command line: the typed word grows
// to the candidates' longest common prefix (a single candidate is
// completed with a space after it, unless it ends in "="); cands lists
// them all for the footer.
func completeLine(line string, tg commandTarget) (out string, cands []string) {
	typing, cands := completions(line, tg)
	if len(cands) == 0 {
		return line, nil
	}
	base := strings.TrimSuffix(line, typing)
	if len(cands) == 1 {
		if strings.HasSuffix(cands[0], "=") {
			return base + cands[0], cands
		}
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

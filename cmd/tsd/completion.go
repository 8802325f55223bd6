package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/supervisor"
	"github.com/tsd-project/tsd/verbs"
)

// completionCmd prints a completion script. Verbs and flags come from the
// CLI's own kong model, so they never drift from what tsd parses; what a
// positional argument takes (a ROLE, a deployment NAME, a profile, a
// word like `slurm`) is asked of tsd itself at each Tab (`tsd _complete
// WORDS...`, completeArgs), so every shell offers the same thing.
type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

func (c completionCmd) Run(k *kong.Kong) error {
	return writeCompletion(os.Stdout, c.Shell, k.Model)
}

// completeCmd is the shells' side door: the words typed after `tsd` up to
// the one being completed; it prints one candidate a line, and a first
// line ":files" when file names fit there too.
type completeCmd struct {
	Words []string `arg:"" optional:"" passthrough:"" help:"Words typed after tsd, before the one being completed."`
}

func (c completeCmd) Run(k *kong.Kong) error {
	cands, files := completeArgs(k.Model.Node, c.Words, liveCompletionSource{})
	if files {
		fmt.Println(":files")
	}
	for _, s := range cands {
		fmt.Println(s)
	}
	return nil
}

// completionSource is what completion reads of the world.
type completionSource interface {
	Names() []string                   // deployment names (running or dead)
	Roles() []string                   // roles (instances, replica groups) of this directory's deployment, or the only one
	ProfileRoles(path string) []string // of a profile ("": the one beside us)
}

// completeArgs says what fits after words (the words after `tsd`, before
// the one being completed) in the CLI model app: candidates, and whether
// file names fit too. What each positional takes is its `complete` tag
// (verbs.Complete reads the same tags for the dashboard's `:` line).
func completeArgs(app *kong.Node, words []string, src completionSource) (cands []string, files bool) {
	c := verbs.Complete(app, words, shellKinds{src})
	return c.Words, c.Files
}

// shellKinds are a shell's words of each kind: a ROLE from the deployment
// a bare read-only verb would pick (this directory's, or the only one),
// else from the profile beside us; a group is a ROLE wherever an instance
// is (the CLI acts on each of its instances).
type shellKinds struct{ src completionSource }

func (s shellKinds) Words(kind string) []string {
	roles := func() []string {
		if rs := s.src.Roles(); len(rs) > 0 {
			return rs
		}
		return s.src.ProfileRoles("")
	}
	switch kind {
	case verbs.KindRole, verbs.KindInstance:
		return roles()
	case verbs.KindLog:
		return append(roles(), supervisor.GatewayLogSource)
	case verbs.KindDeployment:
		return s.src.Names()
	case verbs.KindSignal:
		return verbs.Signals
	}
	return nil
}

// liveCompletionSource reads the registry, the control socket and the
// profile in the current directory, each bounded: a Tab never hangs.
type liveCompletionSource struct{}

func (liveCompletionSource) Names() []string {
	var out []string
	for _, c := range deployments() {
		out = append(out, c.Name)
	}
	return out
}

// Roles asks the daemon a read-only verb would pick for its role
// instances, plus the names of replica groups.
func (liveCompletionSource) Roles() []string {
	f, err := (ctlTarget{}).pick(verbSpec{cmdline: "tsd", quiet: true}, "")
	if err != nil || f.dead || f.socket == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	s, err := supervisor.NewControlClient(f.socket).Status(ctx)
	if err != nil {
		return nil
	}
	var out []string
	groups := map[string]int{}
	for _, r := range s.Roles {
		out = append(out, r.Name)
		groups[r.Group]++
	}
	return append(out, replicaGroups(groups)...)
}

// replicaGroups is the sorted names with more than one instance.
func replicaGroups(count map[string]int) []string {
	var gs []string
	for g, n := range count {
		if g != "" && n > 1 {
			gs = append(gs, g)
		}
	}
	sort.Strings(gs)
	return gs
}

// ProfileRoles is the role instances (and replica groups) of a profile:
// path, else the one *.yaml profile of the current directory.
func (liveCompletionSource) ProfileRoles(path string) []string {
	if path == "" {
		m, _ := filepath.Glob("*.yaml")
		m2, _ := filepath.Glob("*.yml")
		m = append(m, m2...)
		if len(m) != 1 {
			return nil
		}
		path = m[0]
	}
	_, plan, _ := profiles.LoadPlan(path, profiles.StaticHostFacts())
	if plan == nil {
		return nil
	}
	var out []string
	groups := map[string]int{}
	for _, r := range plan.Roles {
		out = append(out, r.Name)
		groups[r.Group]++
	}
	return append(out, replicaGroups(groups)...)
}

type verbInfo struct {
	name, help string
	flags      []*kong.Flag
}

func visibleVerbs(app *kong.Application) []verbInfo {
	var out []verbInfo
	for _, n := range app.Children {
		if n.Hidden || n.Type != kong.CommandNode {
			continue
		}
		v := verbInfo{name: n.Name, help: n.Help}
		for _, f := range n.Flags {
			if !f.Hidden {
				v.flags = append(v.flags, f)
			}
		}
		out = append(out, v)
	}
	return out
}

func flagWords(fs []*kong.Flag) string {
	var w []string
	for _, f := range fs {
		w = append(w, "--"+f.Name)
		if f.Short != 0 {
			w = append(w, "-"+string(f.Short))
		}
	}
	return strings.Join(w, " ")
}

func writeCompletion(w io.Writer, shell string, app *kong.Application) error {
	verbs := visibleVerbs(app)
	switch shell {
	case "bash", "zsh":
		if shell == "zsh" {
			fmt.Fprintln(w, "autoload -U +X bashcompinit && bashcompinit")
		}
		names := make([]string, len(verbs))
		for i, v := range verbs {
			names[i] = v.name
		}
		fmt.Fprintln(w, "_tsd() {")
		fmt.Fprintln(w, `	local cur=${COMP_WORDS[COMP_CWORD]} verb=${COMP_WORDS[1]} flags="" line files=0`)
		fmt.Fprintln(w, `	COMPREPLY=()`)
		fmt.Fprintf(w, "\tif ((COMP_CWORD == 1)); then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(names, " ")+" --help --version")
		fmt.Fprintln(w, "\tcase $verb in")
		for _, v := range verbs {
			fmt.Fprintf(w, "\t%s) flags=%q ;;\n", v.name, flagWords(v.flags)+" --help")
		}
		fmt.Fprintln(w, "\tesac")
		fmt.Fprintln(w, `	if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$flags" -- "$cur")); return; fi`)
		fmt.Fprintln(w, `	while IFS= read -r line; do`)
		fmt.Fprintln(w, `		if [[ $line == :files ]]; then files=1; elif [[ $line == "$cur"* ]]; then COMPREPLY+=("$line"); fi`)
		fmt.Fprintln(w, `	done < <(command tsd _complete "${COMP_WORDS[@]:1:COMP_CWORD-1}" 2>/dev/null)`)
		fmt.Fprintln(w, `	if ((files)); then local f; while IFS= read -r f; do COMPREPLY+=("$f"); done < <(compgen -f -- "$cur"); fi`)
		fmt.Fprintln(w, "}")
		fmt.Fprintln(w, "complete -o filenames -F _tsd tsd")
	case "fish":
		fmt.Fprintln(w, "complete -c tsd -f")
		fmt.Fprintln(w, "complete -c tsd -l version -d 'Print the version'")
		for _, v := range verbs {
			fmt.Fprintf(w, "complete -c tsd -n __fish_use_subcommand -a %s -d %s\n", v.name, fishQuote(v.help))
			for _, f := range v.flags {
				short := ""
				if f.Short != 0 {
					short = " -s " + string(f.Short)
				}
				fmt.Fprintf(w, "complete -c tsd -n '__fish_seen_subcommand_from %s' -l %s%s -d %s\n", v.name, f.Name, short, fishQuote(f.Help))
			}
		}
		// What a positional takes, from tsd itself (":files" adds files).
		fmt.Fprintln(w, `function __tsd_args; set -l out (command tsd _complete (commandline -opc)[2..-1] 2>/dev/null); for l in $out; if test "$l" = :files; __fish_complete_path (commandline -ct); else; echo $l; end; end; end`)
		fmt.Fprintln(w, "complete -c tsd -n 'not __fish_use_subcommand' -a '(__tsd_args)'")
	default:
		return &exitError{code: 2, msg: "tsd: completion: unknown shell " + shell}
	}
	return nil
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/alecthomas/kong"
)

// completionCmd prints a completion script generated from the CLI's own
// kong model, so verbs and flags never drift from what tsd parses.
// Deployment names complete from `tsd ls --names`.
type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

// Verbs whose positional argument is a running deployment.
var deploymentVerbs = []string{"attach", "status", "restart", "start", "stop", "logs"}

func (c completionCmd) Run(k *kong.Kong) error {
	return writeCompletion(os.Stdout, c.Shell, k.Model)
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
		fmt.Fprintln(w, `	local cur=${COMP_WORDS[COMP_CWORD]} verb=${COMP_WORDS[1]} flags=""`)
		fmt.Fprintf(w, "\tif ((COMP_CWORD == 1)); then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(names, " ")+" --help --version")
		fmt.Fprintln(w, "\tcase $verb in")
		for _, v := range verbs {
			fmt.Fprintf(w, "\t%s) flags=%q ;;\n", v.name, flagWords(v.flags)+" --help")
		}
		fmt.Fprintln(w, "\tesac")
		fmt.Fprintln(w, `	if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$flags" -- "$cur")); return; fi`)
		fmt.Fprintf(w, "\tcase $verb in %s) COMPREPLY=($(compgen -W \"$(tsd ls --names 2>/dev/null)\" -- \"$cur\")) ;; esac\n", strings.Join(deploymentVerbs, "|"))
		fmt.Fprintln(w, `	COMPREPLY+=($(compgen -f -- "$cur"))`)
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
		fmt.Fprintf(w, "complete -c tsd -n '__fish_seen_subcommand_from %s' -a '(tsd ls --names 2>/dev/null)'\n", strings.Join(deploymentVerbs, " "))
		fmt.Fprintln(w, "complete -c tsd -n '__fish_seen_subcommand_from up plan validate gateway attach status stop logs restart start' -F")
	default:
		return &exitError{code: 2, msg: "tsd: completion: unknown shell " + shell}
	}
	return nil
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

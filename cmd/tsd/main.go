// Command tsd brings up a TokenSpeed disaggregated-serving deployment from
// one profile and keeps it alive. Each verb lives in its own file; this file
// only wires the CLI together.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/alecthomas/kong"
)

var version = "dev"

type cli struct {
	Version    kong.VersionFlag `help:"Print the version and exit."`
	Up         upCmd            `cmd:"" help:"Start every role of a profile as a daemon and attach the dashboard (-d: in the background; --headless: in the foreground)."`
	Attach     attachCmd        `cmd:"" help:"Open the dashboard on a running deployment (several may attach)."`
	Ls         lsCmd            `cmd:"" help:"List the deployments: running ones, and dead ones whose killed daemon left engines running (tsd stop NAME ends them)."`
	Plan       planCmd          `cmd:"" help:"Print what tsd would run: commands, env and ports per role."`
	Validate   validateCmd      `cmd:"" help:"Check a profile and list every problem."`
	Gateway    gatewayCmd       `cmd:"" help:"Run only the embedded gateway (engines started by hand)."`
	Status     statusCmd        `cmd:"" help:"Show a running deployment's roles, ranks and GPUs (exit 1: a role failed; 3: none running)."`
	Restart    restartCmd       `cmd:"" help:"Restart one role of a running deployment (drained first; --now skips that), or --rolling: its instances one at a time."`
	Start      startCmd         `cmd:"" help:"Start a stopped (or failed) role of a running deployment."`
	Stop       stopCmd          `cmd:"" help:"Stop one role, or the whole deployment (a dead one: what its killed daemon left)."`
	Apply      applyCmd         `cmd:"" help:"Change a running deployment to an edited profile: only what changed starts, stops or restarts (--dry-run shows the diff)."`
	Scale      scaleCmd         `cmd:"" help:"Add or remove replicas of a running deployment's role (tsd scale decode=3); the profile file is not rewritten."`
	Planner    plannerCmd       `cmd:"" help:"Pause or resume a running deployment's SLO planner (slo: in its profile): tsd planner pause|resume [NAME]."`
	Logs       logsCmd          `cmd:"" help:"Print (or follow) one role's log, or every role's merged."`
	Bench      benchCmd         `cmd:"" help:"Benchmark a running deployment's gateway (flags as ts bench serve; --goodput, rate sweeps), or compare layouts (--layouts a.yaml,b.yaml: each brought up, measured, stopped; the best named and why)."`
	Export     exportCmd        `cmd:"" help:"Write the profile for another launcher (tsd export slurm PROFILE: a batch script)."`
	Completion completionCmd    `cmd:"" help:"Print a shell completion script (bash, zsh or fish)."`
	VersionCmd versionCmd       `cmd:"" name:"version" help:"Print the version."`
	Guard      guardCmd         `cmd:"" name:"_guard" hidden:"" help:"Internal: run one engine under an orphan guardian."`
	Complete   completeCmd      `cmd:"" name:"_complete" hidden:"" help:"Internal: what fits after the words given (shell completion)."`
	Srun       srunCmd          `cmd:"" name:"_srun" hidden:"" help:"Internal: run one role's Slurm step under its guardian."`
}

// exitError carries a process exit code through kong without printing twice.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func newParser(c *cli) (*kong.Kong, error) {
	return kong.New(c,
		kong.Name("tsd"),
		kong.Description("Run a TokenSpeed disaggregated-serving deployment on one workstation."),
		kong.Vars{"version": "tsd " + version},
	)
}

func main() {
	var c cli
	parser, err := newParser(&c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsd:", err)
		os.Exit(1)
	}
	ctx, err := parser.Parse(goodputArgs(os.Args[1:]))
	if err != nil {
		// Two lines, not the whole usage: what was wrong, and where help is.
		fmt.Fprintln(os.Stderr, usageHint(err))
		os.Exit(2)
	}
	if err := ctx.Run(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "tsd:", err)
		os.Exit(1)
	}
}

// usageHint is the two-line answer to a command line kong cannot parse.
func usageHint(err error) string {
	msg := err.Error()
	help := "run `tsd --help` for the verbs"
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		if cmd := pe.Context.Selected(); cmd != nil {
			help = fmt.Sprintf("run `tsd %s --help` for its arguments and flags", strings.TrimPrefix(cmd.FullPath(), "tsd "))
		}
	}
	return "tsd: " + strings.TrimSpace(msg) + "\n" + help
}

type versionCmd struct{}

func (versionCmd) Run() error {
	fmt.Println("tsd", version)
	return nil
}

// Command tsd brings up a TokenSpeed disaggregated-serving deployment from
// one profile and keeps it alive. Each verb lives in its own file; this file
// only wires the CLI together.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/alecthomas/kong"
)

var version = "dev"

type cli struct {
	Up       upCmd       `cmd:"" help:"Start every role of a profile and show the dashboard (or logs with --headless)."`
	Plan     planCmd     `cmd:"" help:"Print what tsd would run: commands, env and ports per role."`
	Validate validateCmd `cmd:"" help:"Check a profile and list every problem."`
	Gateway  gatewayCmd  `cmd:"" help:"Run only the embedded gateway (engines started by hand)."`
	Status   statusCmd   `cmd:"" help:"Show a running tsd's roles, ranks and GPUs."`
	Restart  restartCmd  `cmd:"" help:"Restart one role of a running tsd."`
	Stop     stopCmd     `cmd:"" help:"Stop one role, or the whole deployment, of a running tsd."`
	Logs     logsCmd     `cmd:"" help:"Print (or follow) one role's log from a running tsd."`
	Bench    benchCmd    `cmd:"" help:"Benchmark a running deployment's gateway (flags as ts bench serve)."`
	Version  versionCmd  `cmd:"" help:"Print the version."`
	Export   exportCmd   `cmd:"" help:"Write the profile for another launcher (tsd export slurm PROFILE: a batch script)."`
	Guard    guardCmd    `cmd:"" name:"_guard" hidden:"" help:"Internal: run one engine under an orphan guardian."`
	Srun     srunCmd     `cmd:"" name:"_srun" hidden:"" help:"Internal: run one role's Slurm step under its guardian."`
}

// exitError carries a process exit code through kong without printing twice.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	var c cli
	ctx := kong.Parse(&c,
		kong.Name("tsd"),
		kong.Description("Run a TokenSpeed disaggregated-serving deployment on one workstation."),
		kong.UsageOnError(),
		kong.Vars{"version": version},
	)
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

type versionCmd struct{}

func (versionCmd) Run() error {
	fmt.Println("tsd", version)
	return nil
}

package main

import (
	"os"
	"time"

	"github.com/tsd-project/tsd/supervisor"
)

// guardCmd is the orphan guardian (docs/architecture.md §D1): tsd re-executes itself
// as `tsd _guard --grace D -- ENGINE ARGV...` with the lifeline pipe on fd 3
// and the status pipe on fd 4. See supervisor/guardian.go.
type guardCmd struct {
	Grace time.Duration `help:"SIGTERM to SIGKILL grace period." default:"30s"`
	Argv  []string      `arg:"" passthrough:"" help:"Engine command line."`
}

func (g guardCmd) Run() error {
	argv := g.Argv
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	os.Exit(supervisor.GuardMain(g.Grace, argv))
	return nil
}

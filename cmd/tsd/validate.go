package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tsd-project/tsd/profiles"
)

type validateCmd struct {
	Profile   string `arg:"" help:"Profile YAML file."`
	Preflight bool   `help:"Also check this host: ports free, engine command on PATH, GPUs, socket and log directories."`
}

func (c validateCmd) Run() error {
	facts := profiles.StaticHostFacts()
	if c.Preflight {
		facts = profiles.LocalHostFacts()
	}
	return c.run(os.Stdout, os.Stderr, facts, profiles.LocalPreflightEnv())
}

func (c validateCmd) run(stdout, stderr io.Writer, facts profiles.HostFacts, env profiles.PreflightEnv) error {
	_, plan, errs := profiles.LoadPlan(c.Profile, facts)
	if len(errs) > 0 {
		return profileErrors(errs)
	}
	for _, w := range plan.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if !c.Preflight && env.Getenv != nil {
		// Preflight says it too; without it, tsd's environment still
		// reaches every engine.
		for _, p := range profiles.NVLinkEnvWarnings(plan, env.Getenv) {
			fmt.Fprintln(stderr, p.String())
		}
	}
	if c.Preflight {
		var bad []string
		for _, p := range profiles.Preflight(plan, env) {
			if p.Severity == profiles.SeverityError {
				bad = append(bad, p.String())
			} else {
				fmt.Fprintln(stderr, p.String())
			}
		}
		if len(bad) > 0 {
			return &exitError{code: 1, msg: strings.Join(bad, "\n")}
		}
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}

// Command ts-fake is a faithful stand-in for `ts serve --headless` (a
// TokenSpeed role engine) used by tsd's tests and demo: same flags, same
// process tree and log milestones, the real ZMQ lane and bootstrap
// rendezvous, deterministic tokens, and fault knobs. See README.md.
//
// It may import only protocol packages (gateway/wire, gateway/bootstrap,
// gateway/kvevents) so it can never share a bug with the gateway's lane
// code.
package main

import (
	"fmt"
	"os"
	"strconv"
)

// rankEnv marks a re-executed scheduler process and carries its global rank.
const rankEnv = "TS_FAKE_INTERNAL_RANK"

func main() {
	args := os.Args[1:]
	if len(args) == 0 || args[0] != "serve" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			printHelp(os.Stdout)
			return
		}
		fmt.Fprintln(os.Stderr, "usage: ts-fake serve --headless [--model] MODEL [flags]   (ts-fake serve --help lists them)")
		os.Exit(2)
	}
	p := parseArgs(args[1:])
	if p.help {
		printHelp(os.Stdout)
		return
	}
	cfg, err := resolveConfig(p, os.Getenv)
	if err != nil {
		exitWithArgError(err)
	}
	if r := os.Getenv(rankEnv); r != "" {
		g, err := strconv.Atoi(r)
		if err != nil || g < 0 || g >= cfg.world {
			fmt.Fprintf(os.Stderr, "ts-fake: bad %s=%q\n", rankEnv, r)
			os.Exit(1)
		}
		if os.Getenv(bootstrapOverrideEnv) == "external" {
			cfg.bootstrapMode = "external"
		}
		os.Exit(runRank(cfg, g))
	}
	os.Exit(runLauncher(cfg))
}

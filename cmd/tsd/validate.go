package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/profiles"
)

type validateCmd struct {
	Profile     string `arg:"" help:"Profile YAML file."`
	Preflight   bool   `help:"Also check this host: ports free, engine command on PATH, GPUs, socket and log directories."`
	NoModelDirs bool   `name:"no-model-files" help:"Do not look for the model and tokenizer folders (validating on a machine other than the one that serves)."`
}

func (c validateCmd) Run() error {
	facts := profiles.StaticHostFacts()
	if c.Preflight {
		facts = profiles.LocalHostFacts()
	}
	return c.run(os.Stdout, os.Stderr, facts, profiles.LocalPreflightEnv())
}

func (c validateCmd) run(stdout, stderr io.Writer, facts profiles.HostFacts, env profiles.PreflightEnv) error {
	prof, plan, errs := profiles.LoadPlan(c.Profile, facts)
	if len(errs) == 0 && !c.NoModelDirs {
		errs = modelFiles(prof, loadTokenizer)
	}
	if len(errs) > 0 {
		return profileErrors(errs)
	}
	for _, w := range plan.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	for _, r := range plan.Roles {
		if !r.Local && r.Launcher != profiles.LauncherSlurm {
			fmt.Fprintln(stderr, "warning:", lane.RemoteLaneWarning(r.Name))
		}
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
	fmt.Fprintln(stdout, "ok:", layoutSummary(plan))
	return nil
}

// layoutSummary is what a profile runs, by kind in the kinds table's
// order, and how requests split: "4 engines (2 aggregated, 1 prefill,
// 1 decode), disaggregation conditional".
func layoutSummary(plan *profiles.Plan) string {
	var parts []string
	for _, k := range profiles.Kinds {
		n := 0
		for _, r := range plan.Roles {
			if r.Kind == k.Kind {
				n++
			}
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k.Kind))
		}
	}
	engines := "engines"
	if len(plan.Roles) == 1 {
		engines = "engine"
	}
	return fmt.Sprintf("%d %s (%s), disaggregation %s", len(plan.Roles), engines, strings.Join(parts, ", "), plan.Gateway.Disaggregation)
}

// loadTokenizer is what the gateway does with the tokenizer folder at
// `tsd up`.
func loadTokenizer(dir string) error {
	_, err := tokenizer.Load(dir)
	return err
}

// modelFiles checks what will be read from disk: a model given as a local
// path exists, and the tokenizer the OpenAI API needs loads. A model id
// (Qwen/Qwen3-8B: the engines fetch it) is left alone, but the gateway
// still needs a local tokenizer folder.
func modelFiles(p *profiles.Profile, load func(dir string) error) profiles.Errors {
	var errs profiles.Errors
	at := func(key, format string, args ...any) {
		errs = append(errs, p.ErrorAt(key, format, args...))
	}
	if filepath.IsAbs(p.Model) {
		if st, err := os.Stat(p.Model); err != nil {
			at("model", "%s does not exist (a local model folder, or a model id such as Qwen/Qwen3-8B)", p.Model)
		} else if !st.IsDir() {
			at("model", "%s is not a folder", p.Model)
		}
	}
	key, dir := "tokenizer", tokenizerDir(p.Tokenizer, p.Model)
	if !p.Written("tokenizer") {
		key = "model" // the tokenizer defaults to the model folder
	}
	if len(errs) > 0 && key == "model" {
		return errs // the model error says it all
	}
	if !filepath.IsAbs(dir) {
		at(key, "%q is not a local folder: the gateway reads tokenizer.json and the chat template from one (set tokenizer: to a local copy)", dir)
		return errs
	}
	if err := load(dir); err != nil {
		at(key, "tokenizer does not load, so the OpenAI API would be off: %v", err)
	}
	return errs
}

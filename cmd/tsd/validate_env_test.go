package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// Pins: tsd validate warns about MC_INTRANODE_NVLINK in tsd's
// own environment even without --preflight, and still says ok.
func TestValidateWarnsNVLinkInEnv(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	good := filepath.Join("..", "..", "profiles", "examples", "1p1d-4gpu.yaml")
	env := profiles.PreflightEnv{Getenv: func(k string) string {
		if k == "MC_INTRANODE_NVLINK" {
			return "1"
		}
		return ""
	}}
	if err := (validateCmd{Profile: good, NoModelDirs: true}).run(&out, &errOut, testFacts(), env); err != nil || out.String() != "ok: 2 engines (1 prefill, 1 decode), disaggregation always\n" {
		t.Fatalf("validate: %v %q", err, out.String())
	}
	if !strings.Contains(errOut.String(), "warning: MC_INTRANODE_NVLINK is set in tsd's environment") {
		t.Errorf("stderr lacks the warning:\n%s", errOut.String())
	}
}

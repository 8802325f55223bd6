package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// Regression: `tsd plan` printed HF_TOKEN's value in text and JSON. Secret-
// looking env values and flags are now *** unless --show-secrets.
func TestPlanMasksSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	prof := `name: sec
model: /models/m
engine:
  command: [ts-fake, serve]
  args: [--hf-token, hf_enginearg, --api-key=argkey]
  env: {HF_TOKEN: hf_secretvalue, my_password: pw1, NO_PROXY: "*"}
gateway:
  port: 18000
roles:
  - name: prefill
    kind: prefill
    gpus: [1]
  - name: decode
    kind: decode
    gpus: [0]
    env: {AWS_SECRET_ACCESS_KEY: awsval}
`
	if err := os.WriteFile(path, []byte(prof), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"hf_secretvalue", "pw1", "awsval", "hf_enginearg", "argkey"}
	for _, js := range []bool{false, true} {
		var out, errOut bytes.Buffer
		if err := (planCmd{Profile: path, JSON: js}).run(&out, &errOut, testFacts()); err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if strings.Contains(out.String(), s) {
				t.Errorf("json=%v: plan prints secret %q:\n%s", js, s, out.String())
			}
		}
		if !strings.Contains(out.String(), "***") || !strings.Contains(out.String(), "NO_PROXY") {
			t.Errorf("json=%v: masked plan lacks *** or the other env:\n%s", js, out.String())
		}
		out.Reset()
		if err := (planCmd{Profile: path, JSON: js, ShowSecrets: true}).run(&out, &errOut, testFacts()); err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if !strings.Contains(out.String(), s) {
				t.Errorf("json=%v --show-secrets: %q missing", js, s)
			}
		}
	}
}

func TestMaskText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"starting: ts serve --api-key abc --port 1", "starting: ts serve --api-key *** --port 1"},
		{"starting: ts serve --hf-token=abc", "starting: ts serve --hf-token=***"},
		{"HF_TOKEN=abc ts serve", "HF_TOKEN=*** ts serve"},
		{"crashed: exit 1", "crashed: exit 1"},
		{"the KEY value is prose", "the KEY value is prose"},
		{"--api-key --other", "--api-key --other"},
		{"ts-fake --fake-token-min 256", "ts-fake --fake-token-min 256"},
		{"MONKEY=1 NO_PROXY=*", "MONKEY=*** NO_PROXY=*"},
	} {
		if got := maskText(c.in); got != c.want {
			t.Errorf("maskText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// `tsd status` masks secrets in the free text it prints, and --json keeps
// every field.
func TestStatusMasksSecrets(t *testing.T) {
	t.Parallel()
	s := snapshot.Snapshot{Name: "x", Roles: []snapshot.RoleStatus{{Name: "decode", Reason: "crashed; ran ts serve --api-key k123"}},
		Events: []snapshot.Event{{Role: "decode", Message: "starting: ts serve --hf-token hf_abc"}}}
	m := maskedSnapshot(s)
	if strings.Contains(m.Roles[0].Reason, "k123") || strings.Contains(m.Events[0].Message, "hf_abc") {
		t.Fatalf("not masked: %+v", m)
	}
	if s.Roles[0].Reason != "crashed; ran ts serve --api-key k123" {
		t.Fatal("masking changed the caller's snapshot")
	}
	b, _ := json.Marshal(s)
	out, err := maskJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "k123") || strings.Contains(string(out), "hf_abc") || !strings.Contains(string(out), `"restarts"`) {
		t.Fatalf("masked JSON:\n%s", out)
	}
}

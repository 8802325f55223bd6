package profiles

import (
	"strings"
	"testing"
	"time"
)

// gateway.admission and gateway.api_keys: read, carried into the plan
// (the admission section only when it bounds something, keys without
// values), live in tsd apply, and bad entries refused naming the key.
func TestAdmissionAndKeys(t *testing.T) {
	t.Parallel()
	plan := func(gateway string) (*Plan, Errors) {
		t.Helper()
		p, errs := Parse("/srv/a.yaml", []byte("model: ./m\ngateway:\n"+gateway+routingRoles))
		if len(errs) > 0 {
			return nil, errs
		}
		pl, errs := MakePlan(p, fixedFacts())
		return pl, errs
	}
	pl, errs := plan("  port: 8000\n")
	if len(errs) > 0 || pl.Gateway.Admission != nil || pl.Gateway.APIKeys != nil {
		t.Fatalf("defaults: %+v %+v %v", pl.Gateway.Admission, pl.Gateway.APIKeys, errs)
	}
	pl, errs = plan("  admission: {prefill_tokens: 8192, decode_requests: 64, aging: 2s}\n  api_keys:\n    - {name: team-a, key_env: TEAM_A_KEY, rpm: 600, tpm: 100000, priority: 1}\n    - {name: batch, key_env: BATCH_KEY, priority: -1}\n")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := AdmissionPlan{PrefillTokens: 8192, DecodeRequests: 64, QueueRequests: 1024, QueueTokens: 1 << 20, Aging: Duration(2 * time.Second)}
	if a := pl.Gateway.Admission; a == nil || *a != want {
		t.Fatalf("admission %+v, want %+v", a, want)
	}
	if k := pl.Gateway.APIKeys; len(k) != 2 || k[0] != (APIKeyPlan{Name: "team-a", KeyEnv: "TEAM_A_KEY", RPM: 600, TPM: 100000, Priority: 1}) || k[1].Priority != -1 {
		t.Fatalf("keys %+v", k)
	}
	base, _ := plan("  port: 8000\n")
	d := Diff(base, pl)
	if len(d.Gateway) != 2 || d.Refusal() != nil || !strings.HasPrefix(d.Gateway[0].Field, "gateway.admission") || d.Gateway[1].Field != "gateway.api_keys" {
		t.Fatalf("apply: live %v, refused %v", d.Gateway, d.Refusal())
	}
	for _, c := range []struct{ gateway, want string }{
		{"  api_keys: {name: a}\n", "must be a list of keys"},
		{"  api_keys:\n    - {name: a b, key_env: K}\n", `"a b" is not a key name`},
		{"  api_keys:\n    - {name: a, key_env: 1K}\n", `"1K" is not an environment variable name`},
		{"  api_keys:\n    - {name: a}\n", "missing key_env"},
		{"  api_keys:\n    - {name: a, key_env: K, priority: 101}\n", "priority: must be between -100 and 100"},
		{"  api_keys:\n    - {name: a, key_env: K}\n    - {name: b, key_env: K}\n", "a second key in $K"},
		{"  api_keys:\n    - {name: a, key_env: K, rmp: 5}\n", "rmp"},
		{"  admission: {prefill_token: 5}\n", "prefill_token"},
	} {
		if _, errs := plan(c.gateway); len(errs) == 0 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.gateway, errs, c.want)
		}
	}
}

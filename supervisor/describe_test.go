package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// /v1/describe answers a role as planned, secrets masked by profiles'
// rules in the env, the argv and the command line; an unknown role is an
// error naming the roles there are.
func TestControlDescribe(t *testing.T) {
	t.Parallel()
	r := shRole("decode", profiles.KindDecode, readyScript)
	r.Argv = append(r.Argv, "--api-key", "sekrit", "--port=9")
	r.Env["HF_TOKEN"] = "hf_sekrit"
	r.Env["CUDA_VISIBLE_DEVICES"] = "3"
	r.GPUs, r.PortCluster, r.DistInitAddr = []string{"3"}, []int{12500, 12501, 12502, 12504}, "127.0.0.1:12500"
	f := newFixture(t, nil, nil, r)
	f.wait("decode", "ready", state(snapshot.StateReady))
	c := NewControlClient(f.sup.plan.ControlSocket)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	spec, err := c.Describe(ctx, "decode")
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(spec.Argv, " ") + " " + spec.CommandLine
	for _, e := range spec.Env {
		all += " " + e.Name + "=" + e.Value
	}
	if strings.Contains(all, "sekrit") {
		t.Fatalf("a secret reached the description: %s", all)
	}
	if spec.Env[0].Name != "CUDA_VISIBLE_DEVICES" || spec.Env[0].Value != "3" {
		t.Errorf("env order %+v: CUDA_VISIBLE_DEVICES first, as the command line sets it", spec.Env)
	}
	if !strings.Contains(spec.CommandLine, "HF_TOKEN='***'") || !strings.Contains(all, "--api-key ***") || !strings.Contains(all, "--port=9") {
		t.Errorf("masking: %s", all)
	}
	if spec.Restart.Policy != PolicyOnFailure || spec.Restart.Backoff != "20ms" || spec.Restart.BudgetCount != 3 {
		t.Errorf("restart policy %+v", spec.Restart)
	}
	if spec.Kind != profiles.KindDecode || len(spec.PortCluster) != 4 || spec.GPUs[0] != "3" {
		t.Errorf("spec %+v", spec)
	}
	if _, err := f.sup.Describe("nope"); !errors.Is(err, ErrUnknownRole) {
		t.Errorf("describe of an unknown role: %v", err)
	}
	if _, err := c.Describe(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "have decode") {
		t.Errorf("describe of an unknown role over the socket: %v", err)
	}
}

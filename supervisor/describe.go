package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Describe is one role instance as planned (what `tsd plan` prints for
// it), secrets masked by profiles' rules: the dashboard's describe view.
func (s *Supervisor) Describe(role string) (snapshot.RoleSpec, error) {
	plan := s.Plan()
	for i := range plan.Roles {
		if plan.Roles[i].Name == role {
			return roleSpec(&plan.Roles[i]), nil
		}
	}
	return snapshot.RoleSpec{}, fmt.Errorf("%w %q (have %s)", ErrUnknownRole, role, strings.Join(s.Roles(), ", "))
}

// roleSpec is r as the describe view shows it, masked.
func roleSpec(plan *profiles.RolePlan) snapshot.RoleSpec {
	r := plan.Masked()
	env := make([]snapshot.EnvVar, 0, len(r.Env))
	for _, k := range profiles.EnvOrder(r.Env) {
		env = append(env, snapshot.EnvVar{Name: k, Value: r.Env[k]})
	}
	rp := r.Restart
	return snapshot.RoleSpec{
		Name: r.Name, Group: r.Group, Kind: r.Kind, Host: r.Host, Local: r.Local, Launcher: r.Launcher,
		GPUs: append([]string(nil), r.GPUs...), TP: r.TP, DP: r.DP,
		Argv: r.Command(), Env: env, CommandLine: r.CommandLine(),
		Worker: r.Worker, Handshake: r.Handshake, DistInitAddr: r.DistInitAddr,
		PortCluster: append([]int(nil), r.PortCluster...), Bootstrap: r.Bootstrap, LogFile: r.LogFile,
		Restart: snapshot.RestartSpec{
			Policy: rp.Policy, Backoff: rp.Backoff.String(), MaxBackoff: rp.MaxBackoff.String(),
			ResetAfter: rp.ResetAfter.String(), BudgetCount: rp.BudgetCount, BudgetWindow: rp.BudgetWindow.String(),
			StopGrace: rp.StopGrace.String(), DrainTimeout: rp.DrainTimeout.String(),
		},
		StallAction: r.StallAction,
	}
}

// serveDescribe answers GET /v1/describe?role=R with Describe(R) as JSON.
func (c *controlServer) serveDescribe(w http.ResponseWriter, r *http.Request) {
	spec, err := c.view.Describe(r.URL.Query().Get("role"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(spec)
}

// Describe asks the daemon for one role as planned (secrets masked).
func (c *ControlClient) Describe(ctx context.Context, role string) (snapshot.RoleSpec, error) {
	var spec snapshot.RoleSpec
	resp, err := c.do(ctx, http.MethodGet, "/v1/describe?role="+queryEscape(role))
	if err != nil {
		return spec, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&spec); err != nil {
		return spec, fmt.Errorf("read the description of %s: %w", role, err)
	}
	return spec, nil
}

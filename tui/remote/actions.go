package remote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/supervisor"
	"github.com/tsd-project/tsd/tui"
)

var (
	_ tui.Signaler = (*Backend)(nil)
	_ tui.Applier  = (*Backend)(nil)
	_ tui.Switcher = (*Backend)(nil)
)

// Signal implements tui.Signaler: the daemon sends it to the role's
// process group (POST /v1/signal).
func (b *Backend) Signal(role, sig string) error {
	if b.refused() {
		return ErrReadOnly
	}
	ctx, cancel := context.WithTimeout(b.ctx, callTimeout)
	defer cancel()
	_, err := b.c.Signal(ctx, role, sig)
	return err
}

// applyRequest reads the profile here, as tsd apply does: its errors come
// before anything is asked of the daemon, and the key its api_key_env
// names is in this environment. "" is the file the deployment runs.
func (b *Backend) applyRequest(profile string) (supervisor.ApplyRequest, error) {
	if profile == "" {
		profile = b.Snapshot().Profile
		if profile == "" {
			return supervisor.ApplyRequest{}, errors.New("the deployment runs a plan file, not a profile: name the profile (:apply PROFILE)")
		}
	}
	abs, err := filepath.Abs(profile)
	if err != nil {
		return supervisor.ApplyRequest{}, fmt.Errorf("profile path: %w", err)
	}
	p, errs := profiles.Load(abs)
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return supervisor.ApplyRequest{}, errors.New(strings.Join(msgs, "\n"))
	}
	req := supervisor.ApplyRequest{Profile: abs}
	if env := p.Gateway.APIKeyEnv; env != "" {
		req.APIKey = os.Getenv(env)
	}
	return req, nil
}

// PlanApply implements tui.Applier: the daemon's dry run of the profile
// (tsd apply --dry-run), nothing changed.
func (b *Backend) PlanApply(ctx context.Context, profile string) (tui.ApplyPreview, error) {
	req, err := b.applyRequest(profile)
	if err != nil {
		return tui.ApplyPreview{}, err
	}
	req.DryRun = true
	var plan supervisor.ApplyPlan
	if err := b.c.Apply(ctx, req, false, func(p supervisor.ApplyPlan) { plan = p }, nil); err != nil {
		return tui.ApplyPreview{}, err
	}
	pv := tui.ApplyPreview{Profile: req.Profile, From: plan.From, To: plan.To, Summary: plan.Summary,
		Lines: plan.Lines, Warnings: plan.Warnings, Changes: plan.Diff.Changes()}
	if pv.Changes {
		pv.Steps = plan.Steps
	}
	return pv, nil
}

// Apply implements tui.Applier: the change the preview showed, refused
// by the daemon if the file's revision is no longer expect; each step
// goes to progress as it happens.
func (b *Backend) Apply(ctx context.Context, profile, expect string, progress func(string)) error {
	if b.refused() {
		return ErrReadOnly
	}
	req, err := b.applyRequest(profile)
	if err != nil {
		return err
	}
	req.Expect = expect
	return b.c.Apply(ctx, req, false, nil, progress)
}

// UseRegistry makes :ctx read the daemons' registry in dir instead of
// daemons.Dir (tests keep their own).
func (b *Backend) UseRegistry(dir string) {
	b.mu.Lock()
	b.registry = dir
	b.mu.Unlock()
}

// deployments are the registry's live entries.
func (b *Backend) deployments() ([]daemons.Entry, error) {
	b.mu.Lock()
	dir := b.registry
	b.mu.Unlock()
	r, err := daemons.Open(dir)
	if err != nil {
		return nil, err
	}
	return r.List()
}

// Deployments implements tui.Switcher: the deployments running here, by
// the registry.
func (b *Backend) Deployments() ([]string, error) {
	es, err := b.deployments()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out, nil
}

// Switch implements tui.Switcher: a backend on the deployment called name
// (read-only if this one is).
func (b *Backend) Switch(ctx context.Context, name string) (tui.Backend, error) {
	es, err := b.deployments()
	if err != nil {
		return nil, err
	}
	e, err := daemons.Find(es, name)
	if err != nil {
		return nil, err
	}
	nb, err := Dial(ctx, e.Socket)
	if err != nil {
		return nil, fmt.Errorf("attach to %s: %w", name, err)
	}
	if b.refused() {
		nb.SetReadOnly()
	}
	b.mu.Lock()
	nb.registry = b.registry
	b.mu.Unlock()
	return nb, nil
}

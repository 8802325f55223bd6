package gateway

import (
	"fmt"

	"github.com/tsd-project/tsd/gateway/bootstrap"
	"github.com/tsd-project/tsd/profiles"
)

// Workers bound, unbound and renamed while the gateway serves (tsd apply,
// docs/architecture.md §4.3; docs/protocol.md §1.6): the lane's worker
// set, the dispatch's pools, the rendezvous the gateway hosts, the KV
// event subscriber and the traffic rows follow. The supervisor adds a
// role's worker before its engine starts, removes it once the role has
// drained and stopped, and renames it from the role's own actor.

// AddWorker binds a new role's worker: its lane sockets, and the KV
// rendezvous when the gateway hosts them (bootstrap_server: tsd). Nothing
// stays bound when it fails.
func (g *Gateway) AddWorker(wp profiles.WorkerPlan) error {
	w, err := g.lane.AddWorker(wp)
	if err != nil {
		return fmt.Errorf("bind the lane of %s: %w", wp.Role, err)
	}
	var srv *bootstrap.Server
	if g.plan.Gateway.BootstrapServer == "tsd" && wp.Kind == profiles.KindPrefill {
		if wp.Bootstrap == "" {
			_ = g.lane.RemoveWorker(wp.Role)
			return fmt.Errorf("bind rendezvous for %s: the plan gives no bootstrap address", wp.Role)
		}
		srv = bootstrap.NewServer(w.Alive) // the role's view says whether it lives
		if err := srv.Start(wp.Bootstrap); err != nil {
			_ = g.lane.RemoveWorker(wp.Role)
			return fmt.Errorf("bind rendezvous for %s: %w", wp.Role, err)
		}
	}
	g.mu.Lock()
	if srv != nil {
		g.boots[wp.Role] = srv
	}
	g.mu.Unlock()
	if c, ok := kvEngine(wp); ok {
		if err := g.followKV(c); err != nil {
			g.log.Warn("KV events not followed", "role", wp.Role, "err", err)
		}
	}
	g.metrics.traffic.AddRole(wp.Role)
	g.disp.AddWorker(w)
	g.log.Info("worker bound by tsd apply", "role", wp.Role, "kind", wp.Kind, "url", wp.URL)
	return nil
}

// RemoveWorker unbinds a stopped role's worker: it leaves routing, its
// sockets and ipc files go, its rendezvous closes.
func (g *Gateway) RemoveWorker(role string) error {
	g.disp.RemoveWorker(role)
	err := g.lane.RemoveWorker(role)
	g.mu.Lock()
	srv := g.boots[role]
	delete(g.boots, role)
	g.mu.Unlock()
	if srv != nil {
		if cerr := srv.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close rendezvous of %s: %w", role, cerr)
		}
	}
	if sub := g.kv.Load(); sub != nil {
		sub.Remove(role)
	}
	g.metrics.traffic.RemoveRole(role)
	g.log.Info("worker unbound by tsd apply", "role", role)
	return err
}

// RenameWorker gives a role's worker its new name; its sockets, ranks,
// rendezvous and requests in flight are the same.
func (g *Gateway) RenameWorker(from, to string) error {
	if err := g.lane.RenameWorker(from, to); err != nil {
		return err
	}
	g.disp.RenameWorker(from, to)
	// The role's view moved with its worker (the lane renamed the worker
	// itself); only the rendezvous is filed by name here.
	g.mu.Lock()
	if v, ok := g.boots[from]; ok {
		delete(g.boots, from)
		g.boots[to] = v
	}
	g.mu.Unlock()
	if sub := g.kv.Load(); sub != nil {
		sub.Rename(from, to)
	}
	g.metrics.traffic.RenameRole(from, to)
	g.log.Info("worker renamed by tsd apply", "from", from, "to", to)
	return nil
}

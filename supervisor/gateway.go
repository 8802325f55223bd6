package supervisor

import (
	"context"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Gateway is what the supervisor needs from the embedded gateway. The
// gateway package implements it; tests may use a stub. The gateway's
// own events reach the deployment's list through the EventLog it is
// built with, and the processes it may admit to a role's lane through
// Runs: both exist before either side (cmd/tsd up.go).
type Gateway interface {
	// Bind binds every worker's sockets (and any rendezvous the gateway
	// hosts). It is called before any engine starts.
	Bind(ctx context.Context) error
	// Serve runs the HTTP API until ctx ends or Shutdown is called.
	Serve(ctx context.Context) error
	// Drain stops accepting HTTP requests and lets those in flight finish
	// until ctx ends, then cuts the rest (a stream gets its finish reason
	// and an error event); it says how many finished and how many it cut.
	// Only the first call drains.
	Drain(ctx context.Context) snapshot.DrainResult
	// Shutdown drains (unless Drain ran) up to ctx's deadline, unbinds
	// and removes ipc socket files.
	Shutdown(ctx context.Context) error
	// SubscribeRanks returns every rank's current state, then a stream of
	// changes; cancel ends the subscription.
	SubscribeRanks() (current []snapshot.RankEvent, changes <-chan snapshot.RankEvent, cancel func())
	// SetRole is the supervisor's whole view of one role, sent on every
	// change (docs/architecture.md §4.2): whether its processes are
	// alive, whether new requests may go to it (requests already in
	// flight are not touched by Routed false: that is what lets a drain
	// finish them), and whether it is judged stalled (its requests end
	// with the view's Reason, its ranks show stalled, it leaves routing;
	// no longer stalled lets its registered ranks be routed again).
	SetRole(role string, v snapshot.RoleView)
	// AbortRole ends every in-flight request that uses the role (on both
	// PD legs) with a clean error that carries reason, and returns how many
	// it ended.
	AbortRole(role, reason string) int
	// DrainCount is how many in-flight requests still need the role: for a
	// prefill, only those whose prefill leg has not finished.
	DrainCount(role string) int
	// Status is the gateway's headline numbers.
	Status() snapshot.GatewayStatus
	// InFlight is the role's in-flight request count, total and per identity.
	InFlight(role string) (total int, perIdentity map[int]int)
}

// LiveGateway is what a gateway needs for a running deployment to change
// (tsd apply, tsd scale; docs/architecture.md §4.3). An apply that adds,
// removes or renames a role, or changes a live gateway setting, is refused
// when the gateway lacks it.
type LiveGateway interface {
	// AddWorker binds the sockets of a new role's worker (and the
	// rendezvous it hosts for it), before its engine starts; the role is
	// routed once its ranks register and its view says so.
	AddWorker(w profiles.WorkerPlan) error
	// RemoveWorker unbinds the worker of a role that has stopped: its
	// sockets close, its ipc files go, it leaves every routing view.
	RemoveWorker(role string) error
	// RenameWorker gives a role's worker its new name; its sockets, ranks
	// and requests in flight are the same ones.
	RenameWorker(from, to string) error
	// Reconfigure takes g's live settings in place (routing policies,
	// retry and breaker knobs, queue and concurrency limits, the API key,
	// CORS): requests admitted from now on see them, requests in flight
	// finish under the settings they started with. apiKey is the key when
	// g.APIKeyEnv names one; keys are the values of g.APIKeys' key_env
	// variables, by variable.
	Reconfigure(g profiles.GatewayPlan, apiKey string, keys map[string]string) error
}

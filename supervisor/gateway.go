package supervisor

import (
	"context"

	"github.com/tsd-project/tsd/snapshot"
)

// Gateway is what the supervisor needs from the embedded gateway. The
// gateway package implements it; tests may use a stub.
type Gateway interface {
	// Bind binds every worker's sockets (and any rendezvous the gateway
	// hosts). It is called before any engine starts.
	Bind(ctx context.Context) error
	// Serve runs the HTTP API until ctx ends or Shutdown is called.
	Serve(ctx context.Context) error
	// SubscribeRanks returns every rank's current state, then a stream of
	// changes; cancel ends the subscription.
	SubscribeRanks() (current []snapshot.RankEvent, changes <-chan snapshot.RankEvent, cancel func())
	// SetRouted takes a role out of routing for new requests (false) or
	// puts it back (true). Requests already in flight are not touched:
	// that is what lets a drain finish them.
	SetRouted(role string, routed bool)
	// AbortRole ends every in-flight request that uses the role (on both
	// PD legs) with a clean error that carries reason, and returns how many
	// it ended.
	AbortRole(role, reason string) int
	// DrainCount is how many in-flight requests still need the role: for a
	// prefill, only those whose prefill leg has not finished.
	DrainCount(role string) int
	// SetStalled records the supervisor's verdict that the role is (true)
	// or is no longer (false) stalled, e.g. its process is stopped: true
	// takes it out of routing, aborts its requests with reason and shows
	// its ranks stalled; false lets registered ranks be routed again.
	SetStalled(role string, stalled bool, reason string)
	// SetAlive tells the gateway whether a role's process is alive; a
	// rendezvous the gateway hosts answers /health only while it is.
	SetAlive(role string, alive bool)
	// Status is the gateway's headline numbers.
	Status() snapshot.GatewayStatus
	// InFlight is the role's in-flight request count, total and per identity.
	InFlight(role string) (total int, perIdentity map[int]int)
	// Shutdown stops accepting HTTP, drains up to ctx's deadline, unbinds
	// and removes ipc socket files.
	Shutdown(ctx context.Context) error
}

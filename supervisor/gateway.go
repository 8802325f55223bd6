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
	// SetRouted takes a role out of routing (false: its in-flight requests
	// end with a clear error) or puts it back (true).
	SetRouted(role string, routed bool)
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

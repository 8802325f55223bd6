package gateway

import (
	"github.com/tsd-project/tsd/gateway/dispatch"
	"github.com/tsd-project/tsd/gateway/routing"
)

// Test seams into the dispatch's encode-routing state (gateway/dispatch
// epdroute.go), which these tests drive through the Gateway.

type encodeDrop = dispatch.EncodeDrop

func (g *Gateway) encodeDropped(role string) *encodeDrop { return g.disp.EncodeDropped(role) }

func (g *Gateway) encodeRing() *routing.Ring { return g.disp.EncodeRing() }

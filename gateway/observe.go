package gateway

import (
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// Observe is the traffic account as the SLO planner reads it each
// interval (supervisor.PlannerGateway; gateway/traffic observe.go): per
// role, the TTFT and ITL p90 of the last window and the counters the
// planner differences between readings; per profile entry (groups: its
// instances), the p90s over all its instances' samples.
func (g *Gateway) Observe(window time.Duration, groups map[string][]string) snapshot.TrafficWindow {
	return g.metrics.traffic.Observe(window, groups)
}

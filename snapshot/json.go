package snapshot

import (
	"encoding/json"
	"math"
	"time"
)

// The Snapshot's JSON (`tsd status --json`, the control socket's
// /v1/status and /v1/watch; README.md "The status JSON") is snake_case
// throughout, and a duration is a float number of milliseconds under a
// key ending in _ms: a time.Duration field is tagged json:"-" and its
// struct's MarshalJSON/UnmarshalJSON below add the _ms key. Every other
// field of these structs is encoded as tagged, so a field added later
// needs nothing here (json_test.go checks both rules on every field).

// Millis is d as float milliseconds, the unit of every *_ms key.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// FromMillis is the duration of ms milliseconds (to the nanosecond).
func FromMillis(ms float64) time.Duration {
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}

// plainGateway and plainTraffic have the fields and tags of their
// originals but not their methods, so encoding them does not recurse.
type (
	plainGateway GatewayStatus
	plainTraffic RoleTraffic
)

// latencyMS are the four latency keys both structs carry.
type latencyMS struct {
	TTFTp50 float64 `json:"ttft_p50_ms,omitempty"`
	TTFTp99 float64 `json:"ttft_p99_ms,omitempty"`
	ITLp50  float64 `json:"itl_p50_ms,omitempty"`
	ITLp99  float64 `json:"itl_p99_ms,omitempty"`
}

func toMS(ttft50, ttft99, itl50, itl99 time.Duration) latencyMS {
	return latencyMS{Millis(ttft50), Millis(ttft99), Millis(itl50), Millis(itl99)}
}

func (l latencyMS) durations() (ttft50, ttft99, itl50, itl99 time.Duration) {
	return FromMillis(l.TTFTp50), FromMillis(l.TTFTp99), FromMillis(l.ITLp50), FromMillis(l.ITLp99)
}

type gatewayWire struct {
	plainGateway
	latencyMS
}

// MarshalJSON writes the gateway's fields with its latencies in ms.
func (g GatewayStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(gatewayWire{plainGateway(g), toMS(g.TTFTp50, g.TTFTp99, g.ITLp50, g.ITLp99)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (g *GatewayStatus) UnmarshalJSON(b []byte) error {
	var w gatewayWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*g = GatewayStatus(w.plainGateway)
	g.TTFTp50, g.TTFTp99, g.ITLp50, g.ITLp99 = w.durations()
	return nil
}

type trafficWire struct {
	plainTraffic
	latencyMS
}

// MarshalJSON writes the role's traffic with its latencies in ms.
func (t RoleTraffic) MarshalJSON() ([]byte, error) {
	return json.Marshal(trafficWire{plainTraffic(t), toMS(t.TTFTp50, t.TTFTp99, t.ITLp50, t.ITLp99)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (t *RoleTraffic) UnmarshalJSON(b []byte) error {
	var w trafficWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*t = RoleTraffic(w.plainTraffic)
	t.TTFTp50, t.TTFTp99, t.ITLp50, t.ITLp99 = w.durations()
	return nil
}

type (
	plainPlanner      PlannerStatus
	plainPlannerGroup PlannerGroup
)

type plannerWire struct {
	plainPlanner
	TTFT     float64 `json:"ttft_p90_ms,omitempty"`
	ITL      float64 `json:"itl_p90_ms,omitempty"`
	Interval float64 `json:"interval_ms"`
	Cooldown float64 `json:"cooldown_ms"`
}

// MarshalJSON writes the planner's targets and periods in ms.
func (p PlannerStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(plannerWire{plainPlanner(p), Millis(p.TTFT), Millis(p.ITL), Millis(p.Interval), Millis(p.Cooldown)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *PlannerStatus) UnmarshalJSON(b []byte) error {
	var w plannerWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*p = PlannerStatus(w.plainPlanner)
	p.TTFT, p.ITL, p.Interval, p.Cooldown = FromMillis(w.TTFT), FromMillis(w.ITL), FromMillis(w.Interval), FromMillis(w.Cooldown)
	return nil
}

type plannerGroupWire struct {
	plainPlannerGroup
	TTFT    float64 `json:"ttft_p90_ms"`
	ITL     float64 `json:"itl_p90_ms"`
	Backlog float64 `json:"backlog_ms"`
}

// MarshalJSON writes the entry's p90s and backlog in ms.
func (g PlannerGroup) MarshalJSON() ([]byte, error) {
	return json.Marshal(plannerGroupWire{plainPlannerGroup(g), Millis(g.TTFT), Millis(g.ITL), Millis(g.Backlog)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (g *PlannerGroup) UnmarshalJSON(b []byte) error {
	var w plannerGroupWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*g = PlannerGroup(w.plainPlannerGroup)
	g.TTFT, g.ITL, g.Backlog = FromMillis(w.TTFT), FromMillis(w.ITL), FromMillis(w.Backlog)
	return nil
}

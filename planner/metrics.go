package planner

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/snapshot"
)

// The planner on /metrics (tsd_planner_*): its targets, what each entry
// showed the last interval, the replicas it has and the ones proposed,
// and the decisions by reason. Read from the daemon's status at each
// scrape, so /metrics and tsd status --json never disagree.

var (
	descTarget = prometheus.NewDesc("tsd_planner_target_seconds",
		"The SLO planner's targets (slo.ttft_p90, slo.itl_p90).", []string{"target"}, nil)
	descObserved = prometheus.NewDesc("tsd_planner_observed_seconds",
		"p90 over the last interval, by profile entry and target (0: no samples).", []string{"entry", "target"}, nil)
	descPressure = prometheus.NewDesc("tsd_planner_pressure",
		"The entry's observed p90 over its target (the larger of its targets); above 1 is a breach.", []string{"entry"}, nil)
	descPredicted = prometheus.NewDesc("tsd_planner_predicted_pressure",
		"The same with the load the predictor expects next interval.", []string{"entry"}, nil)
	descReplicas = prometheus.NewDesc("tsd_planner_replicas",
		"Replicas the entry has now.", []string{"entry", "kind"}, nil)
	descProposed = prometheus.NewDesc("tsd_planner_proposed_replicas",
		"Replicas the last decision proposes for the entry.", []string{"entry", "kind"}, nil)
	descDecisions = prometheus.NewDesc("tsd_planner_decisions_total",
		"Decisions since start, by reason (hold, move, add, no_donor, cooldown, at_max, no_targets).", []string{"reason"}, nil)
	descMoves = prometheus.NewDesc("tsd_planner_moves_total",
		"Layout changes the planner carried out (done) or that failed and were rolled back (failed).", []string{"outcome"}, nil)
	descPaused = prometheus.NewDesc("tsd_planner_paused",
		"1 while tsd planner pause holds the planner.", nil, nil)
	descActing = prometheus.NewDesc("tsd_planner_act",
		"1 in act mode (proposals carried out), 0 in advise mode.", nil, nil)
)

// Collector exports status() (nil: no planner, no series).
type Collector struct {
	status func() *snapshot.PlannerStatus
}

// NewCollector is the planner's collector over the daemon's status.
func NewCollector(status func() *snapshot.PlannerStatus) *Collector {
	return &Collector{status: status}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTarget, descObserved, descPressure, descPredicted, descReplicas, descProposed, descDecisions, descMoves, descPaused, descActing} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	p := c.status()
	if p == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if p.TTFT > 0 {
		gauge(descTarget, p.TTFT.Seconds(), "ttft_p90")
	}
	if p.ITL > 0 {
		gauge(descTarget, p.ITL.Seconds(), "itl_p90")
	}
	for _, g := range p.Groups {
		gauge(descObserved, g.TTFT.Seconds(), g.Group, "ttft_p90")
		gauge(descObserved, g.ITL.Seconds(), g.Group, "itl_p90")
		gauge(descPressure, g.Pressure, g.Group)
		gauge(descPredicted, g.Predicted, g.Group)
		gauge(descReplicas, float64(g.Replicas), g.Group, g.Kind)
		gauge(descProposed, float64(g.Proposed), g.Group, g.Kind)
	}
	codes := make([]string, 0, len(p.Decisions))
	for k := range p.Decisions {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	for _, k := range codes {
		ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(p.Decisions[k]), k)
	}
	ch <- prometheus.MustNewConstMetric(descMoves, prometheus.CounterValue, float64(p.Moves), "done")
	ch <- prometheus.MustNewConstMetric(descMoves, prometheus.CounterValue, float64(p.Failed), "failed")
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge(descPaused, b2f(p.Paused))
	gauge(descActing, b2f(p.Mode == "act"))
}

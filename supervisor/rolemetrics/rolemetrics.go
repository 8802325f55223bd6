// Package rolemetrics puts the supervisor's facts on /metrics: each
// role's state, restarts, exits by reason and uptime, the daemon's own
// uptime, read from the deployment's snapshot at scrape time (so a
// scrape costs no actor a message and never disagrees with `tsd status`).
// Registered on the process's one registry beside the gateway's and
// telemetry's series (docs/architecture.md §D8, cmd/tsd/up.go); every
// series is listed in docs/metrics.md.
package rolemetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/snapshot"
)

var (
	descState = prometheus.NewDesc("tsd_role_state",
		"1 for the state each role instance is in, 0 for the others (planned, starting, handshaking, ready, draining, stopping, stopped, crashed, backoff, failed, stalled, remote).",
		[]string{"role", "kind", "state"}, nil)
	descRestarts = prometheus.NewDesc("tsd_role_restarts_total",
		"Restarts of each role instance since tsd started it (automatic and requested).", []string{"role"}, nil)
	descExits = prometheus.NewDesc("tsd_role_exits_total",
		"How each role instance's processes ended, by reason: requested, shutdown, stalled, no_progress, start_failed, clean, error, signal.",
		[]string{"role", "reason"}, nil)
	descRoleUptime = prometheus.NewDesc("tsd_role_uptime_seconds",
		"Seconds since the role instance's current process started; 0 while none runs.", []string{"role"}, nil)
	descUptime = prometheus.NewDesc("tsd_uptime_seconds",
		"Seconds since the tsd daemon started.", nil, nil)
	descInfo = prometheus.NewDesc("tsd_deployment_info",
		"1, labelled with the deployment's name and the profile revision it runs (tsd apply changes it).", []string{"deployment", "revision"}, nil)
)

// Collector reads a deployment's snapshot at each scrape.
type Collector struct {
	snap    func() snapshot.Snapshot
	started time.Time
	now     func() time.Time
}

// New collects from snap (supervisor.Snapshot); started is when the
// daemon started; now is the clock (nil: time.Now).
func New(snap func() snapshot.Snapshot, started time.Time, now func() time.Time) *Collector {
	if now == nil {
		now = time.Now
	}
	return &Collector{snap: snap, started: started, now: now}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descRestarts, descExits, descRoleUptime, descUptime, descInfo} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap()
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descUptime, now.Sub(c.started).Seconds())
	gauge(descInfo, 1, s.Name, s.ProfileRevision)
	for _, r := range s.Roles {
		for _, st := range snapshot.RoleStates {
			v := 0.0
			if st == r.State {
				v = 1
			}
			gauge(descState, v, r.Name, r.Kind, st)
		}
		counter(descRestarts, float64(r.Restarts), r.Name)
		for _, why := range snapshot.ExitReasons {
			counter(descExits, float64(r.Exits[why]), r.Name, why)
		}
		gauge(descRoleUptime, uptime(r, now).Seconds(), r.Name)
	}
}

// uptime is how long the role's current process has run: 0 while none
// runs (before its first start, and from its exit until it starts again).
func uptime(r snapshot.RoleStatus, now time.Time) time.Duration {
	if r.PID == 0 || r.StartedAt.IsZero() || now.Before(r.StartedAt) {
		return 0
	}
	return now.Sub(r.StartedAt)
}

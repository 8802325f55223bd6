package rolemetrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/snapshot"
)

// A crash-looping decode, a failed prefill and a ready encode read on
// /metrics as an operator alerts on them: one state per role at 1,
// restarts and exits by reason as counters (every reason present, at 0
// until it happens), uptime 0 while no process runs.
func TestCollect(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0.Add(time.Hour)
	snap := snapshot.Snapshot{Name: "demo", ProfileRevision: "0123456789ab", Roles: []snapshot.RoleStatus{
		{Name: "encode", Kind: "encode", State: snapshot.StateReady, PID: 40, StartedAt: now.Add(-90 * time.Second)},
		{Name: "prefill", Kind: "prefill", State: snapshot.StateFailed, Restarts: 5,
			Exits: map[string]int{snapshot.ExitError: 5, snapshot.ExitRequested: 1}, StartedAt: now.Add(-time.Minute)},
		{Name: "decode-0", Kind: "decode", State: snapshot.StateBackoff, Restarts: 2, Exits: map[string]int{snapshot.ExitSignal: 2}},
	}}
	c := New(func() snapshot.Snapshot { return snap }, t0, func() time.Time { return now })
	want := `
# HELP tsd_role_restarts_total Restarts of each role instance since tsd started it (automatic and requested).
# TYPE tsd_role_restarts_total counter
tsd_role_restarts_total{role="decode-0"} 2
tsd_role_restarts_total{role="encode"} 0
tsd_role_restarts_total{role="prefill"} 5
# HELP tsd_role_uptime_seconds Seconds since the role instance's current process started; 0 while none runs.
# TYPE tsd_role_uptime_seconds gauge
tsd_role_uptime_seconds{role="decode-0"} 0
tsd_role_uptime_seconds{role="encode"} 90
tsd_role_uptime_seconds{role="prefill"} 0
# HELP tsd_uptime_seconds Seconds since the tsd daemon started.
# TYPE tsd_uptime_seconds gauge
tsd_uptime_seconds 3600
# HELP tsd_deployment_info 1, labelled with the deployment's name and the profile revision it runs (tsd apply changes it).
# TYPE tsd_deployment_info gauge
tsd_deployment_info{deployment="demo",revision="0123456789ab"} 1
`
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tsd_role_restarts_total", "tsd_role_uptime_seconds", "tsd_uptime_seconds", "tsd_deployment_info"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "tsd_role_exits_total"); n != 3*len(snapshot.ExitReasons) {
		t.Fatalf("%d exit series, want every reason of every role (%d)", n, 3*len(snapshot.ExitReasons))
	}
	if n := testutil.CollectAndCount(c, "tsd_role_state"); n != 3*len(snapshot.RoleStates) {
		t.Fatalf("%d state series, want every state of every role", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]string{}
	exits := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			switch mf.GetName() {
			case "tsd_role_state":
				if m.GetGauge().GetValue() == 1 {
					if prev, dup := on[l["role"]]; dup {
						t.Errorf("%s is both %s and %s", l["role"], prev, l["state"])
					}
					on[l["role"]] = l["state"] + "/" + l["kind"]
				}
			case "tsd_role_exits_total":
				exits[l["role"]+"/"+l["reason"]] = m.GetCounter().GetValue()
			}
		}
	}
	if on["encode"] != "ready/encode" || on["prefill"] != "failed/prefill" || on["decode-0"] != "backoff/decode" {
		t.Errorf("states %v", on)
	}
	if exits["prefill/error"] != 5 || exits["prefill/requested"] != 1 || exits["decode-0/signal"] != 2 || exits["encode/error"] != 0 {
		t.Errorf("exits %v", exits)
	}
}

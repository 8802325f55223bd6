package gateway

import (
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// A request gateway.max_concurrent turns away after its queue timeout is
// counted shed (smg_admission_queue_rejected_total{reason="timeout"}) and
// as a client error, never the deployment's; one that waited for a slot
// and got it shows its wait in the queued stage.
func TestShedAndQueuedStage(t *testing.T) {
	t.Parallel()
	base, entered, release, g := holdGateway(t, profiles.GatewayPlan{MaxConcurrent: 1}, 30*time.Millisecond)
	first := make(chan int, 1)
	go func() { first <- postStatus(base + "/v1/completions") }()
	<-entered
	if a := call(t, "POST", base+"/v1/completions", `{}`, false); a.status != 429 {
		t.Fatalf("second request: %d %s", a.status, a.body)
	}
	close(release)
	if c := <-first; c != 204 {
		t.Fatalf("held request: %d", c)
	}
	waitRecordsEnded(t, g, 2)
	_, body := httpGet(t, base+"/metrics")
	for _, c := range []struct {
		series string
		want   float64
	}{
		{`smg_admission_queue_rejected_total{reason="timeout"}`, 1},
		{`smg_admission_queue_rejected_total{reason="body_budget"}`, 0},
		{"tsd_gateway_traffic_client_errors_total", 1},
		{"tsd_gateway_traffic_errors_total", 0},
		// Both waited at the door: the first not at all, the shed one
		// its whole queue timeout.
		{`smg_router_stage_duration_seconds_count{stage="queued"}`, 2},
	} {
		if got := metricValue(t, body, c.series); got != c.want {
			t.Errorf("%s = %v, want %v", c.series, got, c.want)
		}
	}
	if sum := metricValue(t, body, `smg_router_stage_duration_seconds_sum{stage="queued"}`); sum < 0.025 {
		t.Errorf("queued stage sum %.4fs, want the shed request's 30 ms wait in it", sum)
	}
}

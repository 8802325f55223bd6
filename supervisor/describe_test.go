package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// /v1/describe answers a role as planned, secrets masked by profiles'
// rules in the env, the argv and the command line; an unknown role is an
// error naming the roles there are.
func TestControlDescribe(t *testing.T) {
	t.Parallel()
	r := shRole("decode", profiles.KindDecode, readyScript)
	r.Argv = append(r.Argv, "--api-key", "sekrit", "--port=9")
	r.Env["HF_TOKEN"] = "hf_sekrit"
	r.Env["CUDA_VISIBLE_DEVICES"] = "3"
	r.GPUs, r.PortCluster, r.DistInitAddr = []string{"3"}, []int{12500, 12501, 12502, 12504}, "127.0.0.1:12500"
	f := newFixture(t, nil, nil, r)
	f.wait("decode", "ready", state(snapshot.StateReady))
	c := NewControlClient(f.sup.Plan().ControlSocket)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	spec, err := c.Describe(ctx, "decode")
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(spec.Argv, " ") + " " + spec.CommandLine
	for _, e := range spec.Env {
		all += " " + e.Name + "=" + e.Value
	}
	if strings.Contains(all, "sekrit") {
		t.Fatalf("a secret reached the description: %s", all)
	}
	if spec.Env[0].Name != "CUDA_VISIBLE_DEVICES" || spec.Env[0].Value != "3" {
		t.Errorf("env order %+v: CUDA_VISIBLE_DEVICES first, as the command line sets it", spec.Env)
	}
	if !strings.Contains(spec.CommandLine, "HF_TOKEN='***'") || !strings.Contains(all, "--api-key ***") || !strings.Contains(all, "--port=9") {
		t.Errorf("masking: %s", all)
	}
	if spec.Restart.Policy != PolicyOnFailure || spec.Restart.Backoff != "20ms" || spec.Restart.BudgetCount != 3 {
		t.Errorf("restart policy %+v", spec.Restart)
	}
	if spec.Kind != profiles.KindDecode || len(spec.PortCluster) != 4 || spec.GPUs[0] != "3" {
		t.Errorf("spec %+v", spec)
	}
	if _, err := f.sup.Describe("nope"); !errors.Is(err, ErrUnknownRole) {
		t.Errorf("describe of an unknown role: %v", err)
	}
	if _, err := c.Describe(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "have decode") {
		t.Errorf("describe of an unknown role over the socket: %v", err)
	}
}

// gpuTelemetry decorates every snapshot with one GPU at a fixed load.
type gpuTelemetry struct{}

func (gpuTelemetry) Decorate(s *snapshot.Snapshot) {
	s.GPUs = []snapshot.GPUStatus{{Index: 0, UtilPct: 42, MemUsedB: 1 << 30, MemTotalB: 4 << 30}}
}

// The daemon keeps the trend rings: a sample each period whether or not
// anyone watches, and a watch that asks gets them in its first snapshot
// (a plain watch does not). The period here is 100 ms so that a dozen
// samples take a second.
func TestControlWatchHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, func(o *Options) {
		o.TrendPeriod = 100 * time.Millisecond
		o.Telemetry = gpuTelemetry{}
	}, shRole("decode", profiles.KindDecode, readyScript))
	f.wait("decode", "ready", state(snapshot.StateReady))
	c := NewControlClient(f.sup.Plan().ControlSocket)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	plain, snaps, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if plain.History != nil {
		t.Fatal("a plain watch carries the history")
	}
	// Wait (on the stream, not a clock) for snapshots in a dozen periods:
	// the daemon folded each, so it holds at least that many samples.
	slots := map[int64]bool{plain.Time.UnixMilli() / 100: true}
	for len(slots) < 12 {
		select {
		case s := <-snaps:
			slots[s.Time.UnixMilli()/100] = true
		case <-ctx.Done():
			t.Fatal("the stream stopped")
		}
	}
	first, _, err := c.WatchHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := first.History
	if h == nil || h.PeriodMS != 100 {
		t.Fatalf("history %+v", h)
	}
	if n := len(h.TimesMS); n < len(slots) {
		t.Fatalf("%d samples, but snapshots came in %d periods", n, len(slots))
	}
	for i := 1; i < len(h.TimesMS); i++ {
		if h.TimesMS[i]/h.PeriodMS <= h.TimesMS[i-1]/h.PeriodMS {
			t.Fatalf("samples %d and %d (%d, %d ms) share a period", i-1, i, h.TimesMS[i-1], h.TimesMS[i])
		}
	}
	var gpu *snapshot.TrendSeries
	for i := range h.Series {
		if h.Series[i].Name == "gpu0 util" {
			gpu = &h.Series[i]
		}
	}
	if gpu == nil || len(gpu.Values) == 0 || gpu.Values[len(gpu.Values)-1] != 42 {
		t.Fatalf("gpu0 util series %+v", gpu)
	}
	if h := f.sup.History(); h == nil || len(h.TimesMS) < len(first.History.TimesMS) {
		t.Fatalf("Supervisor.History %+v", h)
	}
}

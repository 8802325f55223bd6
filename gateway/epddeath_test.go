package gateway

import (
	"encoding/base64"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// waitCond waits for cond, checked on a short tick (what it watches, a
// worker's in-flight count and an engine's log, has no event of its own).
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// The encode engine that served an image dies (SIGKILL) after its encode
// leg finished, while the prefill has not finished (here it hangs, as one
// waiting for an embedding that no longer exists would, up to its 300 s
// timeout): the HTTP request ends within seconds with an error naming the
// encode and prefill roles, both PD legs are aborted, the error is
// counted, and other requests keep working on the other engines.
func TestEPDEncodeDeathAbortsWaitingPrefill(t *testing.T) {
	t.Parallel()
	rs := []role{
		{name: "encode-a", kind: profiles.KindEncode}, {name: "encode-b", kind: profiles.KindEncode},
		{name: "prefill-a", kind: profiles.KindPrefill, extra: []string{"--fake-hang-after-requests", "1"}},
		{name: "prefill-b", kind: profiles.KindPrefill},
		{name: "decode-a", kind: profiles.KindDecode},
	}
	c := newClusterPlan(t, Options{Mount: mountOpenAI(t, false)}, "tsd", profiles.ModeEPD, rs...)
	c.waitRegistered(roleNames(rs)...)
	setRouted(c.g, "prefill-b", false) // the first request goes to the hanging prefill

	img := "data:image/png;base64," + base64.StdEncoding.EncodeToString(testPNG(t, 40, 30, 80))
	type answer struct {
		status int
		body   string
		at     time.Time
	}
	done := make(chan answer, 1)
	go func() {
		st, body := postChat(t, c.base, imageChat(img))
		done <- answer{st, body, time.Now()}
	}()
	// The encode leg has finished once its encoder got the request and
	// the gateway holds no stream on it any more.
	var owner string
	waitCond(t, "the encode leg to finish", func() bool {
		for _, enc := range []string{"encode-a", "encode-b"} {
			if n, _ := c.g.InFlight(enc); n == 0 && strings.Contains(c.log(enc), "EncodeRequest received") {
				owner = enc
				return true
			}
		}
		return false
	})
	if !strings.Contains(c.log(owner), "embedded") {
		t.Fatalf("encode leg on %s ended without an embedding:\n%s", owner, c.log(owner))
	}
	select {
	case a := <-done:
		t.Fatalf("request ended before the encoder died: %d %s", a.status, a.body)
	default:
	}
	// The engine dies on its own (no view from a supervisor says so): the
	// lane sees its rank's connection close.
	c.mu.Lock()
	pid := c.procs[owner].Process.Pid
	c.mu.Unlock()
	killed := time.Now()
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("request still open 20 s after its encoder died")
	}
	want := "encode worker " + owner + " died before prefill prefill-a received the image embedding"
	if a.status < 500 || !strings.Contains(a.body, want) || !strings.Contains(a.body, "rank 0 disconnected") {
		t.Fatalf("answer %d %s, want a 5xx with %q (rank 0 disconnected)", a.status, a.body, want)
	}
	t.Logf("answered %d %s after the encoder died: %s", a.status, a.at.Sub(killed), a.body)
	if el := a.at.Sub(killed); el > 5*time.Second {
		t.Errorf("answered %s after the encoder died", el)
	}
	if n := testutil.ToFloat64(c.g.metrics.reqErrors.WithLabelValues("encode_worker_died")); n != 1 {
		t.Errorf("encode_worker_died errors %v, want 1", n)
	}
	for _, r := range []string{"prefill-a", "decode-a"} {
		if n, _ := c.g.InFlight(r); n != 0 {
			t.Errorf("%s: %d in flight after the abort", r, n)
		}
	}

	// The other encoder, a working prefill and the decode serve on.
	setRouted(c.g, "prefill-a", false)
	setRouted(c.g, "prefill-b", true)
	if st, body := postChat(t, c.base, imageChat(img)); st != 200 || !strings.Contains(body, `"finish_reason"`) {
		t.Fatalf("image chat after the death: %d %s", st, body)
	}
	if st, body := postChat(t, c.base, `{"messages":[{"role":"user","content":"hello"}],"max_tokens":3}`); st != 200 {
		t.Fatalf("text chat after the death: %d %s", st, body)
	}
}

// An encode role whose requests are ended (AbortRole, a stalled view) or
// whose view says its process ended closes the drop watchers hold, with
// the reason; a drained role (a view not routed) keeps its embeddings and
// closes nothing. A gateway that never hears a view (tsd gateway alone)
// drops nothing.
func TestEncodeDroppedChannel(t *testing.T) {
	t.Parallel()
	plan := &profiles.Plan{Name: "t", Gateway: profiles.GatewayPlan{Mode: profiles.ModeEPD, Workers: []profiles.WorkerPlan{
		{Role: "encode-a", Kind: profiles.KindEncode, DP: 1, URL: "ipc://" + t.TempDir() + "/e"},
	}}}
	g, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	closed := func(d *encodeDrop) bool {
		select {
		case <-d.Done():
			return true
		default:
			return false
		}
	}
	up := snapshot.RoleView{Alive: true, Routed: true}
	d := g.encodeDropped("encode-a")
	if closed(d) {
		t.Fatal("closed without any view")
	}
	g.SetRole("encode-a", up)
	if closed(d) {
		t.Fatal("closed by an alive view")
	}
	g.SetRole("encode-a", snapshot.RoleView{Reason: "exited"})
	if !closed(d) || d.Why() != "its process ended" {
		t.Fatalf("process end did not close it (why %q)", d.Why())
	}
	if !closed(g.encodeDropped("encode-a")) {
		t.Fatal("a watcher taken while the process is dead is open")
	}
	g.SetRole("encode-a", up)
	d = g.encodeDropped("encode-a")
	if closed(d) {
		t.Fatal("a fresh drop after coming back is closed")
	}
	setRouted(g, "encode-a", false)
	if closed(d) {
		t.Fatal("a drain closed it")
	}
	g.AbortRole("encode-a", "restart requested")
	if !closed(d) || !strings.Contains(d.Why(), "restart requested") {
		t.Fatalf("AbortRole did not close it (why %q)", d.Why())
	}
	if closed(g.encodeDropped("encode-a")) {
		t.Fatal("after the abort, new watchers get a closed drop")
	}
	d = g.encodeDropped("encode-a")
	g.SetRole("encode-a", snapshot.RoleView{Alive: true, Stalled: true, Reason: "process stopped"})
	if !closed(d) || !strings.Contains(d.Why(), "process stopped") {
		t.Fatalf("a stalled view did not close it (why %q)", d.Why())
	}
}

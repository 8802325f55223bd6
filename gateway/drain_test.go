package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// A drained decode (a view not routed, as a restart begins) finishes the
// stream it carries while new requests go to the other decode; AbortRole
// then ends what is still running on a role, on both legs, with the
// reason in the client's error.
func TestDrainFinishesInFlightAbortRoleEndsIt(t *testing.T) {
	t.Parallel()
	paced := []string{"--fake-tokens-per-s", "20"}
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill},
		role{name: "decode-0", kind: profiles.KindDecode, extra: paced}, role{name: "decode-1", kind: profiles.KindDecode, extra: paced})
	c.waitRegistered("prefill", "decode-0", "decode-1")
	hc := &http.Client{}
	streaming := func(seed int64, n int) (<-chan genResult, string) {
		t.Helper()
		first := make(chan struct{})
		res := make(chan genResult, 1)
		go func() { res <- c.generateNotify(context.Background(), hc, genBody(seed, n, true), first) }()
		select {
		case <-first:
		case <-time.After(20 * time.Second):
			t.Fatal("the stream never started")
		}
		for _, d := range []string{"decode-0", "decode-1"} {
			if n, _ := c.g.InFlight(d); n == 1 {
				return res, d
			}
		}
		t.Fatal("no decode carries the stream")
		return nil, ""
	}
	resA, drained := streaming(1, 20)
	other := map[string]string{"decode-0": "decode-1", "decode-1": "decode-0"}[drained]
	setRouted(c.g, drained, false)
	if n := c.g.DrainCount(drained); n != 1 {
		t.Fatalf("DrainCount(%s) = %d, want 1", drained, n)
	}
	// The prefill leg finished before the first token: the prefill is not
	// needed by it any more.
	waitCond(t, "the prefill leg to finish", func() bool { return c.g.DrainCount("prefill") == 0 })
	selected := func(role string) float64 {
		return testutil.ToFloat64(c.g.metrics.selection.WithLabelValues(role, profiles.KindDecode, "0"))
	}
	before := selected(drained)
	for i := range 4 {
		if res := c.generate(context.Background(), hc, genBody(int64(10+i), 2, false)); res.err != "" || !equalIDs(res.ids, expected(int64(10+i), 2)) {
			t.Fatalf("new request %d during the drain: %+v", i, res)
		}
	}
	if got := selected(drained); got != before {
		t.Fatalf("the drained decode got %v new requests", got-before)
	}
	if a := <-resA; a.err != "" || !equalIDs(a.ids, expected(1, 20)) {
		t.Fatalf("the drained stream: %+v", a)
	}
	if n := c.g.DrainCount(drained); n != 0 {
		t.Fatalf("DrainCount after the stream ended: %d", n)
	}

	// The drain gives up: AbortRole ends the stream on both legs.
	setRouted(c.g, drained, true)
	setRouted(c.g, other, false)
	resC, on := streaming(2, 400)
	if on != drained {
		t.Fatalf("stream went to %s, want %s", on, drained)
	}
	const why = "restart requested: drain deadline passed"
	if n := c.g.AbortRole(drained, why); n != 1 {
		t.Fatalf("AbortRole ended %d, want 1", n)
	}
	cres := <-resC
	if !strings.Contains(cres.err, why) || !strings.Contains(cres.err, drained) {
		t.Fatalf("aborted stream: %+v", cres)
	}
	waitCond(t, "both legs to end", func() bool {
		p, _ := c.g.InFlight("prefill")
		d, _ := c.g.InFlight(drained)
		return p == 0 && d == 0 && c.g.Status().InFlight == 0
	})
}

// emit sends one output batch for rid from the raw rank.
func (r *rawRank) emit(t *testing.T, id int, rid string, toks []int32, fin string) {
	t.Helper()
	b, err := wire.EncodeOutput(wire.OutputBatch{RIDs: []string{rid}, OutputIDs: [][]int32{toks},
		FinishedReasons: []string{fin}, PromptTokens: []int{4}, CompletionTokens: []int{len(toks)},
		CachedTokens: []int{0}, EngineIndex: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.out.Send(zmq4.NewMsg(b)); err != nil {
		t.Fatal(err)
	}
}

func rawPD(t *testing.T, opts Options) (*Gateway, *rawRank, *rawRank) {
	t.Helper()
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Workers: []profiles.WorkerPlan{
		{Role: "p", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", Bootstrap: "127.0.0.1:8998", DP: 1},
		{Role: "d", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	g, err := New(plan, withGenerate(opts))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	pw, _ := g.Lane().Worker("p")
	dw, _ := g.Lane().Worker("d")
	pr := dialRawRank(t, pw.HandshakeEndpoint(), "prefill")
	dr := dialRawRank(t, dw.HandshakeEndpoint(), "decode")
	waitReady(t, g)
	return g, pr, dr
}

// A decode rank that stops answering after its prefill finished is judged
// stalled within StallTimeout: the request ends with an error naming the
// role, rank and why, the rank shows stalled and leaves routing (the
// gateway is not ready), and it is re-admitted when it speaks again.
func TestDecodeStallEndsRequestAndReadmits(t *testing.T) {
	t.Parallel()
	const stall = 300 * time.Millisecond
	ev := &events{ch: make(chan string, 16)}
	g, pr, dr := rawPD(t, Options{StallTimeout: stall, OnEvent: ev.add})
	evs, err := g.Generate(context.Background(), genRequest(1, 8))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := wire.DecodeGenerateRequest(pr.next(t)[1])
	dr.next(t)
	// The decode owes nothing while its prefill runs; once the prefill
	// finished, its silence counts.
	finished := time.Now()
	pr.emit(t, 0, q.RID, nil, "length")
	var got error
	for e := range evs {
		if e.Err != nil {
			got = e.Err
		}
	}
	want := "d rank 0 stalled: no output for 300ms with 1 requests in flight"
	if got == nil || !strings.Contains(got.Error(), want) || !strings.Contains(got.Error(), "decode leg failed") {
		t.Fatalf("request ended with %v, want %q", got, want)
	}
	if el := time.Since(finished); el < stall || el > stall+2*time.Second {
		t.Errorf("stall verdict %s after the prefill finished, want %s + slack", el, stall)
	}
	if e := <-ev.ch; e != "stall d: "+want {
		t.Fatalf("event %q", e)
	}
	if n := testutil.ToFloat64(g.metrics.reqErrors.WithLabelValues("rank_stalled")); n != 1 {
		t.Fatalf("smg_router_request_errors_total{error_type=rank_stalled} = %v", n)
	}
	cur, ch, cancel := g.SubscribeRanks()
	defer cancel()
	for _, e := range cur {
		if e.Role == "d" && e.Rank.State != snapshot.RankStalled {
			t.Fatalf("decode rank shows %s", e.Rank.State)
		}
	}
	if g.Ready() {
		t.Fatal("ready with the only decode stalled")
	}
	if n, _ := g.InFlight("p"); n != 0 {
		t.Fatalf("prefill still has %d", n)
	}
	dr.emit(t, 0, q.RID, []int32{5}, "")
	deadline := time.After(10 * time.Second)
	for !g.Ready() {
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("the decode was never re-admitted")
		}
	}
	if e := <-ev.ch; !strings.HasPrefix(e, "readmit d: d rank 0 speaks again") {
		t.Fatalf("event %q", e)
	}
}

// A stalled view (the supervisor's verdict) ends the role's requests with
// its reason, shows its ranks stalled and takes it out of routing; a view
// that lifts it lets it be routed again.
func TestStalledView(t *testing.T) {
	t.Parallel()
	g, pr, dr := rawPD(t, Options{StallTimeout: -1})
	evs, err := g.Generate(context.Background(), genRequest(1, 8))
	if err != nil {
		t.Fatal(err)
	}
	pr.next(t)
	dr.next(t)
	g.SetRole("d", snapshot.RoleView{Alive: true, Stalled: true, Reason: "process stopped (state T)"})
	var got error
	for e := range evs {
		if e.Err != nil {
			got = e.Err
		}
	}
	if got == nil || !strings.Contains(got.Error(), "process stopped (state T)") {
		t.Fatalf("request ended with %v", got)
	}
	w, _ := g.Lane().Worker("d")
	if rs := w.Ranks(); rs[0].State != snapshot.RankStalled || g.Ready() {
		t.Fatalf("rank %s, ready %v", rs[0].State, g.Ready())
	}
	g.SetRole("d", snapshot.RoleView{Alive: true, Routed: true})
	if !g.Ready() {
		t.Fatal("not routed again")
	}
}

// While no decode is routable a new request waits for one instead of
// failing: routed again, it is served; a client that goes away ends the
// wait; after QueueTimeout the answer is 503 with Retry-After.
func TestQueueForRoutableWorker(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{QueueTimeout: time.Minute}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	setRouted(c.g, "decode", false)
	res := make(chan genResult, 1)
	go func() { res <- c.generate(context.Background(), http.DefaultClient, genBody(3, 3, false)) }()
	waitCond(t, "the request to queue", func() bool { return c.g.queuedNow.Load() == 1 })
	setRouted(c.g, "decode", true)
	if r := <-res; r.err != "" || !equalIDs(r.ids, expected(3, 3)) {
		t.Fatalf("queued request: %+v", r)
	}
	if n := testutil.ToFloat64(c.g.metrics.queued.WithLabelValues("routed")); n != 1 {
		t.Fatalf("queued{routed} = %v", n)
	}

	setRouted(c.g, "decode", false)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.g.Generate(ctx, genRequest(4, 3))
		errc <- err
	}()
	waitCond(t, "the request to queue", func() bool { return c.g.queuedNow.Load() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client gone while queued: %v", err)
	}
	if n := c.g.queuedNow.Load(); n != 0 {
		t.Fatalf("%d still queued", n)
	}
}

// After QueueTimeout with no routable decode the answer is a 503 naming
// the missing kind and the wait, with Retry-After.
func TestQueueTimeout503RetryAfter(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{QueueTimeout: 200 * time.Millisecond}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	setRouted(c.g, "decode", false)
	resp, err := http.Post(c.base+"/generate", "application/json", strings.NewReader(genBody(1, 2, false)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(b.String(), "no_decode_worker") || !strings.Contains(b.String(), "waited 200ms") {
		t.Fatalf("%d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b.String())
	}
	code, _ := httpGet(t, c.base+"/readiness")
	if code != 503 {
		t.Fatalf("readiness %d", code)
	}
	r, err := http.Get(c.base + "/readiness")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("readiness 503 without Retry-After")
	}
}

// A ts-fake decode that hangs mid-stream (it stops reading and stepping
// when a second request arrives) is judged stalled within StallTimeout:
// both requests end with an error naming the decode, its rank and why,
// both PD legs are gone, and the rank shows stalled.
func TestHungDecodeJudgedStalled(t *testing.T) {
	t.Parallel()
	const stall = time.Second // well above a paced token's gap, even on a loaded machine
	c := newCluster(t, Options{StallTimeout: stall}, role{name: "prefill", kind: profiles.KindPrefill},
		role{name: "decode", kind: profiles.KindDecode, extra: []string{"--fake-tokens-per-s", "20", "--fake-hang-after-requests", "2"}})
	c.waitRegistered("prefill", "decode")
	first := make(chan struct{})
	resA := make(chan genResult, 1)
	go func() {
		resA <- c.generateNotify(context.Background(), http.DefaultClient, genBody(1, 400, true), first)
	}()
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream never started")
	}
	sent := time.Now()
	resB := c.generate(context.Background(), http.DefaultClient, genBody(2, 4, false))
	a := <-resA
	el := time.Since(sent)
	want := "decode rank 0 stalled: no output for 1s with 2 requests in flight"
	for name, r := range map[string]genResult{"streaming": a, "second": resB} {
		if !strings.Contains(r.err, want) {
			t.Errorf("%s request: %+v, want an error with %q", name, r, want)
		}
	}
	if el > stall+3*time.Second {
		t.Errorf("requests ended %s after the decode hung", el)
	}
	c.waitState(snapshot.RankStalled, "decode")
	waitCond(t, "both legs to end", func() bool {
		p, _ := c.g.InFlight("prefill")
		d, _ := c.g.InFlight("decode")
		return p == 0 && d == 0 && c.g.Status().InFlight == 0
	})
}

// DrainCount counts the requests that still need a role: a prefill stops
// counting a request once its prefill leg finished, the decode counts it
// until its end.
func TestDrainCountPrefillLeg(t *testing.T) {
	t.Parallel()
	g, pr, dr := rawPD(t, Options{StallTimeout: -1})
	evs, err := g.Generate(context.Background(), genRequest(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := wire.DecodeGenerateRequest(pr.next(t)[1])
	dr.next(t)
	if p, d := g.DrainCount("p"), g.DrainCount("d"); p != 1 || d != 1 {
		t.Fatalf("before the prefill finished: prefill %d decode %d", p, d)
	}
	pr.emit(t, 0, q.RID, nil, "length")
	waitCond(t, "the prefill leg to finish", func() bool { return g.DrainCount("p") == 0 })
	if d := g.DrainCount("d"); d != 1 {
		t.Fatalf("decode DrainCount %d after the prefill finished", d)
	}
	dr.emit(t, 0, q.RID, []int32{5, 6}, "length")
	for range evs {
	}
	if d := g.DrainCount("d"); d != 0 {
		t.Fatalf("decode DrainCount %d after the end", d)
	}
}

// The measured SIGSTOP case: one of two decodes is stopped under load.
// Its requests end within StallTimeout (not after the 120 s KV timeout or
// the 300 s silence watchdog) with an error naming it, it shows stalled
// and takes no new work, the other decode's requests finish, and after
// SIGCONT its next output re-admits it.
func TestStoppedDecodeLeavesRoutingAndComesBack(t *testing.T) {
	t.Parallel()
	const stall = time.Second // well above a paced token's gap, even on a loaded machine
	paced := []string{"--fake-tokens-per-s", "20"}
	c := newCluster(t, Options{StallTimeout: stall}, role{name: "prefill", kind: profiles.KindPrefill},
		role{name: "decode-0", kind: profiles.KindDecode, extra: paced}, role{name: "decode-1", kind: profiles.KindDecode, extra: paced})
	c.waitRegistered("prefill", "decode-0", "decode-1")
	const n = 6
	results := make(chan genResult, n)
	for i := range n {
		first := make(chan struct{})
		go func() {
			results <- c.generateNotify(context.Background(), http.DefaultClient, genBody(int64(i), 60, true), first)
		}()
		select {
		case <-first:
		case <-time.After(20 * time.Second):
			t.Fatalf("request %d never streamed", i)
		}
	}
	onStopped, _ := c.g.InFlight("decode-1")
	if onStopped == 0 || onStopped == n {
		t.Fatalf("decode-1 carries %d of %d", onStopped, n)
	}
	c.mu.Lock()
	pid := c.procs["decode-1"].Process.Pid
	c.mu.Unlock()
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGCONT) })
	var ok, stalledErrs int
	for range n {
		r := <-results
		switch {
		case r.err == "" && len(r.ids) == 60:
			ok++
		case strings.Contains(r.err, "decode-1 rank 0 stalled: no output for 1s"):
			stalledErrs++
			if el := time.Since(stopped); el > stall+3*time.Second {
				t.Errorf("stalled request ended %s after SIGSTOP", el)
			}
		default:
			t.Errorf("odd result %+v", r)
		}
	}
	if ok != n-onStopped || stalledErrs != onStopped {
		t.Fatalf("ok %d stalled %d, want %d and %d", ok, stalledErrs, n-onStopped, onStopped)
	}
	c.waitState(snapshot.RankStalled, "decode-1")
	if r := c.generate(context.Background(), http.DefaultClient, genBody(99, 3, false)); r.err != "" {
		t.Fatalf("new request while decode-1 is stalled: %+v", r)
	}
	if d, _ := c.g.InFlight("decode-1"); d != 0 {
		t.Fatalf("stalled decode got work: %d", d)
	}
	if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c.waitRegistered("decode-1")
}

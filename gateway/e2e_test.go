package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/generate"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/testkit/testbin"
	"github.com/tsd-project/tsd/testkit/testports"
)

var tsFake string

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) (err error) {
		tsFake, err = testbin.Build(dir, "cmd/ts-fake")
		return err
	})
}

// freePort is reserved against every other test, in this binary and the
// others running beside it (testkit/testports).
func freePort(t testing.TB) int {
	t.Helper()
	return testports.Port(t)
}

// role describes one fake engine of a test deployment.
type role struct {
	name, kind string
	dp         int
	tcp        bool
	extra      []string
}

type cluster struct {
	t        testing.TB
	bootMode string
	g        *Gateway
	base     string
	plan     *profiles.Plan
	roles    map[string]role
	mu       sync.Mutex
	procs    map[string]*exec.Cmd
	logs     map[string]*bytes.Buffer
	outs     map[string]*syncBuf
	serveCh  chan error
}

// newCluster binds a gateway for roles (bootstrap_server: tsd) and starts
// one ts-fake per role.
func newCluster(t testing.TB, opts Options, roles ...role) *cluster {
	t.Helper()
	return newClusterMode(t, opts, "tsd", roles...)
}

// newClusterMode is newCluster with bootstrap_server engine or tsd.
func newClusterMode(t testing.TB, opts Options, bootMode string, roles ...role) *cluster {
	t.Helper()
	return newClusterPlan(t, opts, bootMode, profiles.ModePD, roles...)
}

// newClusterPlan is newClusterMode with a gateway mode (pd or epd).
func newClusterPlan(t testing.TB, opts Options, bootMode, mode string, roles ...role) *cluster {
	t.Helper()
	return newClusterWith(t, opts, bootMode, mode, nil, roles...)
}

// newClusterWith is newClusterPlan with edit (may be nil) applied to the
// plan before the gateway is built (API key, limits, CORS).
func newClusterWith(t testing.TB, opts Options, bootMode, mode string, edit func(*profiles.Plan), roles ...role) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	plan := &profiles.Plan{Name: "e2e", Model: "fake-model", ServedModelName: "fake", Gateway: profiles.GatewayPlan{
		Mode: mode, BootstrapServer: bootMode, Policy: profiles.PolicyPlan{Prefill: "round_robin", Decode: "least_load"}}}
	c := &cluster{t: t, bootMode: bootMode, plan: plan, roles: map[string]role{}, procs: map[string]*exec.Cmd{}, logs: map[string]*bytes.Buffer{}}
	for i, r := range roles {
		if r.dp == 0 {
			r.dp = 1
		}
		c.roles[r.name] = r
		wp := profiles.WorkerPlan{Role: r.name, Kind: r.kind, DP: r.dp, Handshake: "tcp://127.0.0.1:0"}
		if r.tcp {
			wp.URL = "tcp://127.0.0.1:" + strconv.Itoa(freePort(t))
			wp.Handshake = ""
		} else {
			wp.URL = "ipc://" + filepath.Join(dir, fmt.Sprintf("w%d", i))
		}
		if r.kind == profiles.KindPrefill || r.kind == profiles.KindEncode {
			wp.Bootstrap = "127.0.0.1:" + strconv.Itoa(freePort(t))
		}
		plan.Gateway.Workers = append(plan.Gateway.Workers, wp)
	}
	if edit != nil {
		edit(plan)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Listener = ln
	g, err := New(plan, withGenerate(opts))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.g = g
	c.base = "http://" + ln.Addr().String()
	c.serveCh = make(chan error, 1)
	go func() { c.serveCh <- g.Serve(context.Background()) }()
	t.Cleanup(func() {
		for name := range c.procs {
			c.kill(name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		<-c.serveCh
		if t.Failed() {
			for name, b := range c.logs {
				t.Logf("--- %s log ---\n%s", name, tail(b.String(), 3000))
			}
		}
	})
	for _, r := range roles {
		c.start(r.name)
	}
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

type syncBuf struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (c *cluster) start(name string) {
	c.t.Helper()
	r := c.roles[name]
	w, _ := c.g.Lane().Worker(name)
	hs := strings.TrimPrefix(w.HandshakeEndpoint(), "tcp://")
	host, port, _ := net.SplitHostPort(hs)
	mode := r.kind
	if k, ok := profiles.KindOf(r.kind); ok {
		mode = k.Mode // aggregated: null, upstream's aggregate serving
	}
	args := []string{"serve", "--headless", "--model", "fake-model", "--disaggregation-mode", mode,
		"--data-parallel-address", host, "--data-parallel-rpc-port", port, "--zmq-engine-index", "0",
		"--data-parallel-size", strconv.Itoa(r.dp), "--dist-init-addr", "127.0.0.1:" + strconv.Itoa(freePort(c.t)),
		"--fake-startup", "0", "--fake-log-requests=false"}
	if r.kind == profiles.KindPrefill {
		_, bport, _ := net.SplitHostPort(w.Plan().Bootstrap)
		args = append(args, "--disaggregation-bootstrap-port", bport, "--load-balance-method", "round_robin")
		if c.bootMode == "tsd" {
			args = append(args, "--fake-bootstrap", "external")
		}
	}
	if r.kind == profiles.KindEncode {
		// The encode engine hosts its own embedding rendezvous (docs/protocol.md §9.7).
		_, bport, _ := net.SplitHostPort(w.Plan().Bootstrap)
		args = append(args, "--disaggregation-bootstrap-port", bport)
	}
	args = append(args, r.extra...)
	cmd := exec.Command(tsFake, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	buf := &bytes.Buffer{}
	sb := &syncBuf{b: buf}
	cmd.Stdout = sb
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.procs[name] = cmd
	c.logs[name] = buf
	if c.outs == nil {
		c.outs = map[string]*syncBuf{}
	}
	c.outs[name] = sb
	c.mu.Unlock()
	c.g.SetRole(name, snapshot.RoleView{Alive: true, Routed: true}) // as the supervisor says of a running role
}

// kill SIGKILLs the role's process group (the launcher and its ranks).
func (c *cluster) kill(name string) {
	c.mu.Lock()
	cmd := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	c.g.SetRole(name, snapshot.RoleView{Reason: "killed by the test"}) // as the supervisor says once it exited
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
}

// waitRegistered waits until every rank of every named role is registered.
func (c *cluster) waitRegistered(names ...string) {
	c.t.Helper()
	c.waitState(snapshot.RankRegistered, names...)
}

// waitState waits until every rank of every named role is in state.
func (c *cluster) waitState(want string, names ...string) {
	c.t.Helper()
	cur, ch, cancel := c.g.SubscribeRanks()
	defer cancel()
	state := map[string]map[int]string{}
	apply := func(ev snapshot.RankEvent) {
		if state[ev.Role] == nil {
			state[ev.Role] = map[int]string{}
		}
		state[ev.Role][ev.Rank.Identity] = ev.Rank.State
	}
	for _, ev := range cur {
		apply(ev)
	}
	done := func() bool {
		for _, n := range names {
			reg := 0
			for _, st := range state[n] {
				if st == want {
					reg++
				}
			}
			if reg != c.roles[n].dp {
				return false
			}
		}
		return true
	}
	deadline := time.After(30 * time.Second)
	for !done() {
		select {
		case ev := <-ch:
			apply(ev)
		case <-deadline:
			c.t.Fatalf("ranks never %s: %v", want, state)
		}
	}
}

type genResult struct {
	ids    []int32
	finish string
	err    string
	status int
}

func genBody(seed int64, maxTokens int, stream bool) string {
	return fmt.Sprintf(`{"input_ids":[1,2,3,4],"stream":%v,"sampling_params":{"max_new_tokens":%d,"ignore_eos":true,"seed":%d}}`, stream, maxTokens, seed)
}

// expected is ts-fake's answer to genBody: with ignore_eos nothing stops
// it before max_new_tokens, so it is tokens 0 … maxTokens-1.
func expected(seed int64, maxTokens int) []int32 {
	p := fakemodel.Params{Seed: uint32(seed), MaxNewTokens: maxTokens, IgnoreEOS: true, EOS: 2, Vocab: 1000}
	out := make([]int32, max(maxTokens, 0))
	for i := range out {
		out[i] = int32(p.Token(i))
	}
	return out
}

// generate posts to /generate and collects the answer (SSE or JSON).
func (c *cluster) generate(ctx context.Context, hc *http.Client, body string) genResult {
	return c.generateNotify(ctx, hc, body, nil)
}

// generateNotify is generate that closes first (if not nil) when the
// first streamed token arrives.
func (c *cluster) generateNotify(ctx context.Context, hc *http.Client, body string, first chan<- struct{}) genResult {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/generate", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return genResult{err: err.Error()}
	}
	defer resp.Body.Close()
	res := genResult{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		res.err = string(b)
		return res
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var g generate.Response
		if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
			res.err = err.Error()
			return res
		}
		res.ids = g.OutputIDs
		if g.MetaInfo.FinishReason != nil {
			res.finish = g.MetaInfo.FinishReason.Type
		}
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sawDone := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			sawDone = true
			break
		}
		var ev struct {
			generate.Response
			Error *struct{ Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			res.err = err.Error()
			return res
		}
		if ev.Error != nil {
			res.err = ev.Error.Message
			continue
		}
		res.ids = append(res.ids, ev.OutputIDs...)
		if first != nil && len(res.ids) > 0 {
			close(first)
			first = nil
		}
		if ev.MetaInfo.FinishReason != nil {
			res.finish = ev.MetaInfo.FinishReason.Type
		}
	}
	if !sawDone && res.err == "" {
		res.err = "stream ended without [DONE]"
		if err := sc.Err(); err != nil {
			res.err += ": " + err.Error()
		}
	}
	return res
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// 1P1D over ipc: the registry matches the engines, /readiness flips, and
// streaming and non-streaming requests return exactly ts-fake's tokens.
func TestPD1P1DIPC(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	if code, body := httpGet(t, c.base+"/readiness"); code != 200 || !strings.Contains(body, `"ready"`) {
		t.Fatalf("readiness %d %s", code, body)
	}
	if code, body := httpGet(t, c.base+"/v1/models"); code != 200 || !strings.Contains(body, `"fake"`) {
		t.Fatalf("models %d %s", code, body)
	}
	for _, name := range []string{"prefill", "decode"} {
		w, _ := c.g.Lane().Worker(name)
		ranks := w.Ranks()
		if len(ranks) != 1 || ranks[0].Identity != 0 || ranks[0].Registration == nil || ranks[0].Registration.DPSize != 1 {
			t.Fatalf("%s ranks %+v", name, ranks)
		}
	}
	hc := &http.Client{}
	for _, stream := range []bool{false, true} {
		res := c.generate(context.Background(), hc, genBody(42, 12, stream))
		if res.err != "" || res.finish != "length" || !equalIDs(res.ids, expected(42, 12)) {
			t.Fatalf("stream=%v: %+v want %v", stream, res, expected(42, 12))
		}
	}
	if code, body := httpGet(t, c.base+"/metrics"); code != 200 || !strings.Contains(body, "smg_router_requests_total 2") || !strings.Contains(body, `smg_worker_requests_active{worker="decode",worker_type="decode"} 0`) {
		t.Fatalf("metrics %d %s", code, tail(body, 2000))
	}
	waitRecordsEnded(t, c.g, 2)
	if st := c.g.Status(); !st.Ready {
		t.Fatalf("status %+v", st)
	}
}

// Bad requests are refused with 400 naming the field.
func TestGenerateValidation(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	for body, want := range map[string]string{
		`{"input_ids":"x"}`: "input_ids",
		`{"input_ids":[1],`: "malformed JSON",
		`{}`:                "input_ids",
		`{"text":"hi"}`:     "text",
		`{"input_ids":[1],"return_logprob":true,"logprob_start_len":1}`: "logprob_start_len",
		`{"input_ids":[1],"sampling_params":{"top_p":2}}`:               "top_p",
		`{"input_ids":[1],"sampling_params":{"stop":["a"]}}`:            "sampling_params.stop",
		`{"input_ids":[-1]}`: "negative",
	} {
		res := c.generate(context.Background(), http.DefaultClient, body)
		if res.status != 400 || !strings.Contains(res.err, want) {
			t.Errorf("%s: %d %s (want 400 mentioning %q)", body, res.status, res.err, want)
		}
	}
}

// 1P(dp 2)-2D: 1,000 concurrent streaming requests all complete with
// ts-fake's tokens. The decode fetches KV from prefill group room mod 2, so
// a prefill leg sent to the wrong rank would never complete; both prefill
// ranks must have served.
func TestPDDP2Concurrent1000(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill, dp: 2},
		role{name: "decode-0", kind: profiles.KindDecode}, role{name: "decode-1", kind: profiles.KindDecode},
	)
	c.waitRegistered("prefill", "decode-0", "decode-1")
	pw, _ := c.g.Lane().Worker("prefill")
	if reg, exp := pw.Registered(); reg != 2 || exp != 2 {
		t.Fatalf("prefill registered %d of %d", reg, exp)
	}
	const n = 1000
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}}
	var wg sync.WaitGroup
	errs := make(chan string, n)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := c.generate(ctx, hc, genBody(int64(i), 8, true))
			if res.err != "" || !equalIDs(res.ids, expected(int64(i), 8)) {
				errs <- fmt.Sprintf("req %d: %+v", i, res)
			}
		}()
	}
	wg.Wait()
	close(errs)
	bad := 0
	for e := range errs {
		if bad < 5 {
			t.Error(e)
		}
		bad++
	}
	if bad > 0 {
		t.Fatalf("%d of %d requests failed", bad, n)
	}
	_, body := httpGet(t, c.base+"/metrics")
	for _, want := range []string{`smg_worker_selection_total{identity="0",worker="prefill"`, `smg_worker_selection_total{identity="1",worker="prefill"`,
		`worker="decode-0"`, `worker="decode-1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Killing a decode engine mid-stream ends its streams with an error well
// within the deadline while the other decode keeps serving; the restarted
// engine is re-admitted and serves again.
func TestDecodeKilledAndRestarted(t *testing.T) {
	t.Parallel()
	paced := []string{"--fake-tokens-per-s", "20"}
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill},
		role{name: "decode-0", kind: profiles.KindDecode, extra: paced}, role{name: "decode-1", kind: profiles.KindDecode, extra: paced})
	c.waitRegistered("prefill", "decode-0", "decode-1")
	hc := &http.Client{}
	const n = 8
	results := make(chan genResult, n)
	firsts := make([]chan struct{}, n)
	for i := range n {
		firsts[i] = make(chan struct{})
		go func() { results <- c.generateNotify(context.Background(), hc, genBody(int64(i), 60, true), firsts[i]) }()
	}
	// Once every stream has its first token all are mid-stream; least_load
	// has spread them over both decodes. Then kill one.
	for i := range n {
		select {
		case <-firsts[i]:
		case <-time.After(20 * time.Second):
			t.Fatalf("request %d never streamed", i)
		}
	}
	if a, _ := c.g.InFlight("decode-0"); a == 0 || a == n {
		t.Fatalf("decode-0 carries %d of %d requests; want a share", a, n)
	}
	killed := time.Now()
	c.kill("decode-0")
	var ok, failed int
	for range n {
		res := <-results
		switch {
		case res.err != "":
			failed++
			if time.Since(killed) > 10*time.Second {
				t.Errorf("failure arrived %s after the kill", time.Since(killed))
			}
		case res.finish == "length" && len(res.ids) == 60:
			ok++
		default:
			t.Errorf("odd result %+v", res)
		}
	}
	if ok == 0 || failed == 0 {
		t.Fatalf("ok %d failed %d: want both", ok, failed)
	}
	if tot, _ := c.g.InFlight("prefill"); tot != 0 {
		t.Errorf("prefill still has %d in flight", tot)
	}
	c.start("decode-0")
	c.waitRegistered("decode-0")
	setRouted(c.g, "decode-1", false)
	res := c.generate(context.Background(), hc, genBody(7, 5, false))
	if res.err != "" || !equalIDs(res.ids, expected(7, 5)) {
		t.Fatalf("after restart: %+v", res)
	}
	if tot, _ := c.g.InFlight("decode-1"); tot != 0 {
		t.Fatalf("unrouted decode got work")
	}
}

// A client that goes away mid-stream aborts both legs: nothing stays in
// flight on either engine.
func TestClientDisconnectAbortsBothLegs(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill},
		role{name: "decode", kind: profiles.KindDecode, extra: []string{"--fake-tokens-per-s", "10"}})
	c.waitRegistered("prefill", "decode")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/generate", strings.NewReader(genBody(1, 1000, true)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // first token arrived
		t.Fatal(err)
	}
	if tot, _ := c.g.InFlight("decode"); tot != 1 {
		t.Fatalf("decode in flight %d", tot)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, _ := c.g.InFlight("prefill")
		d, _ := c.g.InFlight("decode")
		if p == 0 && d == 0 && c.g.Status().InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still in flight: prefill %d decode %d gateway %d", p, d, c.g.Status().InFlight)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The engine got the abort: it keeps serving new requests normally.
	res := c.generate(context.Background(), http.DefaultClient, genBody(3, 3, false))
	if res.err != "" || !equalIDs(res.ids, expected(3, 3)) {
		t.Fatalf("after disconnect: %+v", res)
	}
}

// Malformed engines (ts-fake fault knobs) cannot crash or wedge the
// gateway: every request ends, and a healthy decode keeps serving.
func TestMalformedEnginesCannotWedge(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"garbage", "ragged", "tag", "unknown-rid"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, Options{RequestTimeout: 5 * time.Second, DrainGrace: time.Second},
				role{name: "prefill", kind: profiles.KindPrefill},
				role{name: "decode", kind: profiles.KindDecode, extra: []string{"--fake-malformed-output", mode, "--fake-malformed-at", "1"}})
			c.waitRegistered("prefill", "decode")
			for i := range 3 {
				res := c.generate(context.Background(), http.DefaultClient, genBody(int64(i), 4, i%2 == 0))
				if res.err == "" && !equalIDs(res.ids, expected(int64(i), 4)) {
					t.Errorf("req %d: wrong tokens %+v", i, res)
				}
			}
			if code, _ := httpGet(t, c.base+"/health"); code != 200 {
				t.Fatalf("health %d", code)
			}
		})
	}
}

// tcp:// workers: ephemeral data-plane ports are read back and sent in INIT.
func TestPDOverTCP(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill, tcp: true}, role{name: "decode", kind: profiles.KindDecode, tcp: true, dp: 2})
	c.waitRegistered("prefill", "decode")
	w, _ := c.g.Lane().Worker("decode")
	in, out := w.Endpoints()
	if strings.HasSuffix(in, ":0") || strings.HasSuffix(out, ":0") || !strings.HasPrefix(in, "tcp://127.0.0.1:") {
		t.Fatalf("endpoints %s %s", in, out)
	}
	for i := range 4 {
		res := c.generate(context.Background(), http.DefaultClient, genBody(int64(i), 6, i%2 == 1))
		if res.err != "" || !equalIDs(res.ids, expected(int64(i), 6)) {
			t.Fatalf("req %d: %+v", i, res)
		}
	}
}

// A decode that stops answering ends its requests with an error at the
// request deadline, and the silence watchdog declares it dead.
func TestHungDecodeEndsAtDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		opts      Options
		wantInErr string
	}{
		{"deadline", Options{RequestTimeout: 2 * time.Second}, "deadline"},
		{"silence", Options{SilenceTimeout: time.Second}, "silent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, tc.opts, role{name: "prefill", kind: profiles.KindPrefill},
				role{name: "decode", kind: profiles.KindDecode, extra: []string{"--fake-hang-after-requests", "1"}})
			c.waitRegistered("prefill", "decode")
			start := time.Now()
			res := c.generate(context.Background(), http.DefaultClient, genBody(1, 50, true))
			if res.err == "" || !strings.Contains(res.err, tc.wantInErr) {
				t.Fatalf("hung request: %+v", res)
			}
			if d := time.Since(start); d > 8*time.Second {
				t.Fatalf("took %s", d)
			}
			if p, _ := c.g.InFlight("prefill"); p != 0 {
				t.Fatalf("prefill leg still in flight: %d", p)
			}
		})
	}
}

// Outside epd mode encode workers are bound and handshaken but not routed; the status
// says so and readiness does not wait for them.
func TestEncodeBoundNotRouted(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode},
		role{name: "encode", kind: profiles.KindEncode})
	c.waitRegistered("prefill", "decode", "encode")
	if st := c.g.Status(); st.Note != "encode: not routed (gateway mode pd)" || !st.Ready {
		t.Fatalf("status %+v", st)
	}
	res := c.generate(context.Background(), http.DefaultClient, genBody(5, 4, false))
	if res.err != "" || !equalIDs(res.ids, expected(5, 4)) {
		t.Fatalf("%+v", res)
	}
	if tot, _ := c.g.InFlight("encode"); tot != 0 {
		t.Fatal("encode got work")
	}
}

// benchCluster serves 1P1D with unpaced engines.
func benchRun(b *testing.B, viaHTTP bool) {
	c := newCluster(b, Options{}, role{name: "prefill", kind: profiles.KindPrefill, extra: []string{"--fake-tokens-per-s", "0"}},
		role{name: "decode", kind: profiles.KindDecode, extra: []string{"--fake-tokens-per-s", "0"}})
	c.waitRegistered("prefill", "decode")
	const tokens = 32
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.ResetTimer()
	start := time.Now()
	var toks atomicInt
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		i := int64(0)
		for pb.Next() {
			i++
			if viaHTTP {
				res := c.generate(context.Background(), hc, genBody(i, tokens, true))
				if res.err != "" {
					b.Error(res.err)
					return
				}
				toks.add(len(res.ids))
				continue
			}
			ms := tokens
			r := genRequest(i, ms)
			ch, err := c.g.Generate(context.Background(), r)
			if err != nil {
				b.Error(err)
				return
			}
			for ev := range ch {
				if ev.Err != nil {
					b.Error(ev.Err)
				}
				toks.add(len(ev.TokenIDs))
			}
		}
	})
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/el, "req/s")
	b.ReportMetric(float64(toks.get())/el, "tok/s")
}

// BenchmarkGenerateHTTP measures requests/s and streamed tokens/s through
// /generate (SSE, 32 tokens each, 32 concurrent clients per CPU).
func BenchmarkGenerateHTTP(b *testing.B) { benchRun(b, true) }

// BenchmarkGenerateEngine is the same through tokenapi.Engine, without HTTP.
func BenchmarkGenerateEngine(b *testing.B) { benchRun(b, false) }

// Sampled-token logprobs travel from the decode leg to the client.
func TestOutputLogprobs(t *testing.T) {
	t.Parallel()
	lp := []string{"--enable-output-logprobs"}
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill, extra: lp}, role{name: "decode", kind: profiles.KindDecode, extra: lp})
	c.waitRegistered("prefill", "decode")
	body := `{"input_ids":[1,2,3],"return_logprob":true,"sampling_params":{"max_new_tokens":4,"ignore_eos":true,"seed":9}}`
	req, _ := http.NewRequest(http.MethodPost, c.base+"/generate", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g struct {
		OutputIDs []int32 `json:"output_ids"`
		MetaInfo  struct {
			Logprobs [][2]float64 `json:"output_token_logprobs"`
		} `json:"meta_info"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		t.Fatal(err)
	}
	if !equalIDs(g.OutputIDs, expected(9, 4)) || len(g.MetaInfo.Logprobs) != 4 {
		t.Fatalf("%+v", g)
	}
	for i, p := range g.MetaInfo.Logprobs {
		if want := fakemodel.Logprob(9, i); p[0] != want || int32(p[1]) != g.OutputIDs[i] {
			t.Errorf("logprob %d = %v, want [%v %d]", i, p, want, g.OutputIDs[i])
		}
	}
}

// A restarted prefill re-registers with the rendezvous the gateway hosts
// (its old registrations are forgotten when it dies) and serves again.
func TestPrefillRestartWithHostedRendezvous(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{QueueTimeout: 200 * time.Millisecond}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	if res := c.generate(context.Background(), http.DefaultClient, genBody(11, 3, false)); res.err != "" {
		t.Fatalf("before restart: %+v", res)
	}
	c.kill("prefill")
	c.waitState(snapshot.RankDisconnected, "prefill")
	res := c.generate(context.Background(), http.DefaultClient, genBody(12, 3, false))
	if res.status != http.StatusServiceUnavailable || !strings.Contains(res.err, "no_prefill_worker") || !strings.Contains(res.err, "waited 200ms") {
		t.Fatalf("with prefill down: %+v", res)
	}
	c.start("prefill")
	c.waitRegistered("prefill")
	res = c.generate(context.Background(), http.DefaultClient, genBody(13, 3, false))
	if res.err != "" || !equalIDs(res.ids, expected(13, 3)) {
		t.Fatalf("after restart: %+v", res)
	}
}

// With bootstrap_server: engine the prefill hosts its own rendezvous and
// reports it in its registration, which the gateway then puts in requests.
func TestPDEngineHostedRendezvous(t *testing.T) {
	t.Parallel()
	c := newClusterMode(t, Options{}, "engine", role{name: "prefill", kind: profiles.KindPrefill, dp: 2}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	w, _ := c.g.Lane().Worker("prefill")
	if r := w.Ranks()[0].Registration; r == nil || r.Bootstrap != w.Plan().Bootstrap {
		t.Fatalf("registration bootstrap %+v, plan %s", r, w.Plan().Bootstrap)
	}
	for i := range 6 {
		res := c.generate(context.Background(), http.DefaultClient, genBody(int64(100+i), 5, i%2 == 0))
		if res.err != "" || !equalIDs(res.ids, expected(int64(100+i), 5)) {
			t.Fatalf("req %d: %+v", i, res)
		}
	}
}

package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/profiles"
)

// A streamed chat request's access line carries the gateway's share of
// its time to first token (gw_us and its stages, which add up), and
// tsd_gateway_added_ttft_seconds counts it; a non-streamed one and a
// refused one carry none.
func TestChatAccessLineHasGatewayShare(t *testing.T) {
	t.Parallel()
	tok, err := tokenizer.Load("tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{b: &bytes.Buffer{}}
	plan := &profiles.Plan{ServedModelName: "fake", Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Workers: []profiles.WorkerPlan{
		{Role: "p", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", Bootstrap: "127.0.0.1:8998", DP: 1},
		{Role: "d", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(plan, Options{Listener: ln, Logger: slog.New(slog.NewTextHandler(logs, nil)), Mount: func(e tokenapi.Engine, mux *http.ServeMux) {
		openai.New(e, tok, openai.Options{}).Register(mux)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(context.Background()); err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- g.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		<-serveDone
	})
	pw, _ := g.Lane().Worker("p")
	dw, _ := g.Lane().Worker("d")
	go serveStepped(dialRawRank(t, pw.HandshakeEndpoint(), "prefill"), 1)
	go serveStepped(dialRawRank(t, dw.HandshakeEndpoint(), "decode"), 4)
	waitReady(t, g)

	base := "http://" + ln.Addr().String()
	post := func(body string) int {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const msgs = `"messages":[{"role":"user","content":"hello there"}]`
	if st := post(`{"model":"fake","stream":true,"max_tokens":4,"min_tokens":4,"ignore_eos":true,` + msgs + `}`); st != 200 {
		t.Fatalf("stream: %d", st)
	}
	if st := post(`{"model":"fake","max_tokens":4,"min_tokens":4,"ignore_eos":true,` + msgs + `}`); st != 200 {
		t.Fatalf("whole reply: %d", st)
	}
	if st := post(`{"model":"fake","stream":true,"messages":[]}`); st != 400 {
		t.Fatalf("bad request: %d", st)
	}
	// The last byte can reach the client before the record ends.
	var access []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		access = access[:0]
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "msg=access") {
				access = append(access, l)
			}
		}
		if len(access) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d access lines, want 3:\n%s", len(access), logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	field := func(line, name string) (int64, bool) {
		m := regexp.MustCompile(`\b` + name + `=(\d+)`).FindStringSubmatch(line)
		if m == nil {
			return 0, false
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		return v, true
	}
	t.Log(access[0])
	// Lines follow the order the requests ended, which is the order sent.
	total, ok := field(access[0], "gw_us")
	if !ok {
		t.Fatalf("the stream's access line has no gw_us: %s", access[0])
	}
	var sum int64
	for _, f := range []string{"gw_tok_us", "gw_send_us", "gw_write_us"} {
		v, ok := field(access[0], f)
		if !ok {
			t.Fatalf("no %s: %s", f, access[0])
		}
		sum += v
	}
	// What comes before the legs are sent lies inside the time to the
	// first token (ttft_ms: the record's start to the token from the
	// lane); the write stage comes after that token, inside the
	// request's latency only (a loaded box can stall the first flush
	// for milliseconds).
	msField := func(name string) float64 {
		m := regexp.MustCompile(`\b` + name + `=([0-9.]+)`).FindStringSubmatch(access[0])
		if m == nil {
			t.Fatalf("no %s: %s", name, access[0])
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	tokUs, _ := field(access[0], "gw_tok_us")
	sendUs, _ := field(access[0], "gw_send_us")
	if ttft := msField("ttft_ms"); float64(tokUs+sendUs) > ttft*1000+1000 {
		t.Errorf("gw_tok_us+gw_send_us=%d beyond the whole time to first token (%.1f ms): %s", tokUs+sendUs, ttft, access[0])
	}
	if lat := msField("latency_ms"); float64(total) > lat*1000+1000 {
		t.Errorf("gw_us=%d beyond the request's latency (%.1f ms): %s", total, lat, access[0])
	}
	// Each field is rounded down on its own: the stages may sum to a few µs less.
	if sum > total || total-sum > 3 {
		t.Errorf("stages sum to %d µs, gw_us=%d: %s", sum, total, access[0])
	}
	for i := 1; i < 3; i++ {
		if strings.Contains(access[i], "gw_us=") {
			t.Errorf("access line %d has gw_us (not a stream, or refused): %s", i, access[i])
		}
	}
	_, body := httpGet(t, base+"/metrics")
	if n := metricValue(t, body, "tsd_gateway_added_ttft_seconds_count"); n != 1 {
		t.Errorf("tsd_gateway_added_ttft_seconds_count = %v, want 1", n)
	}
	if v := metricValue(t, body, "tsd_gateway_added_ttft_seconds_sum"); v <= 0 || v > 10 {
		t.Errorf("tsd_gateway_added_ttft_seconds_sum = %v", v)
	}
}

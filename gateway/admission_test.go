package gateway

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/profiles"
)

// holdGateway serves a mounted POST /v1/completions that reports each
// request on entered and holds it until release is closed: a fake engine
// that keeps requests in flight as long as the test wants.
func holdGateway(t *testing.T, plan profiles.GatewayPlan, queue time.Duration) (base string, entered chan struct{}, release chan struct{}, g *Gateway) {
	t.Helper()
	entered, release = make(chan struct{}, 16), make(chan struct{})
	plan.Listen = "127.0.0.1:0"
	g, err := New(&profiles.Plan{Gateway: plan}, withGenerate(Options{QueueTimeout: queue, Mount: func(_ tokenapi.Engine, mux *http.ServeMux) {
		mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	go g.Serve(t.Context())
	t.Cleanup(func() { _ = g.Shutdown(t.Context()) })
	return "http://" + g.Addr(), entered, release, g
}

// gateway.max_concurrent: beyond the limit a request waits up to the
// queue timeout, then gets 429 with Retry-After; one that waits while a
// slot frees is served.
func TestMaxConcurrent(t *testing.T) {
	t.Parallel()
	base, entered, release, _ := holdGateway(t, profiles.GatewayPlan{MaxConcurrent: 2}, 20*time.Millisecond)
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- postStatus(base + "/v1/completions")
		}()
	}
	<-entered
	<-entered // both slots held
	a := call(t, "POST", base+"/v1/completions", `{}`, false)
	if a.status != 429 || a.header.Get("Retry-After") == "" || !strings.Contains(a.body, `"code":"too_many_requests"`) || !strings.Contains(a.body, "max_concurrent") {
		t.Fatalf("third request: %d %v %s", a.status, a.header, a.body)
	}
	// Probes and non-generation routes are not counted.
	if a := call(t, "GET", base+"/health", "", false); a.status != 200 {
		t.Fatalf("health while full: %d", a.status)
	}
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 204 {
			t.Fatalf("held request: %d", c)
		}
	}

	// A long queue timeout: the waiter is admitted when a slot frees.
	base, entered, release, g := holdGateway(t, profiles.GatewayPlan{MaxConcurrent: 1}, time.Hour)
	first := make(chan int, 1)
	go func() { first <- postStatus(base + "/v1/completions") }()
	<-entered
	second := make(chan int, 1)
	go func() { second <- postStatus(base + "/v1/completions") }()
	deadline := time.After(10 * time.Second)
	for g.Status().Queued != 1 {
		select {
		case <-deadline:
			t.Fatal("the second request never queued")
		case <-time.After(time.Millisecond):
		}
	}
	close(release) // the first finishes; the second takes its slot and is released at once
	if c1, c2 := <-first, <-second; c1 != 204 || c2 != 204 {
		t.Fatalf("queued: %d %d", c1, c2)
	}
}

// The request id is echoed (minted when absent), CORS preflights are
// answered for the configured origins, and a 503 carries Retry-After.
func TestFrontDoorHeaders(t *testing.T) {
	t.Parallel()
	base, _, _, _ := holdGateway(t, profiles.GatewayPlan{CORSOrigins: []string{"https://app.example"}}, -1)
	req, _ := http.NewRequest("POST", base+"/generate", strings.NewReader(`{"input_ids":[1]}`))
	req.Header.Set("X-Request-Id", "trace-7")
	req.Header.Set("Origin", "https://app.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Request-Id") != "trace-7" ||
		resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("no engines: %d %v", resp.StatusCode, resp.Header)
	}
	if a := call(t, "GET", base+"/health", "", false); !strings.HasPrefix(a.header.Get("X-Request-Id"), "req-") {
		t.Fatalf("minted id: %v", a.header)
	}
	for _, path := range []string{"/v1/completions", "/generate"} {
		req, _ = http.NewRequest("OPTIONS", base+path, nil)
		req.Header.Set("Origin", "https://app.example")
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
			!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "authorization") {
			t.Fatalf("preflight %s: %d %v", path, resp.StatusCode, resp.Header)
		}
	}
}

// postStatus POSTs {} and returns the status (-1: no answer); safe off
// the test goroutine.
func postStatus(url string) int {
	resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

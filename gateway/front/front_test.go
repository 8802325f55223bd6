package front

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type body struct {
	Model    string   `json:"model"`
	MaxToks  *int     `json:"max_tokens"`
	Messages []string `json:"messages"`
	Inner    *struct {
		A int `json:"a"`
	} `json:"inner"`
	embedded
}

type embedded struct {
	Stream bool `json:"stream"`
}

var testFields = &Fields{
	Ignored: map[string]string{"user": "harmless"},
	Refused: map[string]string{"logit_bias": "not implemented"},
	Nested: map[string]*Fields{"inner": {Refused: map[string]string{"b": "no b"},
		Values: map[string]Allowed{"mode": {Values: []string{`"x"`}, Why: "only x"}}}},
	Values: map[string]Allowed{"stream": {Values: []string{"false"}, Why: "no streams"}, "tier": {Values: []string{`"auto"`}, Why: "one tier"}},
}

// Decoding names the field as the client sent it and never leaks Go's
// type vocabulary; unknown and refused fields are named.
func TestDecode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, code, param, msg string
	}{
		{`{`, "invalid_json", "", "invalid JSON"},
		{``, "invalid_request", "", "empty"},
		{`[1]`, "invalid_request", "", "JSON object"},
		{`{"model":"m"} x`, "invalid_request", "", "trailing"},
		{`{"messages":"hi"}`, "invalid_request", "messages", "invalid type for field 'messages': expected array"},
		{`{"max_tokens":"5"}`, "invalid_request", "max_tokens", "expected integer"},
		{`{"max_tokens":1.5}`, "invalid_request", "max_tokens", "expected integer"},
		{`{"inner":{"a":"x"}}`, "invalid_request", "inner.a", "expected integer"},
		{`{"stream":1}`, "invalid_request", "stream", "expected boolean"},
		{`{"bogus":1}`, "unknown_parameter", "bogus", "bogus"},
		{`{"logit_bias":{"1":2}}`, "unsupported_parameter", "logit_bias", "not implemented"},
		{`{"inner":{"b":1}}`, "unsupported_parameter", "inner.b", "no b"},
		{`{"inner":{"c":1}}`, "unknown_parameter", "inner.c", "inner.c"},
		{`{"stream":true}`, "unsupported_value", "stream", "'stream' true is not supported: no streams"},
		{`{"tier":"flex"}`, "unsupported_value", "tier", `'tier' "flex" is not supported: one tier`},
		{`{"inner":{"mode":"y"}}`, "unsupported_value", "inner.mode", "only x"},
	} {
		var v body
		e := DecodeBytes([]byte(c.in), &v, testFields)
		if e == nil {
			t.Errorf("%s: accepted", c.in)
			continue
		}
		if e.Status != 400 || e.Code != c.code || e.Param != c.param || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%s: %d %s param=%q %q; want %s param=%q mentioning %q", c.in, e.Status, e.Code, e.Param, e.Message, c.code, c.param, c.msg)
		}
		noGoNames(t, c.in, e.Message)
	}
	for _, ok := range []string{`{"model":"m","user":"u","stream":false}`, `{"logit_bias":null}`, `{"inner":{"a":1}}`, `{"inner":null}`,
		`{"tier":"auto","stream":null}`, `{"inner":{"mode":"x"}}`} {
		var v body
		if e := DecodeBytes([]byte(ok), &v, testFields); e != nil {
			t.Errorf("%s: %v", ok, e)
		}
	}
}

func noGoNames(t *testing.T, ctx, msg string) {
	t.Helper()
	for _, bad := range []string{"Go struct", "json:", "unmarshal", "main.", "front."} {
		if strings.Contains(msg, bad) {
			t.Errorf("%s: message %q leaks %q", ctx, msg, bad)
		}
	}
}

// The error body is OpenAI's four fields; 503 and 429 carry Retry-After.
func TestWriteError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err        error
		status     int
		typ, code  string
		param      any
		retryAfter bool
	}{
		{BadRequest("top_p", "bad"), 400, "invalid_request_error", "invalid_request", "top_p", false},
		{Errorf(503, "no_decode_worker", "", "down"), 503, "service_unavailable", "no_decode_worker", nil, true},
		{Errorf(429, "too_many_requests", "", "busy"), 429, "rate_limit_error", "too_many_requests", nil, true},
		{Errorf(401, "invalid_api_key", "", "key"), 401, "authentication_error", "invalid_api_key", nil, false},
		{io.EOF, 500, "internal_error", "internal_error", nil, false},
		{BadRequest("messages", "process messages: json: cannot unmarshal string into Go struct field x.y of type []main.T"), 400, "invalid_request_error", "invalid_request", "messages", false},
	} {
		w := httptest.NewRecorder()
		WriteError(w, c.err)
		var got map[string]map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		e := got["error"]
		if w.Code != c.status || e["type"] != c.typ || e["code"] != c.code || e["param"] != c.param || len(e) != 4 {
			t.Errorf("%v: %d %v", c.err, w.Code, e)
		}
		noGoNames(t, "WriteError", e["message"].(string))
		if (w.Header().Get("Retry-After") != "") != c.retryAfter || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%v: headers %v", c.err, w.Header())
		}
	}
}

func serve(t *testing.T, cfg Config, routes map[string]Route) string {
	t.Helper()
	d := New(cfg)
	mux := http.NewServeMux()
	for pattern, rt := range routes {
		mux.Handle(pattern, d.Wrap(rt, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Seen-Id", RequestID(r.Context()))
			w.WriteHeader(204)
		})))
	}
	srv := httptest.NewServer(Dispatch(func(h http.Handler) http.Handler { return d.Wrap(Route{Label: "unmatched", Public: true}, h) }, Mounted{Mux: mux}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func do(t *testing.T, method, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// x-request-id is taken as sent and echoed, minted when absent or unfit.
func TestRequestID(t *testing.T) {
	t.Parallel()
	base := serve(t, Config{}, map[string]Route{"GET /x": {}})
	resp, _ := do(t, "GET", base+"/x", "X-Request-Id", "client-42")
	if resp.Header.Get("X-Request-Id") != "client-42" || resp.Header.Get("X-Seen-Id") != "client-42" {
		t.Fatalf("echo: %v", resp.Header)
	}
	resp, _ = do(t, "GET", base+"/x")
	if id := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(id, "req-") || resp.Header.Get("X-Seen-Id") != id {
		t.Fatalf("minted: %v", resp.Header)
	}
	resp, _ = do(t, "GET", base+"/x", "X-Request-Id", strings.Repeat("a", 200))
	if id := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(id, "req-") {
		t.Fatalf("oversized id kept: %q", id)
	}
	// Errors carry it too.
	resp, _ = do(t, "GET", base+"/nowhere", "X-Request-Id", "r-404")
	if resp.StatusCode != 404 || resp.Header.Get("X-Request-Id") != "r-404" {
		t.Fatalf("404: %d %v", resp.StatusCode, resp.Header)
	}
}

// CORS: a preflight from an allowed origin is answered before auth; a
// disallowed one is refused; without origins configured nothing changes.
func TestCORS(t *testing.T) {
	t.Parallel()
	base := serve(t, Config{APIKey: "k", CORSOrigins: []string{"https://app.example"}}, map[string]Route{"POST /v1/chat/completions": {}})
	pre := []string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type, x-stainless-os"}
	resp, _ := do(t, "OPTIONS", base+"/v1/chat/completions", pre...)
	h := resp.Header
	if resp.StatusCode != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "x-stainless-os") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, h)
	}
	resp, _ = do(t, "POST", base+"/v1/chat/completions", "Origin", "https://app.example", "Authorization", "Bearer k")
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Request-Id") {
		t.Fatalf("actual request: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body := do(t, "OPTIONS", base+"/v1/chat/completions", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
	if resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" || !strings.Contains(body, "cors_origin_not_allowed") {
		t.Fatalf("disallowed preflight: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	plain := serve(t, Config{}, map[string]Route{"POST /v1/chat/completions": {}})
	resp, body = do(t, "OPTIONS", plain+"/v1/chat/completions", pre...)
	if resp.StatusCode != 405 || resp.Header.Get("Access-Control-Allow-Origin") != "" || !strings.Contains(body, "method_not_allowed") {
		t.Fatalf("no cors configured: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if o, ok := AllowedOrigin([]string{"*"}, "http://x"); !ok || o != "*" {
		t.Fatal("wildcard")
	}
}

// Unknown routes and wrong methods get the one error shape.
func TestNotFoundAndMethod(t *testing.T) {
	t.Parallel()
	base := serve(t, Config{}, map[string]Route{"POST /generate": {}, "GET /v1/models": {}})
	resp, body := do(t, "GET", base+"/generate")
	if resp.StatusCode != 405 || resp.Header.Get("Allow") == "" || !strings.Contains(body, `"code":"method_not_allowed"`) {
		t.Fatalf("405: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = do(t, "GET", base+"/v1/responses")
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, `"type":"not_found_error"`) {
		t.Fatalf("404: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// The limiter admits n at once; the next waits, then is refused 429 (or
// admitted when a slot frees). Events, not sleeps: slots are held until
// released here.
func TestLimiter(t *testing.T) {
	t.Parallel()
	queued := make(chan int, 8)
	l := NewLimiter(2, time.Hour, func(d int) { queued <- d })
	r1, e1 := l.Acquire(context.Background())
	r2, e2 := l.Acquire(context.Background())
	if e1 != nil || e2 != nil || l.InUse() != 2 {
		t.Fatal(e1, e2)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var e3 *Error
	go func() {
		defer wg.Done()
		var r3 func()
		r3, e3 = l.Acquire(context.Background())
		r3()
	}()
	if d := <-queued; d != 1 {
		t.Fatalf("queue delta %d", d)
	}
	r1()
	wg.Wait()
	if e3 != nil {
		t.Fatalf("waiter refused after a release: %v", e3)
	}
	r2()

	short := NewLimiter(1, time.Millisecond, nil)
	rel, _ := short.Acquire(context.Background())
	if _, e := short.Acquire(context.Background()); e == nil || e.Status != 429 || !strings.Contains(e.Message, "max_concurrent") {
		t.Fatalf("over the limit: %v", e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := NewLimiter(1, time.Hour, nil)
	relSlow, _ := slow.Acquire(context.Background())
	if _, e := slow.Acquire(ctx); e == nil || e.Code != "client_gone" {
		t.Fatalf("client gone while queued: %v", e)
	}
	rel()
	relSlow()
	if NewLimiter(0, time.Second, nil) != nil {
		t.Fatal("0 must be unlimited (nil)")
	}
}

// A panic in a handler is a 500 in the one shape; the server lives on.
func TestRecover(t *testing.T) {
	t.Parallel()
	var where string
	d := New(Config{OnPanic: func(w string, _ any, _ []byte) { where = w }})
	srv := httptest.NewServer(d.Wrap(Route{Label: "/boom"}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })))
	defer srv.Close()
	resp, body := do(t, "GET", srv.URL)
	if resp.StatusCode != 500 || !strings.Contains(body, `"code":"internal_error"`) || where != "http /boom" {
		t.Fatalf("%d %s %q", resp.StatusCode, body, where)
	}
}

// Several API keys: each names its tenant for the handlers (CallerFrom,
// with its priority); api_key_env's key still works, naming none; any
// other is a 401. The x-smg-priority header is handed on as sent.
func TestKeysAndCaller(t *testing.T) {
	t.Parallel()
	d := New(Config{})
	d.SetLive(Live{APIKey: "legacy", Keys: []Key{{Name: "team-a", Secret: "ka", Priority: 1}, {Name: "batch", Secret: "kb", Priority: -1}}})
	seen := make(chan Caller, 1)
	srv := httptest.NewServer(d.Wrap(Route{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- CallerFrom(r.Context()) })))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		key, header string
		status      int
		want        Caller
	}{
		{"ka", "", 200, Caller{Tenant: "team-a", Priority: 1, Keyed: true}},
		{"kb", "interactive", 200, Caller{Tenant: "batch", Priority: -1, Keyed: true, Header: "interactive", HasHeader: true}},
		{"legacy", "bulk", 200, Caller{Header: "bulk", HasHeader: true}},
		{"legacy", "", 200, Caller{}},
		{"kc", "", 401, Caller{}},
		{"", "", 401, Caller{}},
	} {
		args := []string{}
		if c.key != "" {
			args = append(args, "Authorization", "Bearer "+c.key)
		}
		if c.header != "" {
			args = append(args, PriorityHeader, c.header)
		}
		resp, body := do(t, "GET", srv.URL+"/x", args...)
		if resp.StatusCode != c.status {
			t.Fatalf("key %q: %d %s", c.key, resp.StatusCode, body)
		}
		if c.status == 200 {
			if got := <-seen; got != c.want {
				t.Errorf("key %q header %q: caller %+v, want %+v", c.key, c.header, got, c.want)
			}
		} else if strings.Contains(body, c.key) && c.key != "" {
			t.Errorf("the refusal shows the key: %s", body)
		}
	}
}

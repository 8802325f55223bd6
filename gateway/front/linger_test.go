package front

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/testkit/testports"
)

// lingerServer serves a door with a 1 MiB body bound (max_model_len 32768
// × 32 bytes per token) and an API key, on a reserved test port.
func lingerServer(t *testing.T) string {
	t.Helper()
	door := New(Config{
		APIKey: "k",
		Body:   &BodyLimits{Max: 64 << 20, ReadTimeout: 10 * time.Second, Budget: 1 << 30, MaxModelLen: func() int { return 32768 }},
	})
	h := door.Wrap(Route{Generate: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintln(w, "ok")
	}))
	l, err := net.Listen("tcp", testports.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// writeFirst is a client as Python's http.client is: it writes the whole
// request, body included, and only then reads the answer.
func writeFirst(t *testing.T, addr, auth string, body []byte) (status int, answer string, err error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n", len(body), auth)
	if _, err := c.Write(append([]byte(head), body...)); err != nil {
		return 0, "", fmt.Errorf("write the request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", fmt.Errorf("read the answer: %w", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("read the answer's body: %w", err)
	}
	return resp.StatusCode, string(b), nil
}

// Regression: a 30 MB body got its answer in under a millisecond, but
// the connection was closed with the body unread, so a client that writes
// the whole body before reading saw a reset or a broken pipe and never
// the answer. Now it reads a 400 context_length_exceeded (the status
// OpenAI's clients raise BadRequestError for), and so does a client whose
// API key is wrong.
func TestEarlyAnswerReachesAClientThatWritesFirst(t *testing.T) {
	t.Parallel()
	addr := lingerServer(t)
	big := []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("a", 30<<20) + `"}]}`)
	for _, c := range []struct {
		name, auth, code string
		status           int
	}{
		{"oversized", "Authorization: Bearer k\r\n", "context_length_exceeded", http.StatusBadRequest},
		{"no key", "", "", http.StatusUnauthorized},
	} {
		status, answer, err := writeFirst(t, addr, c.auth, big)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if status != c.status || !strings.Contains(answer, c.code) {
			t.Fatalf("%s: %d %s, want %d %s", c.name, status, answer, c.status, c.code)
		}
	}
	// The door still serves a body it can take.
	status, answer, err := writeFirst(t, addr, "Authorization: Bearer k\r\n", []byte(`{"messages":[]}`))
	if err != nil || status != 200 || answer != "ok\n" {
		t.Fatalf("small body: %d %q %v", status, answer, err)
	}
}

// A lingering connection ends within its bounds: after Idle without a
// byte, and after Bytes however fast the client sends.
func TestLingerBounds(t *testing.T) {
	t.Parallel()
	l := newLingerer(lingerBounds{Total: 20 * time.Second, Idle: 50 * time.Millisecond, Bytes: 1 << 20, Slots: 2})
	pair := func() (client net.Conn) {
		ln, err := net.Listen("tcp", testports.Addr(t))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		client, err = net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		l.start(server, bufio.NewReader(server))
		t.Cleanup(func() { client.Close() })
		return client
	}

	idle := pair()
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("idle client: %v, want EOF (the server half-closed, then closed)", err)
	}

	flood := pair()
	_ = flood.SetWriteDeadline(time.Now().Add(10 * time.Second))
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var sent int
	var err error
	for err == nil && sent < 64<<20 {
		var n int
		n, err = flood.Write(chunk)
		sent += n
	}
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("flooding client sent %d bytes, err %v: the lingering read never stopped", sent, err)
	}
}

// The body bound is a prompt rule: a 30 MB POST to a path no route
// serves is a 404 (its body never read, the client still reads the
// answer), not a 400 context_length_exceeded; and a body carrying a
// large response_format schema beside a short prompt is admitted, the
// schema being no prompt tokens (its own limit is SchemaAllowance).
func TestBodyBoundIsAPromptRule(t *testing.T) {
	t.Parallel()
	door := New(Config{Body: &BodyLimits{Max: 64 << 20, ReadTimeout: 10 * time.Second, Budget: 1 << 30, MaxModelLen: func() int { return 2048 }}})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprintln(w, "ok")
	})
	l, err := net.Listen("tcp", testports.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: door.Serve(nil, mux), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	post := func(path string, body []byte) (int, string) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body))
		if _, err := c.Write(append([]byte(head), body...)); err != nil {
			t.Fatalf("write: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	big := []byte(`{"x":"` + strings.Repeat("a", 30<<20) + `"}`)
	if status, answer := post("/v1/nope", big); status != http.StatusNotFound || !strings.Contains(answer, "not_found") {
		t.Fatalf("30 MB to an unknown route: %d %s", status, answer)
	}
	schema := `{"type":"object","properties":{` + strings.Repeat(`"p":{"type":"string","description":"`+strings.Repeat("d", 200)+`"},`, 300) + `"q":{"type":"integer"}}}`
	body := []byte(`{"messages":[{"role":"user","content":"Describe a city as JSON."}],"response_format":{"type":"json_schema","json_schema":{"name":"c","schema":` + schema + `}}}`)
	if len(body) < 70<<10 {
		t.Fatalf("the schema body is only %d bytes", len(body))
	}
	if status, answer := post("/v1/chat/completions", body); status != 200 {
		t.Fatalf("a %d KB schema beside a short prompt: %d %s", len(body)>>10, status, answer)
	}
	if status, answer := post("/v1/chat/completions", big); status != http.StatusBadRequest || !strings.Contains(answer, "context_length_exceeded") {
		t.Fatalf("30 MB to the chat route: %d %s", status, answer)
	}
}

// The Bearer scheme's name is case-insensitive (RFC 7235 §2.1): a client
// that writes "bearer" or "BEARER" is let in; another scheme, a missing
// token or the wrong key is not.
func TestAuthorizeBearerAnyCase(t *testing.T) {
	for _, tc := range []struct {
		header string
		ok     bool
	}{
		{"Bearer k1", true},
		{"bearer k1", true},
		{"BEARER k1", true},
		{"bEaReR   k1 ", true},
		{"Bearer k2", false},
		{"Basic k1", false},
		{"Bearerk1", false},
		{"Bearer", false},
		{"", false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		if _, e := authorize(r, "k1", nil); (e == nil) != tc.ok {
			t.Errorf("Authorization %q: let in %v, want %v", tc.header, e == nil, tc.ok)
		}
	}
}

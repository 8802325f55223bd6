package bootstrap

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// The rendezvous server is reachable by any local process: no request
// (method, path, query, body) may panic it, and every answer is one of the
// protocol's statuses. Registrations accepted must stay queryable.
func FuzzServer(f *testing.F) {
	good := `{"role":"Prefill","world_size":2,"dp_size":1,"rank_ip":"127.0.0.1","rank_port":1234,"engine_rank":1,"cache_layout":"NHD"}`
	f.Add("PUT", "/route", good)
	f.Add("PUT", "/route", `{"world_size":-1,"dp_size":0,"engine_rank":99999999999}`)
	f.Add("PUT", "/route", `{"world_size":1,"dp_size":1,"engine_rank":-5}`)
	f.Add("GET", "/route?engine_rank=-1&target_dp_group=-1", "")
	f.Add("GET", "/route?engine_rank=1&target_dp_group=0", "")
	f.Add("GET", "/route?engine_rank=x&target_dp_group=", "")
	f.Add("GET", "/health", "")
	f.Add("PUT", "/route", strings.Repeat("[", 10000))
	f.Fuzz(func(t *testing.T, method, target, body string) {
		if _, err := url.ParseRequestURI(target); err != nil || !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\x00#") {
			target = "/route" // what net/http would refuse before us
		}
		switch method {
		case "GET", "PUT", "HEAD", "POST":
		default:
			method = "GET"
		}
		s := NewServer(nil)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusServiceUnavailable:
		default:
			t.Fatalf("%s %s: status %d", method, target, rec.Code)
		}
		if method == "PUT" && rec.Code == http.StatusOK {
			rec2 := httptest.NewRecorder()
			s.ServeHTTP(rec2, httptest.NewRequest("GET", "/route?engine_rank=-1&target_dp_group=-1", nil))
			if rec2.Code != http.StatusOK {
				t.Fatalf("accepted registration %q, then parallel info %d", body, rec2.Code)
			}
		}
	})
}

// A transfer endpoint's or rendezvous's answer comes from a socket any
// local process can bind: no body may panic the fetcher or make it hold
// more than the answer's limit, and whatever is accepted satisfies the
// checks the fetcher relies on (answer.go).
func FuzzDecodeAnswer(f *testing.F) {
	f.Add(byte(0), []byte(`{"room":7,"rid":"r","prompt_len":5,"cached_tokens":2,"first_token":11}`))
	f.Add(byte(0), []byte(`{"room":7,"prompt_len":-1}`))
	f.Add(byte(1), []byte(`{"room":7,"rid":"e","tokens":2,"hidden":2,"values":[1,2,3,4]}`))
	f.Add(byte(1), []byte(`{"room":7,"tokens":4611686018427387904,"hidden":4,"values":[]}`))
	f.Add(byte(2), []byte(`{"prefill_tp_size":2,"prefill_dp_size":2,"cache_layout":"NHD"}`))
	f.Add(byte(3), []byte(`{"rank_ip":"127.0.0.1","rank_port":1234}`))
	f.Add(byte(3), []byte(`{"rank_ip":"a b","rank_port":70000}`))
	f.Add(byte(1), []byte(strings.Repeat("[", 100000)))
	f.Fuzz(func(t *testing.T, kind byte, body []byte) {
		const room = 7
		switch kind % 4 {
		case 0:
			var kv KV
			if decodeTransfer(bytes.NewReader(body), slotKey{kindKV, room}, &kv) == nil {
				if kv.Room != room || kv.CachedTokens > kv.PromptLen || kv.CachedTokens < 0 {
					t.Fatalf("accepted %+v", kv)
				}
			}
		case 1:
			var e Embedding
			if decodeTransfer(bytes.NewReader(body), slotKey{kindEmbedding, room}, &e) == nil {
				if e.Room != room || len(e.Values) != e.Tokens*e.Hidden {
					t.Fatalf("accepted room %d, %d values for %d x %d", e.Room, len(e.Values), e.Tokens, e.Hidden)
				}
			}
		case 2:
			var p ParallelInfo
			if decodeAnswer(bytes.NewReader(body), maxSmallAnswer, &p, func() error { return p.check() }) == nil {
				_ = p.TPPerDP()
				_ = DPGroup(room, p.PrefillDPSize)
				if p.PrefillTPSize < 0 || p.PrefillDPSize < 0 {
					t.Fatalf("accepted %+v", p)
				}
			}
		case 3:
			var a RankAddr
			if decodeAnswer(bytes.NewReader(body), maxSmallAnswer, &a, func() error { return a.check() }) == nil {
				if a.RankPort < 1 || a.RankPort > 65535 || a.RankIP == "" {
					t.Fatalf("accepted %+v", a)
				}
				_ = a.HostPort()
			}
		}
	})
}

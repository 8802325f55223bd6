package bootstrap

import (
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

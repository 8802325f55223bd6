package front

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestLiveSettings: SetLive changes the key, CORS, metrics_public and the
// admission limit for requests that arrive after it; a request admitted
// before keeps its slot in the old limiter and finishes.
func TestLiveSettings(t *testing.T) {
	t.Parallel()
	old := NewLimiter(1, 0, nil)
	d := New(Config{APIKey: "a", Admit: old})
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	gen := d.Wrap(Route{Generate: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	metrics := d.Wrap(Route{Metrics: true}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	call := func(h http.Handler, key, origin string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/generate", nil)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// One request holds the old limiter's only slot.
	first := make(chan int, 1)
	go func() { first <- call(gen, "a", "").Code }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request was not admitted")
	}
	if got := call(gen, "a", "").Code; got != http.StatusTooManyRequests {
		t.Fatalf("a second request under the old limit: %d, want 429", got)
	}
	if got := call(metrics, "", "").Code; got != http.StatusUnauthorized {
		t.Fatalf("/metrics before metrics_public: %d", got)
	}

	d.SetLive(Live{APIKey: "b", CORSOrigins: []string{"https://app.example"}, Admit: NewLimiter(2, 0, nil), MetricsPublic: true})
	if got := call(gen, "a", "").Code; got != http.StatusUnauthorized {
		t.Fatalf("the old key after the change: %d, want 401", got)
	}
	second := make(chan *httptest.ResponseRecorder, 1)
	go func() { second <- call(gen, "b", "https://app.example") }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("a request under the new limit was not admitted")
	}
	if got := call(metrics, "", "").Code; got != http.StatusOK {
		t.Fatalf("/metrics with metrics_public: %d", got)
	}
	close(release)
	if got := <-first; got != http.StatusOK {
		t.Fatalf("the request admitted before the change ended %d", got)
	}
	w := <-second
	if w.Code != http.StatusOK || w.Header().Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("the new request: %d, CORS %q", w.Code, w.Header().Get("Access-Control-Allow-Origin"))
	}
	if old.InUse() != 0 {
		t.Fatalf("the old limiter still holds %d slot(s)", old.InUse())
	}
}

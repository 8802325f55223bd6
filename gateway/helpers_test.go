package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/generate"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/snapshot"
)

// setRouted tells g what the supervisor says of a running role that is
// routed, or drained (not routed, its requests in flight left alone).
func setRouted(g *Gateway, role string, routed bool) {
	v := snapshot.RoleView{Alive: true, Routed: routed}
	if !routed {
		v.Reason = "drained by the test"
	}
	g.SetRole(role, v)
}

type atomicInt struct{ v atomic.Int64 }

func (a *atomicInt) add(n int)  { a.v.Add(int64(n)) }
func (a *atomicInt) get() int64 { return a.v.Load() }

func genRequest(seed int64, maxTokens int) tokenapi.Request {
	s := tokenapi.Sampling{MaxNewTokens: &maxTokens, IgnoreEOS: true, Seed: &seed}
	return tokenapi.Request{InputIDs: []int32{1, 2, 3, 4}, Sampling: s, Stream: true, LogprobStartLen: -1}
}

// withGenerate mounts /generate (gateway/generate, input_ids only) as tsd
// does (cmd/tsd frontEnds), after whatever opts mounts already, unless
// that mounted its own /generate (one that tokenizes text, say).
func withGenerate(opts Options) Options {
	more := opts.Mount
	opts.Mount = func(e tokenapi.Engine, mux *http.ServeMux) {
		if more != nil {
			more(e, mux)
		}
		if _, p := mux.Handler(httptest.NewRequest(http.MethodPost, "/generate", nil)); p == "" {
			generate.New(e, generate.Options{}).Register(mux)
		}
	}
	return opts
}

// waitRecordsEnded waits until the gateway's traffic account holds
// requests ended records and none in flight: a response's last byte can
// reach the client before its handler has returned and its record ended.
func waitRecordsEnded(t testing.TB, g *Gateway, requests uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st := g.Status(); st.InFlight != 0 || st.Requests != requests; st = g.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("records never all ended: %d ended, %d in flight, want %d and none", st.Requests, st.InFlight, requests)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

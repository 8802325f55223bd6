package bootstrap

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rogue serves handler on loopback and returns its address as a RankAddr.
func rogue(t *testing.T, handler http.HandlerFunc) RankAddr {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	p, _ := strconv.Atoi(port)
	return RankAddr{RankIP: host, RankPort: p}
}

// A rogue transfer endpoint that streams an endless answer costs the
// fetcher one bounded read per poll, not its memory: each poll stops at
// the limit and says so.
func TestFetchBoundsEndlessAnswer(t *testing.T) {
	var written atomic.Int64
	addr := rogue(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"room":7,"rid":"`))
		chunk := []byte(strings.Repeat("a", 32<<10))
		for r.Context().Err() == nil {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil || written.Load() > 1<<30 {
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := Fetch(ctx, addr, 7)
	if !errors.Is(err, ErrTransferTimeout) || !strings.Contains(err.Error(), "larger than its limit") {
		t.Fatalf("Fetch = %v, want a timeout whose last error names the limit", err)
	}
	if w := written.Load(); w >= 1<<30 {
		t.Fatalf("the fetcher read %d bytes from one endless answer", w)
	}
}

// Answers for another room, or with values that do not add up, are
// refused instead of handed to the engine.
func TestFetchRefusesWrongAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
		embedding        bool
	}{
		{"other room", `{"room":8,"prompt_len":3}`, "asked for 7", false},
		{"cached beyond prompt", `{"room":7,"prompt_len":3,"cached_tokens":9}`, "out of range", false},
		{"values short", `{"room":7,"tokens":2,"hidden":3,"values":[1,2]}`, "2 values for 2 tokens x 3", true},
		{"overflowing shape", `{"room":7,"tokens":4611686018427387904,"hidden":4,"values":[]}`, "values for", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := rogue(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(tc.body)) })
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			var err error
			if tc.embedding {
				_, err = FetchEmbedding(ctx, addr, 7)
			} else {
				_, err = Fetch(ctx, addr, 7)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("fetch = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A rogue rendezvous cannot point a decode at port 0 or a non-address,
// nor hand it negative parallel sizes.
func TestClientRefusesBadRendezvousAnswers(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"port zero", `{"rank_ip":"127.0.0.1","rank_port":0}`, "rank_port 0"},
		{"odd host", `{"rank_ip":"a b/c","rank_port":80}`, "neither an address"},
		{"too large", `{"rank_ip":"` + strings.Repeat("a", 70<<10) + `","rank_port":80}`, "larger than its limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := rogue(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(tc.body)) })
			_, err := NewClient(addr.HostPort(), time.Second).RankAddr(context.Background(), 0, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RankAddr = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	addr := rogue(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"prefill_tp_size":-2,"prefill_dp_size":1}`))
	})
	if _, err := NewClient(addr.HostPort(), time.Second).ParallelInfo(context.Background()); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("ParallelInfo = %v, want negative sizes refused", err)
	}
}

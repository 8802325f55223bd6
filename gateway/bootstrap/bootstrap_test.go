package bootstrap

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

func startServer(t *testing.T, alive func() bool) (*Server, *Client) {
	t.Helper()
	s := NewServer(alive)
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, NewClient(s.Addr(), 2*time.Second)
}

func reg(rank int, port int) Registration {
	return Registration{Role: RolePrefill, WorldSize: 4, DPSize: 2, RankIP: "127.0.0.1", RankPort: port, EngineRank: rank, CacheLayout: "mha"}
}

// Registrations land in [rank / tp_per_dp][rank mod tp_per_dp] and the
// parallel info reports the world size as prefill_tp_size (upstream quirk).
func TestRouteRegisterAndQuery(t *testing.T) {
	t.Parallel()
	s, c := startServer(t, nil)
	ctx := context.Background()
	if _, err := c.ParallelInfo(ctx); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("info before registration: %v, want ErrNotRegistered", err)
	}
	changed := s.Changed()
	for rank := range 4 {
		if err := c.Register(ctx, reg(rank, 7000+rank)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-changed:
	default:
		t.Fatal("Changed not closed after a registration")
	}
	if n, w := s.Registered(); n != 4 || w != 4 {
		t.Fatalf("Registered = %d/%d, want 4/4", n, w)
	}
	info, err := c.ParallelInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info != (ParallelInfo{PrefillTPSize: 4, PrefillDPSize: 2, CacheLayout: "mha"}) || info.TPPerDP() != 2 {
		t.Fatalf("info = %+v", info)
	}
	a, err := c.RankAddr(ctx, 1, 1) // engine rank 3
	if err != nil {
		t.Fatal(err)
	}
	if a.RankPort != 7003 || a.HostPort() != "127.0.0.1:7003" {
		t.Fatalf("rank addr = %+v", a)
	}
	if _, err := c.RankAddr(ctx, 0, 5); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("unknown group: %v", err)
	}
	s.Reset()
	if n, _ := s.Registered(); n != 0 {
		t.Fatalf("after Reset %d registered", n)
	}
}

func TestRouteRejectsBadInput(t *testing.T) {
	t.Parallel()
	s, c := startServer(t, nil)
	ctx := context.Background()
	bad := reg(0, 7000)
	bad.DPSize = 3 // 4 % 3 != 0
	if err := c.Register(ctx, bad); err == nil {
		t.Fatal("invalid registration accepted")
	}
	if err := c.Register(ctx, reg(0, 7000)); err != nil {
		t.Fatal(err)
	}
	other := reg(1, 7001)
	other.CacheLayout = "mla"
	if err := c.Register(ctx, other); err == nil {
		t.Fatal("registration with a different cache layout accepted")
	}
	resp, err := http.Get("http://" + s.Addr() + "/route?engine_rank=0")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("missing parameter: %s, want 400", resp.Status)
	}
}

// /health follows the injected liveness func, so decode engines polling it
// notice a dead prefill.
func TestHealthFollowsLiveness(t *testing.T) {
	t.Parallel()
	var alive atomic.Bool
	alive.Store(true)
	_, c := startServer(t, alive.Load)
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	alive.Store(false)
	if err := c.Health(context.Background()); !errors.Is(err, ErrNotAlive) {
		t.Fatalf("health while dead: %v, want ErrNotAlive", err)
	}
}

func TestDPGroup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		room uint64
		dp   int
		want int
	}{{7, 1, 0}, {7, 0, 0}, {7, 3, 1}, {1<<63 + 5, 2, 1}, {9, 3, 0}, {7, 2, 1}, {8, 2, 0}, {1 << 40, 3, int((1 << 40) % 3)}} {
		if got := DPGroup(c.room, c.dp); got != c.want {
			t.Errorf("DPGroup(%d,%d) = %d, want %d", c.room, c.dp, got, c.want)
		}
	}
}

func startTransfer(t *testing.T) *TransferServer {
	t.Helper()
	ts := NewTransferServer()
	if err := ts.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ts.Close() })
	return ts
}

// The decode may ask before the prefill offers; Send returns only once the
// KV was fetched.
func TestTransferFetchBeforeSend(t *testing.T) {
	t.Parallel()
	ts := startTransfer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan KV, 1)
	errc := make(chan error, 1)
	go func() {
		kv, err := Fetch(ctx, ts.Addr(), 1<<62)
		errc <- err
		got <- kv
	}()
	want := KV{Room: 1 << 62, Rid: "r1", PromptLen: 12, FirstToken: 77}
	if err := ts.Send(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if kv := <-got; kv != want {
		t.Fatalf("fetched %+v, want %+v", kv, want)
	}
}

func TestTransferSendBeforeFetch(t *testing.T) {
	t.Parallel()
	ts := startTransfer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- ts.Send(ctx, KV{Room: 5, FirstToken: 3}) }()
	kv, err := Fetch(ctx, ts.Addr(), 5)
	if err != nil || kv.FirstToken != 3 {
		t.Fatalf("fetch = %+v, %v", kv, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// A decode whose prefill never offers gives up at its deadline, and a
// prefill whose decode never comes gives up at its own.
func TestTransferTimeouts(t *testing.T) {
	t.Parallel()
	ts := startTransfer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Fetch(ctx, ts.Addr(), 9); !errors.Is(err, ErrTransferTimeout) {
		t.Fatalf("fetch without offer: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if err := ts.Send(ctx2, KV{Room: 10}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send without fetch: %v", err)
	}
	// The abandoned fetch's handler may still be parked for a moment; the
	// slot must be gone once it returns.
	for deadline := time.Now().Add(5 * time.Second); ; {
		ts.mu.Lock()
		n := len(ts.slots)
		ts.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slots left after timeouts", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A prefill that is not listening at all: Fetch keeps retrying, then times out.
	ctx3, cancel3 := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel3()
	if _, err := Fetch(ctx3, RankAddr{RankIP: "127.0.0.1", RankPort: 1}, 1); !errors.Is(err, ErrTransferTimeout) {
		t.Fatalf("fetch from nowhere: %v", err)
	}
}

package bootstrap

// The transfer half stands in for Mooncake in ts-fake: each prefill rank
// serves HTTP on the rank_ip:rank_port it registered, and a decode rank
// fetches a room's KV there. Either side may arrive first; a fetch is a
// long poll that the decode repeats until its own waiting timeout.
//
//	GET /kv/<room>?wait_ms=N -> 200 KV (JSON) | 204 nothing offered within N ms
//
// Every answer carries X-Transfer-Started (the endpoint's start, Unix
// nanoseconds), so a fetcher can tell a restarted endpoint, which cannot
// hold what its predecessor was handed, from the one it expected.
//
// The prefill's Send blocks until the KV was fetched (so the prefill emits
// its terminal output only after a successful transfer, as upstream does).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KV is the fake KV cache a prefill hands to its decode: enough for the
// decode to continue the sequence.
type KV struct {
	Room         uint64 `json:"room"`
	Rid          string `json:"rid"`
	PromptLen    int    `json:"prompt_len"`
	CachedTokens int    `json:"cached_tokens"`
	FirstToken   int    `json:"first_token"`
	// Error, when set, is a prefill's failure notice instead of a KV (it
	// aborted the request, e.g. its EPD embedding never came), so the
	// decode fails at once as upstream's transfer status does.
	Error string `json:"error,omitempty"`
}

// maxPoll caps one long poll so HTTP connections do not sit idle for the
// whole waiting timeout.
const maxPoll = 5 * time.Second

type slot struct {
	body    []byte        // the JSON answer, set by Send
	offered chan struct{} // closed by Send
	fetched chan struct{} // closed by the first successful fetch
	once    sync.Once
	waiters int // fetches currently parked on this slot
	senders int
}

// TransferServer is one prefill rank's transfer endpoint.
type TransferServer struct {
	mu       sync.Mutex
	slots    map[slotKey]*slot
	srv      *http.Server
	listener net.Listener
	started  string // X-Transfer-Started, set by Start
}

// StartedHeader names the response header holding the endpoint's start.
const StartedHeader = "X-Transfer-Started"

// NewTransferServer returns an unstarted transfer endpoint.
func NewTransferServer() *TransferServer {
	return &TransferServer{slots: map[slotKey]*slot{}}
}

// Start binds addr (host:port, port 0 picks one) and serves in the background.
func (t *TransferServer) Start(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bind transfer endpoint on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /kv/{room}", func(w http.ResponseWriter, r *http.Request) { t.serveFetch(w, r, kindKV) })
	mux.HandleFunc("GET /embedding/{room}", func(w http.ResponseWriter, r *http.Request) { t.serveFetch(w, r, kindEmbedding) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	t.mu.Lock()
	t.srv, t.listener = srv, l
	t.started = strconv.FormatInt(time.Now().UnixNano(), 10)
	t.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// Addr is the bound address as RankAddr.
func (t *TransferServer) Addr() RankAddr {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.listener == nil {
		return RankAddr{}
	}
	a := t.listener.Addr().(*net.TCPAddr)
	return RankAddr{RankIP: a.IP.String(), RankPort: a.Port}
}

// Close stops serving.
func (t *TransferServer) Close() error {
	t.mu.Lock()
	srv := t.srv
	t.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Close()
}

// Transfer kinds: a prefill's KV for its decode, an encode's embedding for
// its prefill (EPD). Rooms of different kinds never collide.
const (
	kindKV        = "kv"
	kindEmbedding = "embedding"
)

type slotKey struct {
	kind string
	room uint64
}

func (t *TransferServer) slotLocked(k slotKey) *slot {
	s := t.slots[k]
	if s == nil {
		s = &slot{offered: make(chan struct{}), fetched: make(chan struct{})}
		t.slots[k] = s
	}
	return s
}

// dropIfIdle forgets a slot nobody waits on any more.
func (t *TransferServer) dropIfIdle(k slotKey, s *slot) {
	if s.waiters == 0 && s.senders == 0 && t.slots[k] == s {
		delete(t.slots, k)
	}
}

// Send offers kv under kv.Room and waits until a decode fetched it. It
// returns ctx's error if nobody fetched it in time; the offer is then
// withdrawn.
func (t *TransferServer) Send(ctx context.Context, kv KV) error {
	body, err := json.Marshal(kv)
	if err != nil {
		return fmt.Errorf("send KV for room %d: %w", kv.Room, err)
	}
	if err := t.send(ctx, slotKey{kindKV, kv.Room}, body); err != nil {
		return fmt.Errorf("send KV for room %d: %w", kv.Room, err)
	}
	return nil
}

func (t *TransferServer) send(ctx context.Context, k slotKey, body []byte) error {
	t.mu.Lock()
	s := t.slotLocked(k)
	select {
	case <-s.offered:
		t.mu.Unlock()
		return errors.New("room already offered")
	default:
	}
	s.body = body
	s.senders++
	close(s.offered)
	t.mu.Unlock()

	var err error
	select {
	case <-s.fetched:
	case <-ctx.Done():
		err = fmt.Errorf("nobody fetched it: %w", ctx.Err())
	}
	t.mu.Lock()
	s.senders--
	if t.slots[k] == s {
		delete(t.slots, k)
	}
	t.mu.Unlock()
	return err
}

func (t *TransferServer) serveFetch(w http.ResponseWriter, r *http.Request, kind string) {
	room, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
	if err != nil {
		http.Error(w, "bad room: "+err.Error(), http.StatusBadRequest)
		return
	}
	wait := maxPoll
	if ms, err := strconv.Atoi(r.URL.Query().Get("wait_ms")); err == nil && ms >= 0 && time.Duration(ms)*time.Millisecond < wait {
		wait = time.Duration(ms) * time.Millisecond
	}
	k := slotKey{kind, room}
	t.mu.Lock()
	w.Header().Set(StartedHeader, t.started)
	s := t.slotLocked(k)
	s.waiters++
	t.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	got := false
	select {
	case <-s.offered:
		got = true
	case <-timer.C:
	case <-r.Context().Done():
	}
	t.mu.Lock()
	s.waiters--
	body := s.body
	if !got {
		t.dropIfIdle(k, s)
	}
	t.mu.Unlock()
	if got && r.Context().Err() != nil {
		return // the decode gave up meanwhile; leave the offer for a retry
	}
	if !got {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(body); err != nil {
		return // the decode went away; leave the offer for a retry
	}
	s.once.Do(func() { close(s.fetched) })
}

// ErrTransferTimeout means no KV arrived before the caller's deadline.
var ErrTransferTimeout = errors.New("KV transfer timed out")

var transferClient = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}

// Fetch waits for room's KV at the prefill rank addr until ctx ends. It
// keeps polling through connection errors (the prefill rank may not be
// listening yet) and wraps ErrTransferTimeout when ctx ends first.
func Fetch(ctx context.Context, addr RankAddr, room uint64) (KV, error) {
	var kv KV
	err := fetch(ctx, addr, slotKey{kindKV, room}, &kv, fetchOpts{})
	return kv, err
}

// ErrPeerGone means the endpoint that should hand over a room is gone: it
// stopped accepting connections, or it is a later instance (restarted
// after the fetcher's request arrived) that cannot hold the room. The real
// engine sees its Mooncake transfer fail then; waiting on is pointless.
var ErrPeerGone = errors.New("transfer peer gone")

// fetchOpts make a fetch fail fast with ErrPeerGone instead of polling on.
type fetchOpts struct {
	// mustBeUp: the address came from a registration the peer made while
	// listening, so transport errors mean it is gone (two in a row, to
	// ride out one reset), not that it has not started yet.
	mustBeUp bool
	// arrived, when set: an endpoint started after this cannot hold the
	// room. (Both clocks are this host's in ts-fake's deployments.)
	arrived time.Time
}

// peerGone checks a poll's answer for a restarted endpoint.
func (o fetchOpts) peerGone(started time.Time) error {
	if o.arrived.IsZero() || started.IsZero() || !started.After(o.arrived) {
		return nil
	}
	return fmt.Errorf("%w: its endpoint restarted at %s, after the request arrived at %s",
		ErrPeerGone, started.Format(time.RFC3339Nano), o.arrived.Format(time.RFC3339Nano))
}

func fetch(ctx context.Context, addr RankAddr, k slotKey, into any, o fetchOpts) error {
	url := "http://" + addr.HostPort() + "/" + k.kind + "/" + strconv.FormatUint(k.room, 10)
	what := "KV"
	if k.kind == kindEmbedding {
		what = "embedding"
	}
	var lastErr error
	transportErrs, first := 0, true
	for {
		wait := maxPoll
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if wait <= 0 || ctx.Err() != nil {
			return fetchTimeout(what, k.room, lastErr)
		}
		if first && !o.arrived.IsZero() {
			// Learn which instance this is before parking a long poll on it.
			wait = 0
		}
		first = false
		ok, started, err := fetchOnce(ctx, url, k, wait, into)
		if gone := o.peerGone(started); gone != nil {
			return fmt.Errorf("fetch %s for room %d from %s: %w", what, k.room, addr.HostPort(), gone)
		}
		if ok {
			return nil
		}
		var te *transportError
		if errors.As(err, &te) && ctx.Err() == nil {
			if transportErrs++; o.mustBeUp && transportErrs >= 2 {
				return fmt.Errorf("fetch %s for room %d: %w: %s stopped answering: %v", what, k.room, ErrPeerGone, addr.HostPort(), te.err)
			}
		} else {
			transportErrs = 0
		}
		if err != nil {
			// A poll cut short by the caller's deadline says nothing new:
			// the timeout names the last real problem, if any.
			if ctx.Err() == nil || lastErr == nil {
				lastErr = err
			}
			// A refused connection returns at once; do not spin.
			select {
			case <-ctx.Done():
				return fetchTimeout(what, k.room, lastErr)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func fetchTimeout(what string, room uint64, last error) error {
	if last != nil {
		return fmt.Errorf("fetch %s for room %d: %w (last error: %v)", what, room, ErrTransferTimeout, last)
	}
	return fmt.Errorf("fetch %s for room %d: %w", what, room, ErrTransferTimeout)
}

// transportError is a poll that got no HTTP answer at all.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// fetchOnce polls once; started is the endpoint's X-Transfer-Started (zero
// when absent).
func fetchOnce(ctx context.Context, url string, k slotKey, wait time.Duration, into any) (ok bool, started time.Time, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"?wait_ms="+strconv.FormatInt(wait.Milliseconds(), 10), nil)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("build fetch request: %w", err)
	}
	resp, err := transferClient.Do(req)
	if err != nil {
		return false, time.Time{}, &transportError{err}
	}
	defer resp.Body.Close()
	if ns, err := strconv.ParseInt(resp.Header.Get(StartedHeader), 10, 64); err == nil {
		started = time.Unix(0, ns)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if err := decodeTransfer(resp.Body, k, into); err != nil {
			return false, started, fmt.Errorf("decode transfer: %w", err)
		}
		return true, started, nil
	case http.StatusNoContent:
		return false, started, nil
	default:
		var b strings.Builder
		_, _ = fmt.Fprintf(&b, "fetch: %s", resp.Status)
		return false, started, errors.New(b.String())
	}
}

// Embedding is what an encode rank hands a prefill for one image item
// (EPD; our stand-in for the encode→prefill Mooncake transfer): Hidden
// values per pad token, row-major.
type Embedding struct {
	Room   uint64    `json:"room"`
	Rid    string    `json:"rid"` // the encode request's rid
	Tokens int       `json:"tokens"`
	Hidden int       `json:"hidden"`
	Values []float32 `json:"values"`
}

// SendEmbedding offers e under e.Room and waits until a prefill fetched it
// (or ctx ends; the offer is then withdrawn).
func (t *TransferServer) SendEmbedding(ctx context.Context, e Embedding) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("send embedding for room %d: %w", e.Room, err)
	}
	if err := t.send(ctx, slotKey{kindEmbedding, e.Room}, body); err != nil {
		return fmt.Errorf("send embedding for room %d: %w", e.Room, err)
	}
	return nil
}

// FetchEmbeddingFrom is FetchEmbedding for a prefill whose request arrived
// at arrived and whose addr is an encode rank's registered endpoint: it
// fails fast with ErrPeerGone when that endpoint stops answering or turns
// out to have started after arrived (a restarted encode engine, which
// cannot hold the embedding its predecessor was asked for), instead of
// polling until ctx ends. A zero arrived skips the restart check.
func FetchEmbeddingFrom(ctx context.Context, addr RankAddr, room uint64, arrived time.Time) (Embedding, error) {
	var e Embedding
	err := fetch(ctx, addr, slotKey{kindEmbedding, room}, &e, fetchOpts{mustBeUp: true, arrived: arrived})
	return e, err
}

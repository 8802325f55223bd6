package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Server hosts the rendezvous for one prefill engine (one bootstrap port).
// The zero value is not usable; call NewServer.
type Server struct {
	alive func() bool

	mu       sync.Mutex
	info     *ParallelInfo
	table    map[int]map[int]RankAddr // [dp group][tp rank within group]
	ranks    map[int]bool             // engine ranks seen since the last Reset
	changed  chan struct{}            // closed and replaced on every registration
	srv      *http.Server
	listener net.Listener
}

// NewServer returns a rendezvous whose /health answers 200 only while alive
// returns true (nil: always alive). Decode engines poll /health, so tying it
// to the prefill process makes the rendezvous a liveness signal too.
func NewServer(alive func() bool) *Server {
	if alive == nil {
		alive = func() bool { return true }
	}
	return &Server{
		alive:   alive,
		table:   map[int]map[int]RankAddr{},
		ranks:   map[int]bool{},
		changed: make(chan struct{}),
	}
}

// Start binds addr (host:port; port 0 picks one) and serves in the
// background until Close.
func (s *Server) Start(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bind bootstrap server on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.srv, s.listener = srv, l
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// Addr is the bound host:port ("" before Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Close stops serving and releases the port.
func (s *Server) Close() error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return srv.Close()
	}
	return nil
}

// Reset forgets every registration, e.g. when the prefill engine behind
// this rendezvous is restarted and its ranks will register again.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info = nil
	s.table = map[int]map[int]RankAddr{}
	s.ranks = map[int]bool{}
	s.notifyLocked()
}

// Registered reports how many distinct ranks registered and the world size
// they declared (0 before the first registration). registered == world
// means the prefill engine's transfer plumbing is up (docs/protocol.md §10.4).
func (s *Server) Registered() (registered, world int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info != nil {
		world = s.info.PrefillTPSize
	}
	return len(s.ranks), world
}

// Changed returns a channel closed at the next registration or Reset, so
// callers can wait for readiness without polling.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// ServeHTTP implements the three routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		if !s.alive() {
			http.Error(w, "prefill not alive", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "OK")
	case r.URL.Path == "/route" && r.Method == http.MethodPut:
		s.register(w, r)
	case r.URL.Path == "/route" && r.Method == http.MethodGet:
		s.query(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var reg Registration
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&reg); err != nil {
		http.Error(w, "decode registration: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := validate(reg); err != nil {
		http.Error(w, "invalid registration: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.add(reg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_, _ = io.WriteString(w, "OK")
}

// add records one rank. The first registration fixes world size, DP size
// and cache layout; later ones must agree (all ranks share one layout).
func (s *Server) add(reg Registration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info == nil {
		s.info = &ParallelInfo{PrefillTPSize: reg.WorldSize, PrefillDPSize: reg.DPSize, CacheLayout: reg.CacheLayout}
	} else if s.info.PrefillTPSize != reg.WorldSize || s.info.PrefillDPSize != reg.DPSize || s.info.CacheLayout != reg.CacheLayout {
		return fmt.Errorf("registration disagrees with earlier ranks: world_size %d dp_size %d cache_layout %q, want %d %d %q",
			reg.WorldSize, reg.DPSize, reg.CacheLayout, s.info.PrefillTPSize, s.info.PrefillDPSize, s.info.CacheLayout)
	}
	tpPer := s.info.TPPerDP()
	group, tp := reg.EngineRank/tpPer, reg.EngineRank%tpPer
	if s.table[group] == nil {
		s.table[group] = map[int]RankAddr{}
	}
	s.table[group][tp] = RankAddr{RankIP: reg.RankIP, RankPort: reg.RankPort}
	s.ranks[reg.EngineRank] = true
	s.notifyLocked()
	return nil
}

func (s *Server) query(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rankS, groupS := q.Get("engine_rank"), q.Get("target_dp_group")
	if rankS == "" || groupS == "" {
		http.Error(w, "missing engine_rank or target_dp_group", http.StatusBadRequest)
		return
	}
	rank, err1 := strconv.Atoi(rankS)
	group, err2 := strconv.Atoi(groupS)
	if err := errors.Join(err1, err2); err != nil {
		http.Error(w, "bad engine_rank or target_dp_group: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	var body any
	if rank == -1 && group == -1 {
		if s.info != nil {
			body = *s.info
		}
	} else if a, ok := s.table[group][rank]; ok {
		body = a
	}
	s.mu.Unlock()
	if body == nil {
		http.Error(w, ErrNotRegistered.Error(), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

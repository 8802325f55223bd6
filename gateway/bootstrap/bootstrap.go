// Package bootstrap is the KV bootstrap rendezvous of docs/protocol.md §8.6, shared by
// the gateway (which hosts it when the profile says `bootstrap_server: tsd`)
// and ts-fake (which hosts it itself in `engine` mode, and uses its
// transfer half to hand a fake KV cache from prefill to decode).
//
// The rendezvous is plain HTTP:
//
//	PUT /route   {role, world_size, dp_size, rank_ip, rank_port, engine_rank, cache_layout}
//	GET /route?engine_rank=-1&target_dp_group=-1 -> {prefill_tp_size, prefill_dp_size, cache_layout}
//	GET /route?engine_rank=R&target_dp_group=G   -> {rank_ip, rank_port}
//	GET /health  -> 200 OK while the injected liveness func says alive
//
// The transfer half (our design, not upstream's Mooncake) lets a decode rank
// fetch a prefill's KV by bootstrap room from the prefill rank's
// rank_ip:rank_port; see transfer.go.
package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// DefaultPort is TokenSpeed's --disaggregation-bootstrap-port default.
const DefaultPort = 8998

// RolePrefill is the role every prefill rank puts in its registration.
const RolePrefill = "Prefill"

// RoleEncode is the role an encode server's first rank registers with
// (EPD, tsd's design): prefill ranks look its embedding endpoint up there.
const RoleEncode = "Encode"

// Registration is the body a prefill rank PUTs to /route after its
// handshake (once, 5 s timeout, no retry upstream).
type Registration struct {
	Role        string `json:"role"`
	WorldSize   int    `json:"world_size"`
	DPSize      int    `json:"dp_size"`
	RankIP      string `json:"rank_ip"`
	RankPort    int    `json:"rank_port"`
	EngineRank  int    `json:"engine_rank"`
	CacheLayout string `json:"cache_layout"`
}

// ParallelInfo answers GET /route?engine_rank=-1&target_dp_group=-1.
// Upstream really puts the world size in prefill_tp_size.
type ParallelInfo struct {
	PrefillTPSize int    `json:"prefill_tp_size"`
	PrefillDPSize int    `json:"prefill_dp_size"`
	CacheLayout   string `json:"cache_layout"`
}

// TPPerDP is the number of TP ranks in one prefill DP group.
func (p ParallelInfo) TPPerDP() int {
	if p.PrefillDPSize <= 0 {
		return p.PrefillTPSize
	}
	return p.PrefillTPSize / p.PrefillDPSize
}

// RankAddr answers GET /route?engine_rank=R&target_dp_group=G: where that
// prefill rank's transfer endpoint listens.
type RankAddr struct {
	RankIP   string `json:"rank_ip"`
	RankPort int    `json:"rank_port"`
}

// HostPort is the rank address as host:port.
func (a RankAddr) HostPort() string { return net.JoinHostPort(a.RankIP, strconv.Itoa(a.RankPort)) }

// DPGroup is the prefill DP group that holds a room's KV: decode fetches
// from `room mod dp`, so the gateway must send the prefill leg there.
func DPGroup(room uint64, dpSize int) int {
	if dpSize <= 1 {
		return 0
	}
	return int(room % uint64(dpSize))
}

// ErrNotRegistered means the rendezvous has no (matching) prefill
// registration yet; a decode may retry until its waiting timeout.
var ErrNotRegistered = errors.New("prefill not registered with bootstrap server")

// ErrNotAlive means the rendezvous answered /health with a failure.
var ErrNotAlive = errors.New("bootstrap server reports prefill not alive")

func validate(r Registration) error {
	switch {
	case r.WorldSize <= 0:
		return fmt.Errorf("world_size %d must be positive", r.WorldSize)
	case r.DPSize <= 0:
		return fmt.Errorf("dp_size %d must be positive", r.DPSize)
	case r.WorldSize%r.DPSize != 0:
		return fmt.Errorf("world_size %d is not a multiple of dp_size %d", r.WorldSize, r.DPSize)
	case r.EngineRank < 0 || r.EngineRank >= r.WorldSize:
		return fmt.Errorf("engine_rank %d outside [0,%d)", r.EngineRank, r.WorldSize)
	case r.RankIP == "":
		return errors.New("rank_ip is empty")
	case r.RankPort <= 0 || r.RankPort > 65535:
		return fmt.Errorf("rank_port %d out of range", r.RankPort)
	}
	return nil
}

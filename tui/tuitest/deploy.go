package tuitest

import (
	"fmt"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// Deployment builds a deterministic snapshot at now: roles role instances
// (encode, prefill and decode in a 1:1:2 pattern, the last encode left out
// when roles < 4), ranks ranks each, and gpus simulated GPUs. Role 1 is
// still handshaking (rank 1 waiting for INIT since 42 s), role 2 restarted
// once after a crash; everything else is ready.
func Deployment(roles, ranks, gpus int, now time.Time) snapshot.Snapshot {
	s := snapshot.Snapshot{
		Seq:     7,
		Time:    now,
		Name:    "demo",
		Profile: "profiles/examples/demo.yaml",
		Gateway: snapshot.GatewayStatus{
			URL: "http://127.0.0.1:8000", Mode: "epd", Ready: true,
			ReqPerSec: 12.5, TokPerSec: 1830, Requests: 4211, Errors: 3, InFlight: 9,
		},
		GPUInfo: snapshot.GPUPanelStatus{Provider: "fake", Simulated: true},
	}
	kinds := []string{"prefill", "decode", "decode", "encode"}
	count := map[string]int{}
	for i := 0; i < roles; i++ {
		kind := kinds[i%len(kinds)]
		name := fmt.Sprintf("%s-%d", kind, count[kind])
		count[kind]++
		gpu := i % max(gpus, 1)
		r := snapshot.RoleStatus{
			Name: name, Kind: kind, State: snapshot.StateReady,
			PID:             40000 + i*100,
			StartedAt:       now.Add(-time.Duration(3600+i*61) * time.Second),
			Worker:          "ipc:///run/tsd/demo/" + name,
			LogFile:         ".tsd/logs/" + name + ".log",
			RanksExpected:   ranks,
			RanksRegistered: ranks,
			InFlight:        i % 5,
			Routed:          true, // encode too: the gateway routes images to it in epd mode
			Proc:            &snapshot.ProcStatus{CPUPercent: float64(10 + i*7%90), RSSBytes: uint64(512+i*64) << 20, Threads: 20 + i, PIDs: []int{40000 + i*100, 40001 + i*100}},
		}
		if gpus > 0 {
			r.GPUs = []string{fmt.Sprint(gpu)}
			r.GPUUUIDs = []string{fmt.Sprintf("GPU-fake-%04d", gpu)}
			r.GPUMemB = uint64(18+i%7) << 30
		}
		for k := 0; k < ranks; k++ {
			t0 := r.StartedAt.Add(2 * time.Second)
			rk := snapshot.RankStatus{
				Identity: k, DPRank: k, State: snapshot.RankRegistered,
				HelloAt: t0, InitAt: t0.Add(5 * time.Millisecond),
				ReadyAt: t0.Add(9 * time.Second), RegisteredAt: t0.Add(9*time.Second + 2*time.Millisecond),
				InFlight: (i + k) % 3,
				Registration: &snapshot.Registration{
					MaxModelLen: 32768, NumGPUBlocks: 4096, KVCacheTokens: 262144, Dtype: "bfloat16",
					WorldSize: int64(ranks), DPSize: int64(ranks), DPRank: int64(k), TPSize: 1,
					MaxNumSeqs: 256, DisaggMode: kind, Version: "0.4.0-fake",
				},
			}
			rk.Since = rk.RegisteredAt
			if kind == "prefill" {
				rk.Registration.Bootstrap = fmt.Sprintf("127.0.0.1:%d", 8998+count[kind]-1)
			}
			r.Ranks = append(r.Ranks, rk)
		}
		switch i {
		case 1:
			r.State, r.Phase = snapshot.StateHandshaking, "loading weights"
			r.StartedAt = now.Add(-50 * time.Second)
			r.RanksRegistered = max(ranks-1, 0)
			if ranks > 1 {
				rk := &r.Ranks[1]
				rk.State, rk.Since = snapshot.RankHello, now.Add(-42*time.Second)
				rk.HelloAt, rk.InitAt, rk.ReadyAt, rk.RegisteredAt = rk.Since, time.Time{}, time.Time{}, time.Time{}
				rk.Registration, rk.InFlight = nil, 0
			}
		case 2:
			r.Restarts = 1
			r.Reason = "crashed (exit code 137), restarted after 2s backoff"
			r.StartedAt = now.Add(-95 * time.Second)
		}
		s.Roles = append(s.Roles, r)
	}
	// The gateway's encode routing note, as gateway.encodeNote words it.
	encode, encodeReady := 0, 0
	for _, r := range s.Roles {
		if r.Kind == "encode" {
			encode++
			if r.State == snapshot.StateReady {
				encodeReady++
			}
		}
	}
	if encode > 0 {
		s.Gateway.Note = fmt.Sprintf("encode: %d/%d worker(s) ready, consistent_hashing", encodeReady, encode)
	}
	for g := 0; g < gpus; g++ {
		gs := snapshot.GPUStatus{
			Index: g, UUID: fmt.Sprintf("GPU-fake-%04d", g), Name: "NVIDIA H200 (fake)",
			UtilPct: (g*37 + 20) % 100, MemUsedB: uint64(40+g*20) << 30, MemTotalB: 141 << 30,
			PowerW: 250 + float64(g)*40, TempC: 40 + g*5, SMClockMHz: 1980,
		}
		for _, r := range s.Roles {
			if len(r.GPUs) > 0 && r.GPUs[0] == fmt.Sprint(g) {
				gs.Roles = append(gs.Roles, r.Name)
			}
		}
		s.GPUs = append(s.GPUs, gs)
	}
	if gpus == 0 {
		s.GPUInfo = snapshot.GPUPanelStatus{Provider: "none", Note: "no NVIDIA driver found; GPU panel off"}
	}
	s.Events = []snapshot.Event{
		{Time: now.Add(-95 * time.Second), Role: "decode-1", Message: "crashed (exit code 137)"},
		{Time: now.Add(-93 * time.Second), Role: "decode-1", Message: "starting (restart 1)"},
		{Time: now.Add(-50 * time.Second), Role: "decode-0", Message: "starting"},
	}
	return s
}

// LogLines makes n deterministic engine-style lines for role, starting at t.
func LogLines(role string, n int, t time.Time) []snapshot.LogLine {
	out := make([]snapshot.LogLine, n)
	for i := range out {
		text := fmt.Sprintf("[%s] INFO scheduler: step %d batch=%d tokens=%d", role, i, i%32, (i*97)%4096)
		switch i % 50 {
		case 7:
			text = fmt.Sprintf("\x1b[32m[%s] INFO\x1b[0m model loaded: weights 15.2 GiB in 8.1 s", role)
		case 23:
			text = fmt.Sprintf("[%s] WARNING kv cache usage high: %d%%\tfree blocks %d", role, 80+i%20, 4096-i%4096)
		}
		out[i] = snapshot.LogLine{Seq: uint64(i + 1), Time: t.Add(time.Duration(i) * time.Millisecond), Role: role, Stream: "stdout", Text: text}
	}
	return out
}

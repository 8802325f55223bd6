package tuitest

import (
	"fmt"
	"strings"
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
		// A role's in flight is its ranks' (the lane counts per rank, and
		// the publisher sums them), as in a real snapshot.
		r.InFlight = 0
		for _, rk := range r.Ranks {
			r.InFlight += rk.InFlight
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

// Grouped sets each role's Group to its name without the replica suffix
// ("decode-3" → "decode"), as the planner names replicas of one profile
// role.
func Grouped(s snapshot.Snapshot) snapshot.Snapshot {
	s.Roles = append([]snapshot.RoleStatus(nil), s.Roles...)
	for i := range s.Roles {
		name := s.Roles[i].Name
		if j := strings.LastIndexByte(name, '-'); j > 0 {
			name = name[:j]
		}
		s.Roles[i].Group = name
	}
	return s
}

// WithTraffic fills the gateway's per-role accounting for every routed
// role, deterministically from its index; the errors are the gateway's.
func WithTraffic(s snapshot.Snapshot) snapshot.Snapshot {
	s.Gateway.Roles = nil
	ms := time.Millisecond
	for i, r := range s.Roles {
		if !r.Routed {
			continue
		}
		t := snapshot.RoleTraffic{
			Role: r.Name, ReqPerS: 0.8 + float64(i%5)*0.6, TokPerS: float64(120 + i*37%400),
			InFlight: r.InFlight, TTFTp50: time.Duration(80+i*13%90) * ms, TTFTp99: time.Duration(300+i*71%900) * ms,
		}
		if r.Kind == "decode" {
			t.ITLp50, t.ITLp99 = time.Duration(18+i%7)*ms, time.Duration(45+i*11%60)*ms
		}
		if i == 2 {
			t.Errors = 3 // the 503s of decode-1's crash
		}
		s.Gateway.Roles = append(s.Gateway.Roles, t)
	}
	return s
}

// Troubled makes role i of s fail for good (restart budget spent), role
// j wait in backoff until now+13s, and role k load its weights (5 of 11
// shards), each with the reason the supervisor gives.
func Troubled(s snapshot.Snapshot, now time.Time, i, j, k int) snapshot.Snapshot {
	s.Roles = append([]snapshot.RoleStatus(nil), s.Roles...)
	set := func(n int, f func(r *snapshot.RoleStatus)) {
		if n >= 0 && n < len(s.Roles) {
			r := &s.Roles[n]
			r.Ranks = append([]snapshot.RankStatus(nil), r.Ranks...)
			f(r)
		}
	}
	set(i, func(r *snapshot.RoleStatus) {
		r.State, r.Phase, r.PID, r.Proc, r.Routed, r.InFlight = snapshot.StateFailed, "", 0, nil, false, 0
		r.Restarts, r.RanksRegistered = 3, 0
		code := 1
		r.ExitCode = &code
		r.Reason = "exit 1 after 3.2s; restart budget spent (3 in 1m)"
		for x := range r.Ranks {
			r.Ranks[x].State, r.Ranks[x].InFlight = snapshot.RankDisconnected, 0
		}
	})
	set(j, func(r *snapshot.RoleStatus) {
		r.State, r.Phase, r.PID, r.Proc, r.Routed, r.InFlight = snapshot.StateBackoff, "", 0, nil, false, 0
		r.Restarts, r.RanksRegistered = 2, 0
		r.NextTryAt = now.Add(13 * time.Second)
		r.Reason = "exit 137 (SIGKILL) after 12m; restart 2/5 in 10m; next try in 16s"
		for x := range r.Ranks {
			r.Ranks[x].State, r.Ranks[x].InFlight = snapshot.RankDisconnected, 0
		}
	})
	set(k, func(r *snapshot.RoleStatus) {
		r.State, r.Phase, r.Routed, r.InFlight = snapshot.StateStarting, "loading weights", false, 0
		r.StartedAt, r.RanksRegistered = now.Add(-31*time.Second), 0
		r.Progress = &snapshot.Progress{Phase: "loading weights", Frac: 5.0 / 11, Text: "5/11"}
		for x := range r.Ranks {
			r.Ranks[x].State, r.Ranks[x].InFlight, r.Ranks[x].Registration = snapshot.RankWaiting, 0, nil
		}
	})
	return s
}

// Spec is a deterministic plan for role r, as the daemon's describe
// answers it (secrets already masked): a ts serve command line with its
// env, ports and restart policy.
func Spec(r snapshot.RoleStatus) snapshot.RoleSpec {
	gpus := strings.Join(r.GPUs, ",")
	env := []snapshot.EnvVar{
		{Name: "CUDA_VISIBLE_DEVICES", Value: gpus},
		{Name: "CUDA_DEVICE_ORDER", Value: "PCI_BUS_ID"},
		{Name: "HF_TOKEN", Value: "***"},
		{Name: "NO_PROXY", Value: "*"},
		{Name: "PYTHONUNBUFFERED", Value: "1"},
		{Name: "no_proxy", Value: "*"},
	}
	argv := []string{"ts", "serve", "--headless", "--model", "/models/Qwen2.5-0.5B-Instruct",
		"--disaggregation-mode", r.Kind, "--tp-size", "1", "--dp-size", fmt.Sprint(r.RanksExpected),
		"--dist-init-addr", "127.0.0.1:12500", "--smg-handshake-endpoint", "tcp://127.0.0.1:24817",
		"--api-key", "***", "--gpu-memory-utilization", "0.85"}
	var line strings.Builder
	for _, e := range env {
		v := e.Value
		if strings.ContainsAny(v, "*") {
			v = "'" + v + "'"
		}
		line.WriteString(e.Name + "=" + v + " ")
	}
	for i, a := range argv {
		if i > 0 {
			line.WriteByte(' ')
		}
		if strings.ContainsAny(a, "*") {
			a = "'" + a + "'"
		}
		line.WriteString(a)
	}
	return snapshot.RoleSpec{
		Name: r.Name, Group: r.Group, Kind: r.Kind, Host: "local", Local: true,
		GPUs: r.GPUs, TP: 1, DP: r.RanksExpected, Argv: argv, Env: env, CommandLine: line.String(),
		Worker: r.Worker, Handshake: "tcp://127.0.0.1:24817", DistInitAddr: "127.0.0.1:12500",
		PortCluster: []int{12500, 12501, 12502, 12503, 12504, 12505, 12506}, LogFile: r.LogFile,
		Restart: snapshot.RestartSpec{Policy: "on-failure", Backoff: "2s", MaxBackoff: "1m0s", ResetAfter: "10m0s",
			BudgetCount: 5, BudgetWindow: "10m0s", StopGrace: "10s", DrainTimeout: "30s"},
		StallAction: "restart",
	}
}

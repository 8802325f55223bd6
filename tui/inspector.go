package tui

import (
	"fmt"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
)

// inspectorPage shows one role's ranks: identity, handshake timeline,
// registration fields and load.
type inspectorPage struct {
	m      *Model
	w, h   int
	role   string
	offset int
}

func (p *inspectorPage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *inspectorPage) Capturing() bool  { return false }

func (p *inspectorPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	return []key.Binding{k.Back, k.Up, k.Down, k.Logs, k.Restart, k.StopStart}
}

func (p *inspectorPage) open(role string) { p.role, p.offset = role, 0 }

func (p *inspectorPage) current() (*snapshot.RoleStatus, bool) {
	for i := range p.m.snap.Roles {
		if p.m.snap.Roles[i].Name == p.role {
			return &p.m.snap.Roles[i], true
		}
	}
	return nil, false
}

func (p *inspectorPage) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	keys := p.m.c.Keys
	switch {
	case key.Matches(k, keys.Up):
		p.offset = max(p.offset-1, 0)
		return nil
	case key.Matches(k, keys.Down):
		p.offset++
		return nil
	case key.Matches(k, keys.Inspect):
		return nil
	}
	r, ok := p.current()
	if !ok {
		return nil
	}
	return roleKey(p.m, k, *r)
}

func (p *inspectorPage) View() string {
	lines := p.lines()
	maxOff := max(len(lines)-p.h, 0)
	p.offset = min(p.offset, maxOff)
	return screen(lines[p.offset:], p.w, p.h)
}

func (p *inspectorPage) lines() []string {
	st := p.m.c.Styles
	now := p.m.c.Now()
	r, ok := p.current()
	if !ok {
		return []string{st.Title.Render(p.role) + " · not in the deployment"}
	}
	var out []string
	head := st.Title.Render(r.Name) + " · " + orDash(r.Kind) + " · " + st.stateStyle(r.State).Render(stateText(r, now))
	if r.Remote {
		head += " · remote"
	}
	out = append(out, head)
	uptime := "-"
	if !r.StartedAt.IsZero() && running(r.State) {
		uptime = humanDuration(now.Sub(r.StartedAt))
	}
	pid := "-"
	if r.PID > 0 {
		pid = itoa(r.PID)
	}
	out = append(out, wrapParts("  ", "  ", []string{"pid " + pid, "up " + uptime, fmt.Sprintf("restarts %d", r.Restarts),
		"GPUs " + gpuText(&p.m.snap, r), "routed " + yesNo(r.Routed)}, " · ", p.w)...)
	if l := breakerLine(&p.m.snap, r.Name, now); l != "" {
		out = append(out, l)
	}
	if r.Reason != "" || r.ExitCode != nil {
		l := "  reason: " + orDash(liveReason(r))
		if r.ExitCode != nil {
			l += fmt.Sprintf(" (exit code %d)", *r.ExitCode)
		}
		out = append(out, l)
	}
	load := []string{fmt.Sprintf("in flight %d", r.InFlight)}
	load = append(load, slurmInspectorParts(r)...)
	if r.Proc != nil {
		load = append(load, "CPU "+ftoa(r.Proc.CPUPercent, 0)+"%", "RSS "+humanBytes(r.Proc.RSSBytes),
			fmt.Sprintf("%d threads", r.Proc.Threads), fmt.Sprintf("%d processes", len(r.Proc.PIDs)))
	}
	if per := roleGPUMem(&p.m.snap, r.Name); len(per) > 0 {
		for _, g := range per {
			load = append(load, fmt.Sprintf("GPU %d mem %s of %s", g.index, humanBytes(g.used), humanBytes(g.total)))
		}
	} else if r.GPUMemB > 0 {
		load = append(load, "GPU mem "+humanBytes(r.GPUMemB))
	}
	out = append(out, wrapParts("  ", "  ", load, " · ", p.w)...)
	if c := p.cacheParts(r.Name); len(c) > 0 {
		out = append(out, wrapParts("  ", "  ", c, " · ", p.w)...)
	}
	out = append(out, "  worker "+orDash(r.Worker))
	if r.LogFile != "" {
		out = append(out, "  log "+r.LogFile)
	}
	out = append(out, "")
	out = append(out, st.Title.Render(fmt.Sprintf("ranks %d/%d registered", r.RanksRegistered, r.RanksExpected)))
	if len(r.Ranks) == 0 {
		out = append(out, st.Faint.Render("  no rank has said HELLO yet"))
	}
	for i := range r.Ranks {
		out = append(out, p.rankLines(&r.Ranks[i], now)...)
	}
	return out
}

// cacheParts describe a prefill's prefix cache: the share of its prompt
// tokens found cached over the traffic window, its KV events, and per DP
// rank the blocks they say it holds and the rank's own share.
func (p *inspectorPage) cacheParts(role string) []string {
	var t *snapshot.RoleTraffic
	for i := range p.m.snap.Gateway.Roles {
		if p.m.snap.Gateway.Roles[i].Role == role {
			t = &p.m.snap.Gateway.Roles[i]
		}
	}
	if t == nil || len(t.Cache) == 0 && t.KVEvents == "" {
		return nil
	}
	share := "-"
	if t.PromptTokS > 0 {
		share = ftoa(t.CachedShare*100, 0) + "%"
	}
	parts := []string{"prefix cache " + share + " of prompt tokens cached"}
	switch t.KVEvents {
	case snapshot.KVEventsLive:
		parts = append(parts, "kv events live")
	case snapshot.KVEventsAbsent:
		parts = append(parts, p.m.c.Styles.Busy.Render(t.KVNote))
	}
	for _, c := range t.Cache {
		s := "-"
		if c.PromptTokS > 0 {
			s = ftoa(c.CachedShare*100, 0) + "%"
		}
		parts = append(parts, fmt.Sprintf("dp %d: %d blocks, %s", c.DPRank, c.CachedBlocks, s))
	}
	return parts
}

func (p *inspectorPage) rankLines(k *snapshot.RankStatus, now time.Time) []string {
	st := p.m.c.Styles
	head := []string{fmt.Sprintf("rank %d (identity %d, dp rank %d)", k.Identity, k.Identity, k.DPRank),
		st.stateStyle(k.State).Render(k.State), fmt.Sprintf("in flight %d", k.InFlight)}
	if w := waitText(k, now); w != "" {
		head = append(head, st.Busy.Render(w))
	}
	out := wrapParts("  ", "    ", head, " · ", p.w)
	var tl []string
	for _, step := range []struct {
		name string
		at   time.Time
	}{{"HELLO", k.HelloAt}, {"INIT", k.InitAt}, {"READY", k.ReadyAt}, {"registered", k.RegisteredAt}} {
		if step.at.IsZero() {
			tl = append(tl, step.name+" -")
		} else {
			tl = append(tl, step.name+" "+step.at.Format("15:04:05.000"))
		}
	}
	out = append(out, wrapParts("    ", "      ", tl, " → ", p.w)...)
	if g := k.Registration; g != nil {
		kv := fmt.Sprintf("KV %d blocks", g.NumGPUBlocks)
		if g.KVCacheTokens > 0 {
			kv = fmt.Sprintf("KV %d tokens (%d blocks)", g.KVCacheTokens, g.NumGPUBlocks)
		}
		extra := []string{fmt.Sprintf("max model len %d", g.MaxModelLen), kv,
			fmt.Sprintf("dp %d/%d", g.DPRank, g.DPSize), fmt.Sprintf("tp %d", g.TPSize),
			fmt.Sprintf("world %d", g.WorldSize), orDash(g.Dtype)}
		if g.Bootstrap != "" {
			extra = append(extra, "bootstrap "+g.Bootstrap)
		}
		if g.DisaggMode != "" {
			extra = append(extra, "mode "+g.DisaggMode)
		}
		if g.MaxNumSeqs > 0 {
			extra = append(extra, fmt.Sprintf("max seqs %d", g.MaxNumSeqs))
		}
		if g.Version != "" {
			extra = append(extra, "version "+g.Version)
		}
		out = append(out, wrapParts("    ", "    ", extra, " · ", p.w)...)
	}
	return out
}

// waitText says what a rank that is not registered is waiting for, and
// for how long: "waiting for INIT 42 s".
func waitText(k *snapshot.RankStatus, now time.Time) string {
	var what string
	switch k.State {
	case snapshot.RankWaiting:
		what = "waiting for HELLO"
	case snapshot.RankHello:
		what = "waiting for INIT"
	case snapshot.RankInitSent:
		what = "waiting for READY"
	case snapshot.RankReady:
		what = "waiting for registration"
	case snapshot.RankDisconnected:
		what = "disconnected"
	default:
		return ""
	}
	if k.Since.IsZero() {
		return what
	}
	d := now.Sub(k.Since)
	if d < time.Minute {
		return fmt.Sprintf("%s %d s", what, int(max(d, 0)/time.Second))
	}
	return what + " " + humanDuration(d)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

package tui

import (
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
)

// plannerPage is the SLO planner (profile key slo:, docs/architecture.md
// §4.5): the targets against what each entry measured over the last
// interval, with the trend of its share of the target; the layout that
// runs and the one proposed; the last decision with its reason and
// numbers; what a proposal waits for (a cooldown, a drain, pause, advise
// mode); and the decisions that moved or proposed moving a replica. It
// renders Snapshot.Planner only; every number comes from the daemon.
type plannerPage struct {
	m    *Model
	w, h int
	top  int // first line shown (the page scrolls when the terminal is short)
}

func (p *plannerPage) SetSize(w, h int) { p.w, p.h = w, h }
func (p *plannerPage) Capturing() bool  { return false }

func (p *plannerPage) ShortHelp() []key.Binding {
	k := p.m.c.Keys
	return []key.Binding{k.Back, k.Up, k.Down, k.Events}
}

func (p *plannerPage) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	keys := p.m.c.Keys
	switch {
	case key.Matches(k, keys.Up):
		p.top = max(0, p.top-1)
	case key.Matches(k, keys.Down):
		p.top++
	case key.Matches(k, keys.Top):
		p.top = 0
	case key.Matches(k, keys.Events):
		return p.m.navigate(pageEvents, "")
	}
	return nil
}

func (p *plannerPage) View() string {
	lines := plannerLines(p.m.snap.Planner, p.m.c, p.w)
	p.top = min(p.top, max(0, len(lines)-p.h))
	return screen(lines[p.top:], p.w, p.h)
}

// plannerLines is the page's whole text at width w.
func plannerLines(pl *snapshot.PlannerStatus, c Common, w int) []string {
	st := c.Styles
	if pl == nil {
		return []string{st.Title.Render("planner"), "",
			st.Faint.Render("  no SLO planner: this deployment's profile has no slo: key"),
			st.Faint.Render("  (slo: {ttft_p90: 1s, itl_p90: 50ms, mode: advise} and tsd apply start one; docs/profiles.md)")}
	}
	now := c.Now()
	mode := pl.Mode
	if pl.Paused {
		mode += ", " + st.Warn.Render("paused")
	}
	var targets []string
	if pl.TTFT > 0 {
		targets = append(targets, "TTFT p90 ≤ "+latencyText(pl.TTFT))
	}
	if pl.ITL > 0 {
		targets = append(targets, "ITL p90 ≤ "+latencyText(pl.ITL))
	}
	head := st.Title.Render("planner") + fmt.Sprintf(" · %s · %s · every %s, cooldown %s · GPUs %s",
		mode, strings.Join(targets, ", "), humanDuration(pl.Interval), humanDuration(pl.Cooldown), strings.Join(pl.GPUs, ","))
	out := []string{head}
	if !pl.Next.IsZero() {
		out = append(out, st.Faint.Render(fmt.Sprintf("  next decision in %s · %d move(s) carried out, %d failed and rolled back",
			humanDuration(pl.Next.Sub(now)), pl.Moves, pl.Failed)))
	}
	out = append(out, "")

	// Targets against measured, one row per entry, with the trend.
	spark := max(10, min(40, w-96))
	out = append(out, st.Header.Render(fmt.Sprintf("  %-12s %-10s %8s %9s %9s %9s %9s %6s %9s  %s",
		"ENTRY", "KIND", "REPLICAS", "PROPOSED", "TTFT P90", "ITL P90", "OF TARGET", "OVER", "COOLDOWN", "SHARE OF TARGET (last "+fmt.Sprint(len(longest(pl.Groups)))+" intervals)")))
	for _, g := range pl.Groups {
		proposed := fmt.Sprint(g.Proposed)
		if g.Proposed != g.Replicas {
			proposed = st.Warn.Render(fmt.Sprintf("%8s", fmt.Sprintf("→ %d", g.Proposed)))
		} else {
			proposed = fmt.Sprintf("%8s", proposed)
		}
		of, ofStyle := "idle", st.Faint
		if g.Judged != "" {
			of = fmt.Sprintf("%.0f%% %s", g.Pressure*100, strings.ToUpper(g.Judged))
			switch {
			case g.Pressure > 1:
				ofStyle = st.Bad
			case g.Pressure > 0.8:
				ofStyle = st.Warn
			default:
				ofStyle = st.Good
			}
		}
		cool := "-"
		if g.CooldownUntil.After(now) {
			cool = humanDuration(g.CooldownUntil.Sub(now))
		}
		trend := sparkline(g.PressureSeries, spark, 1.5)
		out = append(out, fmt.Sprintf("  %-12s %-10s %8d %s %9s %9s %s %6d %9s  %s",
			fit(g.Group, 12), g.Kind, g.Replicas, proposed, sampled(g.TTFT, g.TTFTN), sampled(g.ITL, g.ITLN),
			ofStyle.Render(fmt.Sprintf("%9s", of)), g.Streak, cool, trend))
	}
	out = append(out, st.Faint.Render("  share of target: the trend's top is 150%; OVER: consecutive intervals over target"))
	out = append(out, "")

	// What came in, per entry.
	for _, g := range pl.Groups {
		out = append(out, st.Faint.Render(fmt.Sprintf("  %-12s %6.1f req/s · %6.0f prompt tokens/req · %3.0f%% cached · %5.1f in flight · %6d prompt tokens queued (%s) · %7.0f output tok/s",
			fit(g.Group, 12), g.ReqPerSec, g.PromptPerReq, g.CachedShare*100, g.InFlight, g.QueuedPrompt, latencyText(g.Backlog), g.OutputTokPerS)))
	}
	out = append(out, "")

	// The decision.
	label := "decision"
	if !pl.Last.IsZero() {
		label += " (" + humanDuration(now.Sub(pl.Last)) + " ago)"
	}
	out = append(out, wrapText("  "+st.Title.Render(label)+": ", "    ", codeWord(pl.Code)+" — "+pl.Reason, w)...)
	if pl.Proposal != "" {
		out = append(out, "  "+st.Title.Render("proposal")+": "+st.Warn.Render(pl.Proposal))
	}
	if pl.Waiting != "" {
		out = append(out, wrapText("  "+st.Title.Render("waits for")+": ", "    ", pl.Waiting, w)...)
	}
	out = append(out, "")
	out = append(out, st.Title.Render("  changes")+st.Faint.Render(" (proposed, carried out, rolled back; newest last)"))
	if len(pl.Recent) == 0 {
		out = append(out, st.Faint.Render("  none yet"))
	}
	for _, c := range pl.Recent {
		outcome := c.Outcome
		switch c.Outcome {
		case "done":
			outcome = st.Good.Render(outcome)
		case "failed", "rolled back":
			outcome = st.Bad.Render(outcome)
		}
		out = append(out, wrapText(fmt.Sprintf("  %s %s ", c.Time.Format("15:04:05"), outcome), "             ", c.Reason, w)...)
	}
	return out
}

func longest(gs []snapshot.PlannerGroup) []float64 {
	var out []float64
	for _, g := range gs {
		if len(g.PressureSeries) > len(out) {
			out = g.PressureSeries
		}
	}
	return out
}

// codeWord is a decision's code in words.
func codeWord(code string) string {
	switch code {
	case "hold":
		return "hold"
	case "move":
		return "move a replica"
	case "add":
		return "add a replica"
	case "no_donor":
		return "over target, no GPU to spare"
	case "cooldown":
		return "over target, cooling down"
	case "at_max":
		return "over target, at its max"
	}
	return code
}

// sampled is a p90 for the table, "-" with no samples.
func sampled(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return latencyText(d)
}

// latencyText: "18ms", "820ms", "1.2s".
func latencyText(d time.Duration) string { return snapshot.FormatDuration(d) }

package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

// tsd planner pause|resume: an operator takes the wheel back from the SLO
// planner (docs/architecture.md §4.5), and gives it back.
type plannerCmd struct {
	Pause  plannerPauseCmd  `cmd:"" help:"The planner goes on observing and proposing, and changes nothing until tsd planner resume (a move under way completes)."`
	Resume plannerResumeCmd `cmd:"" help:"The planner carries its proposals out again (slo.mode: act)."`
}

type plannerVerbCmd struct {
	ctlTarget
	Target string `arg:"" optional:"" complete:"deployment|file" help:"Deployment name or profile (default: this directory's)."`
}

func (c plannerVerbCmd) run(do string) error {
	f, err := c.locate(controlVerb("tsd planner "+do), c.Target)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	answer, err := supervisor.NewControlClient(f.socket).Command(ctx, "planner", url.Values{"do": {do}})
	if err != nil {
		return unreachable(f, err)
	}
	fmt.Println(answer)
	return nil
}

// Run is tsd planner pause (kong calls the selected verb's Run with the
// verb's own value, so each verb is its own type below).
func (c plannerPauseCmd) Run() error  { return plannerVerbCmd(c).run("pause") }
func (c plannerResumeCmd) Run() error { return plannerVerbCmd(c).run("resume") }

type (
	plannerPauseCmd  plannerVerbCmd
	plannerResumeCmd plannerVerbCmd
)

// plannerLine is the one line tsd status prints of the planner ("" with
// none).
func plannerLine(p *snapshot.PlannerStatus) string {
	if p == nil {
		return ""
	}
	mode := p.Mode
	if p.Paused {
		mode += ", paused"
	}
	s := "planner (" + mode + "): " + p.Code
	if p.Proposal != "" {
		s += ": " + p.Proposal
	}
	if p.Waiting != "" {
		s += " — " + p.Waiting
	}
	return s
}

// renderPlanner prints the planner's targets, each entry's numbers and
// its proposal (tsd plan --running).
func renderPlanner(w io.Writer, p *snapshot.PlannerStatus, now time.Time) {
	if p == nil {
		return
	}
	var targets []string
	if p.TTFT > 0 {
		targets = append(targets, "ttft_p90 "+p.TTFT.String())
	}
	if p.ITL > 0 {
		targets = append(targets, "itl_p90 "+p.ITL.String())
	}
	mode := p.Mode
	if p.Paused {
		mode += ", paused"
	}
	fmt.Fprintf(w, "\nslo planner (%s): %s, every %s, cooldown %s, GPUs %s\n", mode, strings.Join(targets, ", "),
		p.Interval, p.Cooldown, strings.Join(p.GPUs, ","))
	if p.Last.IsZero() {
		fmt.Fprintf(w, "  no decision yet (%s)\n", p.Reason)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ENTRY\tKIND\tREPLICAS\tPROPOSED\tTTFT P90\tITL P90\tOF TARGET\tOVER FOR\tCOOLDOWN")
	for _, g := range p.Groups {
		cool := "-"
		if g.CooldownUntil.After(now) {
			cool = supervisor.HumanDuration(g.CooldownUntil.Sub(now))
		}
		of := "idle"
		if g.Judged != "" {
			of = fmt.Sprintf("%.0f%% (%s)", g.Pressure*100, g.Judged)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\n", g.Group, g.Kind, g.Replicas, g.Proposed,
			latency(g.TTFT, g.TTFTN), latency(g.ITL, g.ITLN), of, g.Streak, cool)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "  decision (%s ago): %s\n", supervisor.HumanDuration(now.Sub(p.Last)), p.Reason)
	if p.Proposal != "" {
		fmt.Fprintf(w, "  proposal: %s\n", p.Proposal)
	}
	if p.Waiting != "" {
		fmt.Fprintf(w, "  waiting:  %s\n", p.Waiting)
	}
}

func latency(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return supervisor.HumanDuration(d)
}

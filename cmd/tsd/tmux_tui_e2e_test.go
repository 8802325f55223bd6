package main

import "testing"

// TestE2ETmuxDashboardDaily runs scripts/e2e-tmux-tui.sh: a dashboard
// attached after "two minutes" of traffic (120 samples at a 100 ms trend
// period) shows all of them in its first frame; at 80x24 a restart's
// drain countdown reads whole while UPTIME, INFL, REQ/S and ERR stay on
// screen; the split and describe views open; a --readonly dashboard
// cannot restart; tsd stop leaves nothing.
func TestE2ETmuxDashboardDaily(t *testing.T) {
	runTmuxScript(t, "e2e-tmux-tui.sh")
}

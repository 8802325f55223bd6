package main

import "testing"

// TestE2ETmuxCLI runs scripts/e2e-tmux-cli.sh: `tsd up -d` draws the
// roles' phases and progress bars in place on a terminal; a bare `tsd
// stop` from an unrelated directory refuses and lists the deployment;
// kill -9 of the daemon and every guardian at once, then `tsd ls` shows it
// dead with the count it left and `tsd stop NAME` leaves no process
// within 5 s.
func TestE2ETmuxCLI(t *testing.T) {
	runTmuxScript(t, "e2e-tmux-cli.sh")
}

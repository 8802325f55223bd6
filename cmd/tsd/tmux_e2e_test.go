package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tsd-project/tsd/testkit/testports"
)

// TestE2ETmuxDashboard runs the dashboard in a real terminal
// (scripts/e2e-tmux.sh): every role ready on screen, restart the decode
// with r + y, kill its engine and see the backoff countdown move on
// screen until it is ready again, find a milestone in its log, quit,
// nothing left. It is a Go
// test so that `make test` has one runner and one summary, and so its
// ports come from the same reservation as every other test's.
func TestE2ETmuxDashboard(t *testing.T) {
	runTmuxScript(t, "e2e-tmux.sh")
}

// TestE2ETmuxDetach runs scripts/e2e-tmux-detach.sh: kill the tmux session
// that ran `tsd up` (an SSH drop), the engines keep serving with the same
// PIDs; kill -9 of an attached dashboard changes nothing; `tsd attach`
// from a new session shows the same roles; q detaches; `tsd stop` leaves
// nothing.
func TestE2ETmuxDetach(t *testing.T) {
	runTmuxScript(t, "e2e-tmux-detach.sh")
}

func runTmuxScript(t *testing.T, script string) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (apt-get install tmux): the dashboard's terminal test did not run")
	}
	if fakeBin == "" {
		t.Skip("ts-fake does not build")
	}
	t.Parallel()
	dist := testports.Range(t, 40)
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", script))
	cmd.Env = append(os.Environ(),
		"TSD_BIN_DIR="+binDir,
		"E2E_PORT="+strconv.Itoa(testports.Port(t)),
		"E2E_DIST="+strconv.Itoa(dist),
		"E2E_BOOT="+strconv.Itoa(dist+20),
		// Its own registry: `tsd ls` and a bare verb's refusal list every
		// registered deployment, so another test's (or a user's) daemon
		// running at the same time would show up on the script's screen.
		"TSD_REGISTRY_DIR="+t.TempDir(),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/%s: %v\n%s", script, err, out)
	}
	t.Logf("%s", out)
}

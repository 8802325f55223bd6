package supervisor

import (
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// TestStartStopAnswers pins what `tsd start` and `tsd stop` of one role do
// in each state: a running role is not started again and a stopped one
// not stopped again (both exit 0, saying so); everything else is sent.
func TestStartStopAnswers(t *testing.T) {
	rows := []struct {
		state          string
		startSend      bool
		startAnswer    string
		stopSend       bool
		stopAnswerWant string
	}{
		{snapshot.StateReady, false, "prefill is already running (ready)", true, "stopping prefill"},
		{snapshot.StateStarting, false, "prefill is already running (starting)", true, "stopping prefill"},
		{snapshot.StateHandshaking, false, "prefill is already running (handshaking)", true, "stopping prefill"},
		{snapshot.StateStalled, false, "prefill is already running (stalled)", true, "stopping prefill"},
		{snapshot.StateDraining, true, "prefill is draining; it starts again once stopped", true, "stopping prefill"},
		{snapshot.StateStopping, true, "prefill is stopping; it starts again once stopped", true, "stopping prefill"},
		{snapshot.StateStopped, true, "starting prefill", false, "prefill is already stopped"},
		{snapshot.StateFailed, true, "starting prefill", false, "prefill is already stopped (failed)"},
		{snapshot.StateBackoff, true, "starting prefill", true, "stopping prefill"},
		{snapshot.StateCrashed, true, "starting prefill", true, "stopping prefill"},
		{snapshot.StateRemote, false, "prefill is remote: tsd does not start its process", false, "prefill is remote: tsd does not stop its process"},
		{"", true, "starting prefill", true, "stopping prefill"}, // not in the snapshot yet: the actor decides
	}
	for _, r := range rows {
		if send, a := startAnswer("prefill", r.state); send != r.startSend || a != r.startAnswer {
			t.Errorf("start in %q: %v %q, want %v %q", r.state, send, a, r.startSend, r.startAnswer)
		}
		if send, a := stopAnswer("prefill", r.state); send != r.stopSend || a != r.stopAnswerWant {
			t.Errorf("stop in %q: %v %q, want %v %q", r.state, send, a, r.stopSend, r.stopAnswerWant)
		}
	}
}

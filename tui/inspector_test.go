package tui

import (
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// Each handshake state names what the rank still waits for and how long.
func TestWaitText(t *testing.T) {
	t.Parallel()
	since := t0.Add(-42 * time.Second)
	for state, want := range map[string]string{
		snapshot.RankWaiting:      "waiting for HELLO 42 s",
		snapshot.RankHello:        "waiting for INIT 42 s",
		snapshot.RankInitSent:     "waiting for READY 42 s",
		snapshot.RankReady:        "waiting for registration 42 s",
		snapshot.RankDisconnected: "disconnected 42 s",
		snapshot.RankRegistered:   "",
	} {
		if got := waitText(&snapshot.RankStatus{State: state, Since: since}, t0); got != want {
			t.Errorf("%s: %q, want %q", state, got, want)
		}
	}
	long := waitText(&snapshot.RankStatus{State: snapshot.RankHello, Since: t0.Add(-3*time.Minute - 7*time.Second)}, t0)
	if long != "waiting for INIT 3m7s" {
		t.Errorf("long wait: %q", long)
	}
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 42 * time.Second: "42s", 187 * time.Second: "3m7s", 187*time.Second + 900*time.Millisecond: "3m7s",
		2*time.Hour + 5*time.Minute: "2h5m", 76 * time.Hour: "3d4h", -time.Second: "0s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}

package tui

import (
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// The gateway line's queue part: nothing while the queue bounds nothing,
// what waits by class, and the sheds since start.
func TestAdmissionPart(t *testing.T) {
	for _, c := range []struct {
		a    *snapshot.AdmissionStatus
		want string
	}{
		{nil, ""},
		{&snapshot.AdmissionStatus{}, "queue 0"},
		{&snapshot.AdmissionStatus{Queued: 4, ByClass: map[string]int{"interactive": 1, "bulk": 3}, Shed: map[string]uint64{"queue_full": 2, "deadline": 1}}, "queue 4 (bulk 3, interactive 1) · 3 shed"},
	} {
		if got := admissionPart(c.a); got != c.want {
			t.Errorf("%+v: %q, want %q", c.a, got, c.want)
		}
	}
}

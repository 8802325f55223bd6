package tui

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tsd-project/tsd/snapshot"
)

// admissionPart is the gateway line's word on its admission queue
// (docs/protocol.md §11.13): what waits, by class, and how many were
// shed since start; "" while the queue bounds nothing.
func admissionPart(a *snapshot.AdmissionStatus) string {
	if a == nil {
		return ""
	}
	s := fmt.Sprintf("queue %d", a.Queued)
	if len(a.ByClass) > 0 {
		classes := make([]string, 0, len(a.ByClass))
		for c, n := range a.ByClass {
			if n > 0 {
				classes = append(classes, fmt.Sprintf("%s %d", c, n))
			}
		}
		sort.Strings(classes)
		if len(classes) > 0 {
			s += " (" + strings.Join(classes, ", ") + ")"
		}
	}
	var shed uint64
	for _, n := range a.Shed {
		shed += n
	}
	if shed > 0 {
		s += fmt.Sprintf(" · %d shed", shed)
	}
	return s
}

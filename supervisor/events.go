package supervisor

import (
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// EventLog is the deployment's event list as its producers see it: the
// gateway's verdicts and the supervisor's own lines go into it, and the
// supervisor's publisher folds them into the Snapshot. It exists before
// the gateway and the supervisor, so each is built with it and neither
// needs the other first (cmd/tsd up.go).
type EventLog struct {
	ch  chan snapshot.Event
	now func() time.Time
}

// NewEventLog returns an event log whose lines are stamped by the wall
// clock.
func NewEventLog() *EventLog { return newEventLog(time.Now) }

func newEventLog(now func() time.Time) *EventLog {
	return &EventLog{ch: make(chan snapshot.Event, 1024), now: now}
}

// Add records one line; role may be "". Safe from any goroutine; it
// never blocks: with the queue full (the publisher backed up, or Run
// over) the line is dropped, since a gateway goroutine must not wait on
// the dashboard.
func (l *EventLog) Add(role, msg string) {
	select {
	case l.ch <- snapshot.Event{Time: l.now(), Role: role, Message: msg}:
	default:
	}
}

// Gateway is the gateway's event sink (gateway.Options.OnEvent): its
// verdicts ("panic", "stall", "readmit") go to the list beside the roles'
// own, their kind first.
func (l *EventLog) Gateway(kind, role, msg string) { l.Add(role, kind+": "+msg) }

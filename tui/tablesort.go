package tui

import (
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

// tableSort is the roles table's order as its own model (o, O, :sort): a
// column ("" = the plan's order) and a direction. The overview owns it;
// the model sorts a copy of each snapshot with it, so the backend's
// snapshot is never reordered.
type tableSort struct {
	by   string // a column id
	desc bool   // largest (or last) first
}

// set orders by a column ("" = the plan's) and says so for the flash.
func (s *tableSort) set(by string, desc bool) string {
	s.by, s.desc = by, desc
	if by == "" {
		return "roles in plan order"
	}
	dir := "ascending"
	if desc {
		dir = "descending"
	}
	return "roles sorted by " + by + " (" + dir + "; o next column, O reverses)"
}

// next is o: the plan's order, then each column in table order (in its
// own first direction), then the plan's order again.
func (s *tableSort) next() string {
	if s.by == "" {
		return s.set(tableColumns[0].id, tableColumns[0].desc)
	}
	for i, c := range tableColumns {
		if c.id == s.by && i+1 < len(tableColumns) {
			return s.set(tableColumns[i+1].id, tableColumns[i+1].desc)
		}
	}
	return s.set("", false)
}

// reverse is O; ok is false in the plan's order, which has no reverse.
func (s *tableSort) reverse() (msg string, ok bool) {
	if s.by == "" {
		return "the table is in the plan's order: o sorts it by a column", false
	}
	return s.set(s.by, !s.desc), true
}

// apply returns snap with its roles in this order (a copy when sorted).
func (s tableSort) apply(snap snapshot.Snapshot, now time.Time) snapshot.Snapshot {
	if s.by != "" {
		snap.Roles = sortRoles(&snap, now, s.by, s.desc)
	}
	return snap
}

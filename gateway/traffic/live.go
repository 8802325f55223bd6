package traffic

import "slices"

// Rows of roles added, removed and renamed while the gateway runs (tsd
// apply, docs/architecture.md §4.3). A row leaves the snapshot's order but
// its counters stay reachable under every name they had: a request still
// in flight may hold a leg's role by its old name until it ends.

// AddRole gives a new role its row (in the order roles are added).
func (b *Book) AddRole(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Contains(b.order, name) {
		delete(b.roles, name) // an old name's counters are another role's
		b.row(name)
	}
}

// RemoveRole takes a role's row out of the snapshot (it was drained and
// stopped); its counts stay in the totals.
func (b *Book) RemoveRole(name string) {
	if name == GatewayRole {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.order = slices.DeleteFunc(slices.Clone(b.order), func(n string) bool { return n == name })
}

// RenameRole shows a role's row, counters and all, under its new name.
func (b *Book) RenameRole(from, to string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.roles[from]
	if !ok || from == GatewayRole || slices.Contains(b.order, to) {
		return
	}
	b.roles[to] = a // the old name still finds it, for requests in flight
	if c, ok := b.caches[from]; ok {
		b.caches[to] = c
	}
	for i, n := range b.order {
		if n == from {
			b.order[i] = to
		}
	}
}

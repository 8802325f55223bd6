package lane

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tsd-project/tsd/profiles"
)

// Workers added, removed and renamed while the lane runs (tsd apply,
// docs/architecture.md §4.3; docs/protocol.md §1.6). The worker set is an
// immutable value: readers (dispatch, the gateway) take it without a lock,
// and each change, made under the lane's mutex, publishes a new one.

// workerSet is the lane's workers in plan order and by role.
type workerSet struct {
	workers []*Worker
	byRole  map[string]*Worker
}

// admit checks a worker plan against the set: its addresses, its name and
// its handshake address must be its own.
func (s *workerSet) admit(p profiles.WorkerPlan) (profiles.WorkerPlan, error) {
	addr, err := resolveAddrs(p)
	if err != nil {
		return addr, fmt.Errorf("worker %s: %w", p.Role, err)
	}
	if _, dup := s.byRole[p.Role]; dup {
		return addr, fmt.Errorf("worker %s listed twice", p.Role)
	}
	if !strings.HasSuffix(addr.Handshake, ":0") {
		for _, o := range s.workers {
			if o.plan.Handshake == addr.Handshake {
				return addr, fmt.Errorf("workers %s and %s share handshake address %s (their ipc paths derive the same port; rename one)", o.Role(), p.Role, addr.Handshake)
			}
		}
	}
	return addr, nil
}

// with is the set plus w, after the others.
func (s *workerSet) with(w *Worker) *workerSet {
	n := &workerSet{workers: append(append([]*Worker(nil), s.workers...), w), byRole: make(map[string]*Worker, len(s.byRole)+1)}
	for k, v := range s.byRole {
		n.byRole[k] = v
	}
	n.byRole[w.Role()] = w
	return n
}

// without is the set less w.
func (s *workerSet) without(w *Worker) *workerSet {
	n := &workerSet{byRole: make(map[string]*Worker, len(s.byRole))}
	for _, o := range s.workers {
		if o != w {
			n.workers = append(n.workers, o)
			n.byRole[o.Role()] = o
		}
	}
	return n
}

// AddWorker binds a new worker's sockets (input, output, then handshake)
// on a bound lane and starts it: the engine it belongs to may dial as
// soon as this returns. Nothing changes when it fails.
func (l *Lane) AddWorker(p profiles.WorkerPlan) (*Worker, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.bound {
		return nil, errors.New("add worker: the lane is not bound")
	}
	set := l.set.Load()
	addr, err := set.admit(p)
	if err != nil {
		return nil, err
	}
	w := newWorker(l, addr)
	if err := w.bind(); err != nil {
		_ = w.close()
		l.broker.forgetRole(p.Role)
		return nil, fmt.Errorf("bind worker %s: %w", p.Role, err)
	}
	if w.plan.Remote {
		l.log.Warn(RemoteLaneWarning(p.Role))
	}
	l.set.Store(set.with(w))
	w.start()
	l.changed.notify()
	return w, nil
}

// RemoveWorker takes a worker out of the lane, closes its sockets
// (removing its ipc files; whatever is still in flight on it fails) and
// forgets its ranks.
func (l *Lane) RemoveWorker(role string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.set.Load()
	w, ok := set.byRole[role]
	if !ok {
		return fmt.Errorf("remove worker %s: no such worker", role)
	}
	l.set.Store(set.without(w))
	err := w.close()
	l.broker.forgetRole(role)
	l.changed.notify()
	if err != nil {
		return fmt.Errorf("close worker %s: %w", role, err)
	}
	return nil
}

// RenameWorker gives a worker a new name: its sockets, ranks and requests
// in flight stay; rank events from now on carry the new name, and the
// current rank states are moved to it.
func (l *Lane) RenameWorker(from, to string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.set.Load()
	w, ok := set.byRole[from]
	if !ok {
		return fmt.Errorf("rename worker %s: no such worker", from)
	}
	if _, taken := set.byRole[to]; taken && from != to {
		return fmt.Errorf("rename worker %s to %s: that name is taken", from, to)
	}
	name := to
	w.name.Store(&name)
	n := &workerSet{workers: set.workers, byRole: make(map[string]*Worker, len(set.byRole))}
	for k, v := range set.byRole {
		if k != from {
			n.byRole[k] = v
		}
	}
	n.byRole[to] = w
	l.set.Store(n)
	l.broker.rename(from, to)
	l.changed.notify()
	return nil
}

// forgetRole drops every rank state of role.
func (b *broker) forgetRole(role string) {
	b.mu.Lock()
	for k := range b.cur {
		if k.role == role {
			delete(b.cur, k)
		}
	}
	b.mu.Unlock()
}

// rename moves role's current rank states to its new name (a state the
// worker already published under the new name wins).
func (b *broker) rename(from, to string) {
	b.mu.Lock()
	for k, ev := range b.cur {
		if k.role != from {
			continue
		}
		delete(b.cur, k)
		nk := brokerKey{to, k.id}
		if _, ok := b.cur[nk]; !ok {
			ev.Role = to
			b.cur[nk] = ev
		}
	}
	b.mu.Unlock()
}

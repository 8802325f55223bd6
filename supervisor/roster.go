package supervisor

import (
	"fmt"
	"sync/atomic"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The roster is which role instances the deployment has, in plan order,
// and the one place where their names map to their ids
// (docs/architecture.md §4.3). Inside the supervisor an instance is its
// id, given when its actor is made and never reused: the actors, the
// runs table, the records of live groups, the log rings and the
// publisher's roles are keyed by it. A name is how the edges speak — the
// control socket, the snapshots, the gateway's calls by role name — and
// they ask the roster, so a rename changes this one map and nothing
// else.
//
// It is an immutable value: one goroutine (rosterOwner.loop) owns the
// changes — an instance added, removed, renamed, replanned or reordered
// while the deployment runs is a command to it — and publishes each new
// value, so every reader (the controls, the rank fan-out, the publisher,
// the /proc scan, the log subscribers, the runs table) takes the current
// one without a lock and never sees half a change.

// member is one instance as the rest of the supervisor sees it. An
// actor's own plan belongs to its goroutine; readers use these copies.
type member struct {
	id      int
	name    string
	group   string
	kind    string
	local   bool
	a       *actor
	initial snapshot.RoleStatus // shown until the actor publishes its own
}

// nameRef is what a name points at: an instance, under its current
// name, or under the one it had before its last rename.
type nameRef struct {
	id int
	// former: the instance had this name before its last rename. Only
	// the gateway's calls (a rank event, a connecting rank's pids) still
	// find it by it, since the gateway may speak of the old name until
	// its worker is renamed and its queued events are read; the
	// operator's commands never do. A new instance or rename that takes
	// the name drops it.
	former bool
}

type roster struct {
	members []member
	byID    map[int]int // id → index in members
	names   map[string]nameRef
	// superseded is closed when a newer roster replaces this one.
	superseded chan struct{}
}

// newRoster makes a roster of members under their names, keeping the
// former names of formers whose instances are still members.
func newRoster(members []member, formers map[string]nameRef) *roster {
	r := &roster{members: members, byID: make(map[int]int, len(members)), names: make(map[string]nameRef, len(members)),
		superseded: make(chan struct{})}
	for i, m := range members {
		r.byID[m.id] = i
	}
	for n, ref := range formers {
		if _, ok := r.byID[ref.id]; ok && ref.former {
			r.names[n] = ref
		}
	}
	for _, m := range members {
		r.names[m.name] = nameRef{id: m.id}
	}
	return r
}

// names lists the current names in plan order.
func (r *roster) list() []string {
	out := make([]string, len(r.members))
	for i, m := range r.members {
		out[i] = m.name
	}
	return out
}

// find is the instance named name now: what the operator's commands
// (the control socket, the dashboard) and the snapshots mean by it.
func (r *roster) find(name string) (member, bool) {
	ref, ok := r.names[name]
	if !ok || ref.former {
		return member{}, false
	}
	return r.get(ref.id)
}

// route is the instance the gateway means by name: its current name, or
// the one it had before its last rename (nameRef.former).
func (r *roster) route(name string) (member, bool) {
	ref, ok := r.names[name]
	if !ok {
		return member{}, false
	}
	return r.get(ref.id)
}

// get is the instance with id.
func (r *roster) get(id int) (member, bool) {
	i, ok := r.byID[id]
	if !ok {
		return member{}, false
	}
	return r.members[i], true
}

// nameOf is id's name now ("" once it left the roster).
func (r *roster) nameOf(id int) string {
	m, _ := r.get(id)
	return m.name
}

type rosterOp int

const (
	opAdd     rosterOp = iota // a new actor for rp, after the members (the caller runs it)
	opRemove                  // drop id's actor, which has ended
	opRename                  // id's instance is `to` now; its old name stays a former one
	opRefresh                 // id's member takes rp's group, kind and place (a replanned instance)
	opOrder                   // members in the order of names (the plan's)
)

type rosterCmd struct {
	op    rosterOp
	id    int
	to    string
	rp    profiles.RolePlan
	order []string
	reply chan rosterReply
}

// rosterReply is the roster's answer to a command: the actor it made
// (opAdd), or why it refused.
type rosterReply struct {
	a   *actor
	err error
}

// rosterOwner owns the roster: the current value, the commands that
// change it and the ids it hands out.
type rosterOwner struct {
	cur  atomic.Pointer[roster]
	cmds chan rosterCmd
	done chan struct{} // closed when loop has ended
	// nextID is the last id handed out: by init, then by loop only.
	nextID int
	// build makes the actor of a new instance (its ring, its log file,
	// its first state); forget tells the publisher an instance left.
	build  func(id int, rp profiles.RolePlan) (*actor, error)
	forget func(id int)
}

func newRosterOwner(build func(int, profiles.RolePlan) (*actor, error), forget func(int)) *rosterOwner {
	o := &rosterOwner{cmds: make(chan rosterCmd), done: make(chan struct{}), build: build, forget: forget}
	o.cur.Store(newRoster(nil, nil))
	return o
}

// init makes the actors of the plan's roles, before the loop runs.
func (o *rosterOwner) init(roles []profiles.RolePlan) error {
	var members []member
	seen := map[string]bool{}
	for _, rp := range roles {
		if seen[rp.Name] {
			closeMembers(members)
			return fmt.Errorf("plan has two roles named %q", rp.Name)
		}
		seen[rp.Name] = true
		o.nextID++
		a, err := o.build(o.nextID, rp)
		if err != nil {
			closeMembers(members)
			return err
		}
		members = append(members, memberOf(o.nextID, rp, a))
	}
	o.set(newRoster(members, nil))
	return nil
}

// current is the roster now.
func (o *rosterOwner) current() *roster { return o.cur.Load() }

// nameOf is id's name now (an actor's gateway calls, events and log
// lines speak it).
func (o *rosterOwner) nameOf(id int) string { return o.current().nameOf(id) }

// rename gives id the name to (an actor's fxRename, on its goroutine).
func (o *rosterOwner) rename(id int, to string) error {
	_, err := o.change(rosterCmd{op: opRename, id: id, to: to})
	return err
}

// change asks the owner for one change and waits for its answer.
func (o *rosterOwner) change(c rosterCmd) (*actor, error) {
	c.reply = make(chan rosterReply, 1)
	select {
	case o.cmds <- c:
	case <-o.done:
		return nil, ErrNotRunning
	}
	select {
	case r := <-c.reply:
		return r.a, r.err
	case <-o.done:
		return nil, ErrNotRunning
	}
}

// loop owns roster changes until stop is closed.
func (o *rosterOwner) loop(stop <-chan struct{}) {
	defer close(o.done)
	for {
		select {
		case <-stop:
			return
		case c := <-o.cmds:
			a, err := o.apply(c)
			c.reply <- rosterReply{a: a, err: err}
		}
	}
}

// apply makes one change and publishes the new roster.
func (o *rosterOwner) apply(c rosterCmd) (*actor, error) {
	cur := o.current()
	members := append([]member(nil), cur.members...)
	formers := map[string]nameRef{}
	for n, ref := range cur.names {
		if ref.former {
			formers[n] = ref
		}
	}
	idx, ok := cur.byID[c.id]
	var made *actor
	switch c.op {
	case opAdd:
		if _, taken := cur.find(c.rp.Name); taken {
			return nil, fmt.Errorf("add %s: a role of that name runs", c.rp.Name)
		}
		o.nextID++
		a, err := o.build(o.nextID, c.rp)
		if err != nil {
			return nil, err
		}
		made = a
		members = append(members, memberOf(o.nextID, c.rp, a))
		delete(formers, c.rp.Name)
	case opRemove:
		if !ok {
			return nil, fmt.Errorf("%w (instance %d)", ErrUnknownRole, c.id)
		}
		m := members[idx]
		members = append(members[:idx], members[idx+1:]...)
		if m.a.file != nil {
			m.a.file.Close()
		}
		defer o.forget(m.id)
	case opRename:
		if !ok {
			return nil, fmt.Errorf("%w (instance %d)", ErrUnknownRole, c.id)
		}
		from := members[idx].name
		if other, taken := cur.find(c.to); taken && other.id != c.id {
			return nil, fmt.Errorf("rename %s to %s: a role of that name runs", from, c.to)
		}
		members[idx].name = c.to
		delete(formers, c.to)
		if from != c.to {
			formers[from] = nameRef{id: c.id, former: true}
		}
	case opRefresh:
		if !ok {
			return nil, fmt.Errorf("%w (instance %d)", ErrUnknownRole, c.id)
		}
		members[idx].group, members[idx].kind, members[idx].local = c.rp.Group, c.rp.Kind, c.rp.Local
	case opOrder:
		pos := map[string]int{}
		for i, n := range c.order {
			pos[n] = i
		}
		sorted := make([]member, 0, len(members))
		for _, n := range c.order {
			if m, ok := cur.find(n); ok {
				sorted = append(sorted, members[cur.byID[m.id]])
			}
		}
		for _, m := range members {
			if _, ok := pos[m.name]; !ok {
				sorted = append(sorted, m)
			}
		}
		members = sorted
	}
	o.set(newRoster(members, formers))
	return made, nil
}

func memberOf(id int, rp profiles.RolePlan, a *actor) member {
	return member{id: id, name: rp.Name, group: rp.Group, kind: rp.Kind, local: rp.Local, a: a, initial: a.st}
}

// set publishes r and wakes whoever waits on the previous one.
func (o *rosterOwner) set(r *roster) {
	old := o.cur.Swap(r)
	if old != nil {
		close(old.superseded)
	}
}

// closeFiles closes every member's log file (Run's end).
func (o *rosterOwner) closeFiles() { closeMembers(o.current().members) }

func closeMembers(ms []member) {
	for _, m := range ms {
		if m.a.file != nil {
			m.a.file.Close()
		}
	}
}

package supervisor

import (
	"fmt"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// The roster is which actors the deployment has, in plan order, under
// which names (docs/architecture.md §4.3). It is an immutable value: one
// goroutine (rosterLoop) owns the changes — an actor added, removed or
// renamed while the deployment runs is a command to it — and publishes
// each new value, so every reader (the controls, the rank fan-out, the
// publisher, the /proc scan, the log subscribers) takes the current one
// without a lock and never sees half a change.

// member is one actor as the rest of the supervisor sees it. An actor's
// own plan belongs to its goroutine; readers use these copies.
type member struct {
	name    string
	group   string
	kind    string
	local   bool
	a       *actor
	initial snapshot.RoleStatus // shown until the actor publishes its own
}

type roster struct {
	members []member
	// byName finds an actor by any name it answers to: during a rename
	// both the old and the new name, so no rank event is lost in between.
	byName map[string]*actor
	// superseded is closed when a newer roster replaces this one.
	superseded chan struct{}
}

func newRoster(members []member) *roster {
	r := &roster{members: members, byName: map[string]*actor{}, superseded: make(chan struct{})}
	for _, m := range members {
		r.byName[m.name] = m.a
	}
	return r
}

// names lists the member names in plan order.
func (r *roster) names() []string {
	out := make([]string, len(r.members))
	for i, m := range r.members {
		out[i] = m.name
	}
	return out
}

// member finds the member an actor answers to name as.
func (r *roster) member(name string) (member, bool) {
	a, ok := r.byName[name]
	if !ok {
		return member{}, false
	}
	for _, m := range r.members {
		if m.a == a {
			return m, true
		}
	}
	return member{}, false
}

type rosterOp int

const (
	opAdd         rosterOp = iota // a new actor for rp, after the members (not started)
	opRemove                      // drop name's actor, which has ended
	opRenameBegin                 // name's actor answers to `to` as well
	opRenameEnd                   // name's actor is `to` now, and no longer name
	opRefresh                     // name's member takes rp's kind and place (a replanned instance)
	opOrder                       // members in the order of names (the plan's)
)

type rosterCmd struct {
	op    rosterOp
	name  string
	to    string
	rp    profiles.RolePlan
	order []string
	reply chan rosterReply
}

type rosterReply struct {
	a   *actor
	err error
}

// changeRoster asks the roster's owner for one change and waits for it.
func (s *Supervisor) changeRoster(c rosterCmd) (*actor, error) {
	c.reply = make(chan rosterReply, 1)
	select {
	case s.rosterCmds <- c:
	case <-s.rosterDone:
		return nil, ErrNotRunning
	}
	select {
	case r := <-c.reply:
		return r.a, r.err
	case <-s.rosterDone:
		return nil, ErrNotRunning
	}
}

// rosterLoop owns roster changes until stop is closed.
func (s *Supervisor) rosterLoop(stop <-chan struct{}) {
	defer close(s.rosterDone)
	for {
		select {
		case <-stop:
			return
		case c := <-s.rosterCmds:
			a, err := s.rosterApply(c)
			c.reply <- rosterReply{a: a, err: err}
		}
	}
}

// rosterApply makes one change and publishes the new roster.
func (s *Supervisor) rosterApply(c rosterCmd) (*actor, error) {
	cur := s.roster()
	members := append([]member(nil), cur.members...)
	aliases := map[string]*actor{}
	for n, a := range cur.byName {
		aliases[n] = a
	}
	var made *actor
	find := func(name string) int {
		a := cur.byName[name]
		for i, m := range members {
			if a != nil && m.a == a {
				return i
			}
		}
		return -1
	}
	switch c.op {
	case opAdd:
		if _, dup := cur.byName[c.rp.Name]; dup {
			return nil, fmt.Errorf("add %s: a role of that name runs", c.rp.Name)
		}
		a, err := s.makeActor(c.rp)
		if err != nil {
			return nil, err
		}
		made = a
		members = append(members, memberOf(a))
		aliases[c.rp.Name] = a
	case opRemove:
		i := find(c.name)
		if i < 0 {
			return nil, fmt.Errorf("%w %q", ErrUnknownRole, c.name)
		}
		m := members[i]
		members = append(members[:i], members[i+1:]...)
		for n, a := range aliases {
			if a == m.a {
				delete(aliases, n)
			}
		}
		if m.a.file != nil {
			m.a.file.Close()
		}
		defer func() { s.pub.in <- pubMsg{id: m.a.id, forget: true} }()
	case opRenameBegin:
		i := find(c.name)
		if i < 0 {
			return nil, fmt.Errorf("%w %q", ErrUnknownRole, c.name)
		}
		if o, taken := aliases[c.to]; taken && o != members[i].a {
			return nil, fmt.Errorf("rename %s to %s: a role of that name runs", c.name, c.to)
		}
		aliases[c.to] = members[i].a
	case opRenameEnd:
		i := find(c.to)
		if i < 0 {
			return nil, fmt.Errorf("%w %q", ErrUnknownRole, c.to)
		}
		members[i].name = c.to
		if aliases[c.name] == members[i].a {
			delete(aliases, c.name)
		}
	case opRefresh:
		i := find(c.name)
		if i < 0 {
			return nil, fmt.Errorf("%w %q", ErrUnknownRole, c.name)
		}
		members[i].group, members[i].kind, members[i].local = c.rp.Group, c.rp.Kind, c.rp.Local
	case opOrder:
		pos := map[string]int{}
		for i, n := range c.order {
			pos[n] = i
		}
		sorted := make([]member, 0, len(members))
		var rest []member
		for _, n := range c.order {
			if i := find(n); i >= 0 {
				sorted = append(sorted, members[i])
			}
		}
		for _, m := range members {
			if _, ok := pos[m.name]; !ok {
				rest = append(rest, m)
			}
		}
		members = append(sorted, rest...)
	}
	next := newRoster(members)
	next.byName = aliases
	s.setRoster(next)
	if made != nil {
		go made.run(false)
	}
	return made, nil
}

func memberOf(a *actor) member {
	return member{name: a.plan.Name, group: a.plan.Group, kind: a.plan.Kind, local: a.plan.Local, a: a, initial: a.st}
}

// roster is the current roster.
func (s *Supervisor) roster() *roster { return s.ros.Load() }

// setRoster publishes r and wakes whoever waits on the previous one.
func (s *Supervisor) setRoster(r *roster) {
	old := s.ros.Swap(r)
	if old != nil {
		close(old.superseded)
	}
}

// makeActor builds the actor of one role instance: its ring, its log file
// and its first state.
func (s *Supervisor) makeActor(rp profiles.RolePlan) (*actor, error) {
	ring := newLogRing(rp.Name, s.opts.LogLines, s.opts.LogBytes)
	var file *rotatingFile
	if rp.Local && rp.LogFile != "" && !s.opts.NoLogFiles {
		f, err := openRotating(rp.LogFile, s.opts.LogFileMax, s.opts.LogFileKeep)
		if err != nil {
			return nil, fmt.Errorf("role %s: %w", rp.Name, err)
		}
		file = f
	}
	s.nextID++
	a := newActor(s.env, s.nextID, rp, ranksExpected(rp, s.Plan().Gateway.Mode), ring, file)
	a.watchFile(s)
	return a, nil
}
